"""`helm install` of charts/tensorkiln into the local cluster: the chart's operator pod runs on the
real node local-0 (the agent maps the operator image to this machine's venv, images.py), logs in
as the chart's ServiceAccount, and reconciles an InferenceModel to Ready under the chart's RBAC.

Everything stays in one fresh namespace: the release watches only it (watchNamespaces), so the
operator never acts on other namespaces; the registry is a PersistentVolumeClaim bound to a
hostPath PersistentVolume on a temporary directory (the local cluster has no provisioner). The
InferenceModel is the SIMULATED step-load workload (slo_workloads): its engine is a SIMULATION
published into that directory beforehand (engine_seeds.publish_simulation, origin
"simulation"), so the CompileJob is a cache hit and no compile runs; Triton serves it for real.
The chart's ClusterRole and binding, and the kopf peering CRDs when the cluster lacked them, are
removed again afterwards.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from tensorkiln import installmanifests
from tensorkiln.api import GROUP, VERSION
from tensorkiln.api.crdgen import kopf_peering_crds
from tensorkiln.localcluster import binaries, paths, prometheus
from tensorkiln.localcluster.slo_workloads import SIMULATED, deploy

from .conftest import free_port
from .helpers import wait_for

pytestmark = pytest.mark.cluster
CLAIM = "tensorkiln-registry"
SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
LOCAL_NODE = "local-0"


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, **kwargs)


@pytest.fixture(scope="module")
def tools(api):
    kubeconfig = os.environ["KUBECONFIG"]
    helm = [str(installmanifests.helm()), "--kubeconfig", kubeconfig]
    kubectl = [str(binaries.ensure(("kube",)) / "kubectl"), "--kubeconfig", kubeconfig]
    return helm, kubectl


@pytest.fixture
def registry_volume(api, namespace, tmp_path):
    """A claim named CLAIM in the namespace, bound to a hostPath PersistentVolume on a fresh directory."""
    core = client.CoreV1Api(api)
    directory = tmp_path / "registry-volume"
    directory.mkdir()
    pv_name = f"{namespace}-registry"
    core.create_persistent_volume(
        {
            "metadata": {"name": pv_name, "labels": {"tensorkiln.dev/test": namespace}},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {"path": str(directory), "type": "Directory"},
                "claimRef": {"namespace": namespace, "name": CLAIM},
            },
        }
    )
    core.create_namespaced_persistent_volume_claim(
        namespace,
        {
            "metadata": {"name": CLAIM},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": pv_name,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    )

    def bound():
        return core.read_namespaced_persistent_volume_claim(CLAIM, namespace).status.phase == "Bound"

    wait_for(bound, timeout=60, what=f"claim {namespace}/{CLAIM} to bind")
    yield directory
    # Released once the namespace (and so the claim) is gone: the PV goes then.
    core.delete_persistent_volume(pv_name)


@pytest.fixture
def alone(operator):
    """The session's cluster-wide test operator would reconcile the release's namespace too, with a
    registry of its own: it is stopped while the chart's operator is under test."""
    operator.kill()
    yield
    operator.start()


@pytest.fixture
def release(api, tools, namespace, registry_volume):
    """The chart installed into the namespace, watching only it; uninstalled afterwards."""
    helm, _ = tools
    extensions = client.ApiextensionsV1Api(api)
    existing = {crd.metadata.name for crd in extensions.list_custom_resource_definition().items}
    name = f"tk-{namespace}"
    values = {
        "watchNamespaces": [namespace],
        "registry": {"kind": "filesystem", "filesystem": {"existingClaim": CLAIM, "path": "engines"}},
        "servingRuntime": "python-backend",
        "prometheusUrl": prometheus.url(),
        "webhook": {"enabled": False},
        "resyncSeconds": 5,
        # Its probes and metrics listen on every address of this machine: ports of their own.
        "health": {"port": free_port()},
        "metrics": {"port": free_port()},
        "nodeSelector": {"kubernetes.io/hostname": LOCAL_NODE},
    }
    if "modelFileRoots" in _chart_values():
        values["modelFileRoots"] = [str(paths.SAMPLE_MODELS)]  # the workload's file:// source
    values_file = registry_volume.parent / "values.json"
    values_file.write_text(json.dumps(values))
    installed = run([*helm, "install", name, str(paths.CHART_DIR), "--namespace", namespace, "-f", str(values_file)])
    assert installed.returncode == 0, installed.stderr
    try:
        yield name
    finally:
        try:
            _delete_models(api, namespace)  # while the operator runs, which removes its finalizers
        finally:
            uninstalled = run([*helm, "uninstall", name, "--namespace", namespace, "--wait", "--timeout", "120s"])
            for crd in kopf_peering_crds():  # helm installs the chart's crds/ and never removes them
                if crd["metadata"]["name"] not in existing:
                    extensions.delete_custom_resource_definition(crd["metadata"]["name"])
        assert uninstalled.returncode == 0, uninstalled.stderr


def _chart_values() -> dict:
    return yaml.safe_load((paths.CHART_DIR / "values.yaml").read_text())


