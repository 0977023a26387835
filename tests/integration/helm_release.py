"""Fixtures for `helm install` of charts/tensorkiln into the local cluster (test_helm_install,
test_helm_webhook): the chart's operator pod runs on the real node local-0 (the agent maps the
operator image to this machine's venv, images.py) and logs in as the chart's ServiceAccount.

Everything stays in one fresh namespace: the release watches only it (watchNamespaces), so the
operator never acts on other namespaces; the registry is a PersistentVolumeClaim bound to a
hostPath PersistentVolume on a temporary directory (the local cluster has no provisioner). The
chart's cluster-scoped objects, and the kopf peering CRDs when the cluster lacked them, are
removed again afterwards. A test module sets values of its own with a `chart_values` fixture.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from tensorkiln.api import GROUP, VERSION
from tensorkiln.api.crdgen import kopf_peering_crds
from tensorkiln_local import installmanifests
from tensorkiln_local.cluster import binaries, paths, prometheus

from .conftest import free_port
from .helpers import wait_for

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
def chart_values() -> dict:
    """Values a test module adds to (and over) the release's; a module overrides this fixture."""
    return {}


@pytest.fixture
def release(api, tools, namespace, registry_volume, chart_values):
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
    values.update(chart_values)
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


def wait_operator_ready(core: client.CoreV1Api, namespace: str, release: str) -> client.V1Pod:
    """The chart's operator pod once Ready; on a timeout the failure shows its status and log."""
    try:
        wait_for(lambda: is_ready(operator_pod(core, namespace, release)), timeout=180, what="the operator pod Ready")
    except pytest.fail.Exception:
        pod = operator_pod(core, namespace, release)
        status = core.api_client.sanitize_for_serialization(pod.status) if pod else "no pod"
        pytest.fail(f"operator pod not Ready: {json.dumps(status)[:3000]}\n{container_log(pod) if pod else ''}")
    return operator_pod(core, namespace, release)


def container_log(pod: client.V1Pod) -> str:
    """The agent keeps each container's output (there is no kubelet API for `kubectl logs`)."""
    path = paths.LOCALNODE_STATE / "pods" / pod.metadata.uid / "operator" / "log"
    return path.read_text(errors="replace")[-6000:] if path.exists() else "(no log)"


def process_env(pod: client.V1Pod) -> dict[str, str]:
    """The operator container's environment, as its process has it (containerID local://<pid>)."""
    pid = pod.status.container_statuses[0].container_id.removeprefix("local://")
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)
