"""CompileJobs are written by the operator alone (issue 46): the installed release's ValidatingAdmissionPolicy
(charts/tensorkiln/templates/compilejob-admission.yaml) refuses a tenant whom RBAC lets write CompileJobs.

The tenant, `tenant-a`, is this machine's admin impersonating a user (Impersonate-User), granted in the test
namespace the built-in `edit` ClusterRole and a Role on compilejobs and compilejobs/status: `edit` has no
TensorKiln resource (the chart aggregates none into it), so without that Role RBAC would refuse first and
the policy would go untested. The session's operator (the release `tensorkiln`, every namespace) creates
the CompileJobs of a model on the simulated GPU pools; the tenant may neither create one nor edit one's
spec or status, each refusal naming the policy, the tenant and what to do instead; a label, metadata
alone, is admitted.
"""

import copy
import json
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from tensorkiln_api import GROUP, VERSION
from tensorkiln_local import install

from .helpers import wait_for

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[2]
SAMPLE = yaml.safe_load((REPO / "manifests/samples/resnet50-gpu.yaml").read_text())
TENANT = "tenant-a"
POLICY = f"{install.RELEASE}-compilejob-writers"  # the release's full name is its name, `tensorkiln`
OPERATOR = f"system:serviceaccount:{install.NAMESPACE}:{install.RELEASE}"


@pytest.fixture
def tenant(api, namespace):
    """CustomObjectsApi as `tenant-a`, whom RBAC lets create, update and patch CompileJobs in `namespace`."""
    rbac = client.RbacAuthorizationV1Api(api)
    rules = [{"apiGroups": [GROUP], "resources": ["compilejobs", "compilejobs/status"],
              "verbs": ["get", "list", "watch", "create", "update", "patch"]}]  # fmt: skip
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "compilejobs"}, "rules": rules})
    for kind, role in (("ClusterRole", "edit"), ("Role", "compilejobs")):
        binding = {
            "metadata": {"name": f"{TENANT}-{role}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": TENANT}],
        }
        rbac.create_namespaced_role_binding(namespace, binding)
    authorization = client.AuthorizationV1Api(api)

    def allowed(verb: str, subresource: str = "") -> bool:
        attributes = {"namespace": namespace, "group": GROUP, "resource": "compilejobs", "verb": verb}
        review = {"spec": {"user": TENANT, "resourceAttributes": {**attributes, "subresource": subresource}}}
        return authorization.create_subject_access_review(review).status.allowed

    wait_for(lambda: allowed("create") and allowed("patch") and allowed("patch", "status"), timeout=30,
             what=f"RBAC to let {TENANT} write compilejobs")  # fmt: skip
    with client.ApiClient(api.configuration, header_name="Impersonate-User", header_value=TENANT) as as_tenant:
        yield client.CustomObjectsApi(as_tenant)


def refusal(call) -> str:
    """The message of the API server's refusal of `call`, which must be the policy's."""
    with pytest.raises(client.ApiException) as refused:
        call()
    message = json.loads(refused.value.body)["message"]
    assert refused.value.status in (403, 422), (refused.value.status, message)
    assert f"ValidatingAdmissionPolicy '{POLICY}'" in message, message
    return message


def test_a_tenant_can_neither_create_nor_edit_a_compile_job(api, operator, namespace, tenant):
    custom = client.CustomObjectsApi(api)
    model = copy.deepcopy(SAMPLE)
    model["metadata"] = {"name": "resnet50", "namespace": namespace}
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", model)

    def compile_jobs() -> list[dict]:
        return custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "compilejobs")["items"]

    # The operator's own writes are admitted: its CompileJobs exist.
    existing = wait_for(compile_jobs, timeout=120, what="the operator's CompileJobs")[0]
    name = existing["metadata"]["name"]
    says = f"CompileJobs are written by the TensorKiln operator ({OPERATOR}) alone; {TENANT} may not"
    instead = "apply an InferenceModel instead"

    forged = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "CompileJob",
        "metadata": {"name": "forged", "namespace": namespace},
        "spec": {**existing["spec"], "image": "registry.example.test/anything:1"},
    }
    message = refusal(lambda: tenant.create_namespaced_custom_object(GROUP, VERSION, namespace, "compilejobs", forged))
    assert f"{says} create one" in message and instead in message, message

    spec = {"spec": {"image": "registry.example.test/anything:1"}}
    message = refusal(
        lambda: tenant.patch_namespaced_custom_object(GROUP, VERSION, namespace, "compilejobs", name, spec)
    )
    assert f"{says} change the spec of one" in message and instead in message, message

    status = {"status": {"message": f"written by {TENANT}"}}
    message = refusal(
        lambda: tenant.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, "compilejobs", name, status)
    )
    assert f"{says} change the status of one" in message and instead in message, message

    # Metadata alone passes (as the garbage collector's and finalizers' updates do): RBAC lets the tenant
    # write, so the refusals above were the policy's.
    tenant.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "compilejobs", name, {"metadata": {"labels": {"example.test/seen-by": TENANT}}}
    )
    after = {j["metadata"]["name"]: j for j in compile_jobs()}
    assert "forged" not in after
    assert after[name]["spec"]["image"] == existing["spec"]["image"]
    assert after[name].get("status", {}).get("message") != f"written by {TENANT}"
