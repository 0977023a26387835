"""CompileJobs are written by the operator alone (issue 46): the chart's ValidatingAdmissionPolicy
(templates/compilejob-admission.yaml), rendered with helm, its CEL evaluated with cel-python as the API server
evaluates it: variables in order, then each validation, its messageExpression when it fails.

The real API server runs it in tests/integration/test_compilejob_admission.py.
"""

import copy
import datetime
import subprocess
from pathlib import Path

import celpy
import pytest
import yaml
from celpy import celtypes
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tensorkiln_local import install, installmanifests, rbac

ROOT = Path(__file__).resolve().parents[2]
RELEASE, NAMESPACE = "tk", "tk-system"
NAME = "tk-tensorkiln-compilejob-writers"
OPERATOR = "system:serviceaccount:tk-system:tk-tensorkiln"
TENANT = "tenant-a"
GARBAGE_COLLECTOR = "system:serviceaccount:kube-system:generic-garbage-collector"

COMPILE_JOB = {
    "apiVersion": "tensorkiln.dev/v1alpha1",
    "kind": "CompileJob",
    "metadata": {
        "name": "resnet--cpu-x86-64-avx2",
        "namespace": "team-a",
        "ownerReferences": [
            {"apiVersion": "tensorkiln.dev/v1alpha1", "kind": "InferenceModel", "name": "resnet", "uid": "u-1"}
        ],
        "finalizers": ["kopf.zalando.org/KopfFinalizerMarker"],
    },
    "spec": {
        "modelName": "resnet",
        "source": {"uri": "https://models.example.test/resnet50.onnx"},
        "hardware": {"className": "cpu-x86-64-avx2", "kind": "CPU", "nodeSelector": {"kubernetes.io/arch": "amd64"}},
        "compilers": ["OnnxRuntime"],
        "registry": {"uri": "pvc://tensorkiln-registry/engines"},
        "image": "ghcr.io/tensorkiln/compiler:0.1.0",
        "optionsHash": "0" * 64,
    },
    "status": {"phase": "Succeeded", "conditions": [{"type": "Compiled", "status": "True"}]},
}


def render(values=None) -> list[dict]:
    text = installmanifests.template(values, release=RELEASE, namespace=NAMESPACE)
    return [d for d in installmanifests.documents(text) if d["kind"].startswith("ValidatingAdmissionPolicy")]