def _delete_models(api, namespace):
    custom = client.CustomObjectsApi(api)
    for model in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels")["items"]:
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", model["metadata"]["name"])

    def gone():
        left = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels")["items"]
        left += custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "compilejobs")["items"]
        return not left

    wait_for(gone, timeout=120, what=f"InferenceModels and CompileJobs of {namespace} to be deleted")


def operator_pod(core, namespace, release) -> client.V1Pod | None:
    selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=operator"
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    return pods[0] if pods else None


def is_ready(pod: client.V1Pod | None) -> bool:
    conditions = (pod.status.conditions or []) if pod else []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def container_log(pod: client.V1Pod) -> str:
    """The agent keeps each container's output (there is no kubelet API for `kubectl logs`)."""
    path = paths.LOCALNODE_STATE / "pods" / pod.metadata.uid / "operator" / "log"
    return path.read_text(errors="replace")[-6000:] if path.exists() else "(no log)"


def process_env(pod: client.V1Pod) -> dict[str, str]:
    """The operator container's environment, as its process has it (containerID local://<pid>)."""
    pid = pod.status.container_statuses[0].container_id.removeprefix("local://")
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


def test_helm_install_reconciles_a_model_to_ready_as_the_chart_service_account(
    alone, api, tools, namespace, registry_volume, release, tmp_path
):
    _, kubectl = tools
    core = client.CoreV1Api(api)
    try:
        wait_for(lambda: is_ready(operator_pod(core, namespace, release)), timeout=180, what="the operator pod Ready")
    except pytest.fail.Exception:
        pod = operator_pod(core, namespace, release)
        status = api.sanitize_for_serialization(pod.status) if pod else "no pod"
        pytest.fail(f"operator pod not Ready: {json.dumps(status)[:3000]}\n{container_log(pod) if pod else ''}")
    pod = operator_pod(core, namespace, release)
    account = f"{release}-tensorkiln"
    assert pod.spec.node_name == LOCAL_NODE
    assert pod.spec.service_account_name == account

    # ServiceAccount admission added the token volume, and the agent gave the process that token.
    token_volume = next(v for v in pod.spec.volumes if v.name.startswith("kube-api-access-"))
    assert any(m.mount_path == SA_PATH for m in pod.spec.containers[0].volume_mounts)
    env = process_env(pod)
    assert "KUBECONFIG" not in env
    token_dir = Path(env["TENSORKILN_SERVICE_ACCOUNT_DIR"])
    assert token_dir.name == token_volume.name
    assert f"{env['KUBERNETES_SERVICE_HOST']}:{env['KUBERNETES_SERVICE_PORT']}" in api.configuration.host
    as_pod = client.Configuration()
    as_pod.host, as_pod.ssl_ca_cert = api.configuration.host, str(token_dir / "ca.crt")
    as_pod.api_key = {"BearerToken": "Bearer " + (token_dir / "token").read_text()}
    with client.ApiClient(as_pod) as pod_api:
        review = client.AuthenticationV1Api(pod_api).create_self_subject_review({"metadata": {}})
    assert review.status.user_info.username == f"system:serviceaccount:{namespace}:{account}"

    # The operator reconciles a model to Ready with only the chart's RBAC.
    try:
        deployment = deploy(
            api, f"file://{registry_volume}/engines", namespace, SIMULATED, tmp_path / "engines", ready_within=240
        )
    except TimeoutError as exc:
        model = client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, namespace, "inferencemodels", SIMULATED.name
        )
        pytest.fail(f"{exc}: status {json.dumps(model.get('status'))[:3000]}\n{container_log(pod)}")
    model = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, "inferencemodels", SIMULATED.name
    )
    assert model["status"]["phase"] == "Ready"
    assert model["status"]["observedGeneration"] == model["metadata"]["generation"]
    serving = client.AppsV1Api(api).read_namespaced_deployment(deployment, namespace)
    assert serving.status.ready_replicas == SIMULATED.slo["minReplicas"]
    (compile_job,) = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, "compilejobs"
    )["items"]
    assert compile_job["status"]["phase"] == "Succeeded" and compile_job["status"]["cacheHit"]
    assert not client.BatchV1Api(api).list_namespaced_job(namespace).items  # a cache hit: nothing compiled
    assert not core.read_namespaced_pod(pod.metadata.name, namespace).status.container_statuses[0].restart_count

    # The ServiceAccount has what the chart grants, and not more.
    def can(*args: str) -> bool:
        answer = run([*kubectl, "auth", "can-i", f"--as=system:serviceaccount:{namespace}:{account}", *args])
        assert answer.stdout.strip() in ("yes", "no"), answer.stderr
        return answer.stdout.strip() == "yes"

    assert can("patch", "inferencemodels.tensorkiln.dev", "--subresource=status", "-n", namespace)
    assert can("create", "deployments.apps", "-n", namespace)
    assert not can("list", "secrets", "--all-namespaces")
    assert not can("get", "secrets", "-n", namespace)
    assert not can("list", "inferencemodels.tensorkiln.dev", "-n", "default")
    assert not can("create", "deployments.apps", "-n", "default")