def objects(values=None) -> tuple[dict, dict]:
    """(the policy, its binding)."""
    docs = render(values)
    (policy,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    (binding,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    return policy, binding


# --- the API server's evaluation, offline -------------------------------------------------------

_ENVIRONMENT = celpy.Environment()


def _evaluate(expression: str, activation: dict):
    try:
        return _ENVIRONMENT.program(_ENVIRONMENT.compile(expression)).evaluate(activation)
    except celpy.CELEvalError as error:  # kept as a value: an unused variable's error is no refusal
        return error


def judge(policy: dict, username: str, operation: str, obj: dict, old: dict | None = None, sub_resource: str = ""):
    """None when `policy` admits the request, else (reason, message) as the API server words its refusal.
    The request as AdmissionRequest serialises it (subResource left out when empty)."""
    request = {
        "operation": operation,
        "userInfo": {"username": username, "groups": ["system:authenticated"]},
        "namespace": obj["metadata"]["namespace"],
        "name": obj["metadata"]["name"],
        "resource": {"group": "tensorkiln.dev", "version": "v1alpha1", "resource": "compilejobs"},
    }
    if sub_resource:
        request["subResource"] = sub_resource
    activation = {
        "request": celpy.json_to_cel(request),
        "object": celpy.json_to_cel(obj),
        "oldObject": celpy.json_to_cel(old),
    }
    variables = {}
    for variable in policy["spec"].get("variables", []):
        activation["variables"] = celtypes.MapType(variables)
        variables[celtypes.StringType(variable["name"])] = _evaluate(variable["expression"], activation)
    activation["variables"] = celtypes.MapType(variables)
    for validation in policy["spec"]["validations"]:
        holds = _evaluate(validation["expression"], activation)
        assert not isinstance(holds, celpy.CELEvalError), f"{validation['expression']}: {holds}"
        if not holds:
            message = _evaluate(validation["messageExpression"], activation)
            assert isinstance(message, str), message
            return validation.get("reason", "Invalid"), str(message)
    return None


def matches(policy: dict, operation: str, resource: str) -> bool:
    """Whether the policy's matchConstraints select the request (group tensorkiln.dev, any version)."""
    return any(
        "tensorkiln.dev" in rule["apiGroups"] and resource in rule["resources"] and operation in rule["operations"]
        for rule in policy["spec"]["matchConstraints"]["resourceRules"]
    )


def edited(**changes) -> tuple[dict, dict]:
    """(new, old): COMPILE_JOB with `changes` (spec, status or metadata, merged one level down)."""
    new = copy.deepcopy(COMPILE_JOB)
    for part, value in changes.items():
        new[part] = {**new[part], **value}
    return new, COMPILE_JOB


# --- rendering ----------------------------------------------------------------------------------


def test_rendered_by_default_cluster_wide_denying(helm):
    policy, binding = objects()
    assert policy["metadata"]["name"] == binding["metadata"]["name"] == NAME
    assert binding["spec"]["policyName"] == NAME
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert "matchResources" not in binding["spec"]  # every namespace: the release watches them all
    assert policy["spec"]["failurePolicy"] == "Fail"
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == ["tensorkiln.dev"] and rule["apiVersions"] == ["*"]
    assert set(rule["resources"]) == {"compilejobs", "compilejobs/status"}
    assert set(rule["operations"]) == {"CREATE", "UPDATE"}  # DELETE allowed: the operator compiles again
    assert not policy["spec"].get("paramKind")
    for doc in (policy, binding):
        assert doc["apiVersion"] == "admissionregistration.k8s.io/v1"
        assert "namespace" not in doc["metadata"]  # cluster-scoped
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE


def test_binding_covers_the_watched_namespaces_only(helm):
    _, binding = objects({"watchNamespaces": ["team-a", "team-b"]})
    assert binding["spec"]["matchResources"] == {
        "namespaceSelector": {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a", "team-b"]}
            ]
        }
    }


def test_disabled_renders_neither(helm):
    assert render({"compileJobAdmission": {"enabled": False}}) == []


def test_the_admitted_operator_is_the_deployments_service_account(helm):
    docs = installmanifests.documents(installmanifests.template(None, release=RELEASE, namespace=NAMESPACE))
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (account,) = [d for d in docs if d["kind"] == "ServiceAccount"]
    name = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    assert name == account["metadata"]["name"] and f"system:serviceaccount:{NAMESPACE}:{name}" == OPERATOR
    policy, _ = objects()
    assert judge(policy, OPERATOR, "CREATE", COMPILE_JOB) is None
    # An existing ServiceAccount (serviceAccount.create false): that one.
    existing, _ = objects({"serviceAccount": {"create": False, "name": "tensorkiln-operator"}})
    assert judge(existing, "system:serviceaccount:tk-system:tensorkiln-operator", "CREATE", COMPILE_JOB) is None
    assert judge(existing, OPERATOR, "CREATE", COMPILE_JOB) is not None


def test_two_releases_get_objects_of_their_own_admitting_their_own_operator(helm):
    other, other_binding = objects({"fullnameOverride": "tensorkiln-b", "watchNamespaces": ["team-b"]})
    assert other["metadata"]["name"] == other_binding["spec"]["policyName"] == "tensorkiln-b-compilejob-writers"
    assert judge(other, "system:serviceaccount:tk-system:tensorkiln-b", "CREATE", COMPILE_JOB) is None
    assert judge(other, OPERATOR, "CREATE", COMPILE_JOB) is not None  # hence: never two releases on one namespace


@pytest.mark.parametrize(
    "writers, where",
    [("kwok-admin", "/compileJobAdmission/extraWriters"), (["*"], "/compileJobAdmission/extraWriters/0"),
     ([""], "/compileJobAdmission/extraWriters/0"), (["a", "a"], "/compileJobAdmission/extraWriters"),
     (["a*b"], "/compileJobAdmission/extraWriters/0")],
)  # fmt: skip
def test_schema_refuses_bad_writers(helm, writers, where):
    with pytest.raises(subprocess.CalledProcessError) as failure:
        render({"compileJobAdmission": {"extraWriters": writers}})
    assert "schema" in failure.value.stderr and where in failure.value.stderr, failure.value.stderr


def test_schema_refuses_unknown_keys(helm):
    with pytest.raises(subprocess.CalledProcessError) as failure:
        render({"compileJobAdmission": {"enabled": True, "writers": ["a"]}})
    assert "writers" in failure.value.stderr


def test_the_policy_covers_every_write_the_operators_rbac_grants_on_compilejobs():
    """Its create and patch of compilejobs and patch of compilejobs/status are CREATE and UPDATE; it
    never deletes one, so DELETE, left out, is no write the operator alone would make."""
    granted = rbac.expected_permissions(release_namespace=NAMESPACE, watch_namespaces=[])
    writes = {(p.resource, p.verb) for p in granted if p.resource.startswith("compilejobs")}
    writes -= {("compilejobs", verb) for verb in ("get", "list", "watch")}
    assert writes == {("compilejobs", "create"), ("compilejobs", "patch"), ("compilejobs/status", "patch")}


# --- who may write --------------------------------------------------------------------------------


def test_the_operator_creates_and_updates_spec_and_status(helm):
    policy, _ = objects()
    assert judge(policy, OPERATOR, "CREATE", COMPILE_JOB) is None
    assert judge(policy, OPERATOR, "UPDATE", *edited(spec={"image": "ghcr.io/tensorkiln/compiler:0.2.0"})) is None
    new, old = edited(status={"phase": "Running"})
    new["spec"] = old["spec"]
    assert judge(policy, OPERATOR, "UPDATE", new, old, sub_resource="status") is None
    assert matches(policy, "CREATE", "compilejobs") and matches(policy, "UPDATE", "compilejobs/status")
    assert not matches(policy, "DELETE", "compilejobs")


def test_a_tenant_creating_one_is_refused_naming_the_tenant_and_what_to_do(helm):
    policy, _ = objects()
    reason, message = judge(policy, TENANT, "CREATE", COMPILE_JOB)
    assert reason == "Forbidden"  # HTTP 403
    assert message == (
        f"CompileJobs are written by the TensorKiln operator ({OPERATOR}) alone; {TENANT} may not create one: "
        "apply an InferenceModel instead, and the operator writes its CompileJobs"
    )


@pytest.mark.parametrize(
    "spec",
    [
        {"image": "attacker.example/miner:latest"},
        {
            "hardware": {
                **COMPILE_JOB["spec"]["hardware"],
                "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
            }
        },
        {"hardware": {**COMPILE_JOB["spec"]["hardware"], "tolerations": [{"operator": "Exists"}]}},
        {"registry": {"uri": "file:///etc"}},
    ],
    ids=["image", "node-selector", "tolerations", "file-registry"],
)
def test_a_tenant_editing_the_spec_is_refused(helm, spec):
    policy, _ = objects()
    reason, message = judge(policy, TENANT, "UPDATE", *edited(spec=spec))
    assert reason == "Forbidden" and f"{TENANT} may not change the spec of one" in message


def test_a_tenant_editing_the_status_is_refused(helm):
    """Through the status subresource (the API server keeps the old spec there)."""
    policy, _ = objects()
    new, old = edited(status={"phase": "Succeeded", "engineDigest": "sha256:" + "0" * 64})
    reason, message = judge(policy, TENANT, "UPDATE", new, old, sub_resource="status")
    assert reason == "Forbidden" and f"{TENANT} may not change the status of one" in message
    # A status where there was none is a change too.
    bare = {k: v for k, v in COMPILE_JOB.items() if k != "status"}
    assert judge(policy, TENANT, "UPDATE", COMPILE_JOB, bare, sub_resource="status") is not None


def test_metadata_only_updates_are_admitted_from_anyone(helm):
    """The garbage collector (owner references), a finalizer's removal, a label: spec and status as they were."""
    policy, _ = objects()
    orphaned, old = edited(metadata={"ownerReferences": []})
    assert judge(policy, GARBAGE_COLLECTOR, "UPDATE", orphaned, old) is None
    unfinalized, old = edited(metadata={"finalizers": [], "deletionTimestamp": "2026-01-01T00:00:00Z"})
    assert judge(policy, TENANT, "UPDATE", unfinalized, old) is None
    assert judge(policy, TENANT, "UPDATE", *edited(metadata={"labels": {"a": "b"}})) is None


def test_extra_writers_by_name_or_prefix(helm):
    values = {"compileJobAdmission": {"extraWriters": ["jane@example.com", "system:serviceaccount:dev-*"]}}
    policy, _ = objects(values)
    assert judge(policy, "jane@example.com", "CREATE", COMPILE_JOB) is None
    assert judge(policy, "system:serviceaccount:dev-jane:tensorkiln", "CREATE", COMPILE_JOB) is None
    assert judge(policy, OPERATOR, "CREATE", COMPILE_JOB) is None  # the operator still
    for refused in ("jane@example.com.evil", "jane", "system:serviceaccount:prod:tensorkiln", TENANT):
        reason, message = judge(policy, refused, "CREATE", COMPILE_JOB)
        assert f"; {refused} may not create one" in message
    # Names are matched whole: the operator's name as a prefix admits no other account.
    assert judge(objects()[0], OPERATOR + "-2", "CREATE", COMPILE_JOB) is not None


def test_quotes_in_writers_stay_strings(helm):
    policy, _ = objects({"compileJobAdmission": {"extraWriters": ["o'brien", 'say "hi"', "back\\slash"]}})
    for writer in ("o'brien", 'say "hi"', "back\\slash"):
        assert judge(policy, writer, "CREATE", COMPILE_JOB) is None
    assert judge(policy, "o", "CREATE", COMPILE_JOB) is not None


# --- the integration tests' install (tensorkiln_local.install) -----------------------------------


def _self_signed(tmp_path: Path, common_name: str) -> Path:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])  # fmt: skip
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    path = tmp_path / "admin.crt"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def test_the_kubeconfigs_username_is_its_client_certificates_common_name(tmp_path):
    certificate = _self_signed(tmp_path, "kwok-admin")
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "local",
        "contexts": [{"name": "other", "context": {"user": "x"}}, {"name": "local", "context": {"user": "admin"}}],
        "users": [{"name": "admin", "user": {"client-certificate": str(certificate), "client-key": "k"}}],
    }
    kubeconfig = tmp_path / "kubeconfig.yaml"
    kubeconfig.write_text(yaml.safe_dump(config))
    assert install.kubeconfig_username(kubeconfig) == "kwok-admin"


def test_the_integration_install_admits_the_tests_own_operators_and_no_tenant(helm):
    values = install.compile_job_writers("kwok-admin", test_cluster=True)
    policy, _ = objects(values)
    assert judge(policy, "kwok-admin", "CREATE", COMPILE_JOB) is None  # conftest.Operator processes
    helm_release_operator = "system:serviceaccount:t-0a1b2c3d:tk-t-0a1b2c3d-tensorkiln"  # helm_release.py's
    assert judge(policy, helm_release_operator, "CREATE", COMPILE_JOB) is None
    assert judge(policy, TENANT, "CREATE", COMPILE_JOB) is not None
    assert judge(policy, "system:serviceaccount:team-a:default", "CREATE", COMPILE_JOB) is not None
    assert (
        install.TEST_CLUSTER == "tensorkiln-test"
        and "TENSORKILN_CLUSTER=tensorkiln-test" in (ROOT / "Makefile").read_text()
    )


def test_the_demo_install_admits_its_admin_alone_besides_the_operator(helm):
    policy, _ = objects(install.compile_job_writers("kwok-admin", test_cluster=False))
    assert judge(policy, "kwok-admin", "CREATE", COMPILE_JOB) is None  # the e2e benchmarks' operators
    assert judge(policy, "system:serviceaccount:t-0a1b2c3d:tk-t-0a1b2c3d-tensorkiln", "CREATE", COMPILE_JOB)
    assert judge(policy, TENANT, "CREATE", COMPILE_JOB) is not None


# --- documentation --------------------------------------------------------------------------------


def test_values_and_docs_describe_it():
    values = yaml.safe_load((ROOT / "charts" / "tensorkiln" / "values.yaml").read_text())
    assert values["compileJobAdmission"] == {"enabled": True, "extraWriters": []}
    for page in ("install.md", "concepts.md"):
        assert "compileJobAdmission" in (ROOT / "docs" / page).read_text(), page
