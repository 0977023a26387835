"""Fixtures for `helm install` of charts/tensorkiln into the local cluster (test_helm_install,
test_helm_webhook): a release of the chart's own in one fresh namespace, from the images `install`
pushed to the local registry, its operator pod on the real node local-0, logged in as the chart's
ServiceAccount.

Everything stays in that namespace: the release watches only it (watchNamespaces), so the operator
never acts on other namespaces; its registry is the namespace's claim `tensorkiln-registry` (the
`namespace` fixture's) at a path of its own. One operator replica (leader election on), so that
"the operator pod" is one; test_leader_election runs two. The chart's cluster-scoped objects are
removed again afterwards. A test module sets values of its own with a `chart_values` fixture.
"""

import json
import os
import subprocess

import pytest
import yaml
from kubernetes import client
from tensorkiln_api import GROUP, VERSION
from tensorkiln_local import install, installmanifests
from tensorkiln_local.cluster import binaries, connection, paths, registry
from tensorkiln_local.images import build as images

from .helpers import wait_for

CLAIM = install.CLAIM
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
def registry_volume(namespace) -> str:
    """The release's registry, as a URI this machine can publish seeds to: the namespace's claim,
    at a path of the release's own."""
    return f"pvc://{CLAIM}/engines-{namespace}"


@pytest.fixture
def chart_values() -> dict:
    """Values a test module adds to (and over) the release's; a module overrides this fixture."""
    return {}


@pytest.fixture
def release(api, tools, namespace, registry_volume, chart_values):
    """The chart installed into the namespace, watching only it; uninstalled afterwards."""
    helm, _ = tools
    name = f"tk-{namespace}"
    values = install.merged(
        install.chart_values(images.pushed(registry.HOST), engine_registry="pvc"),
        {
            "watchNamespaces": [namespace],
            "registry": {"filesystem": {"path": registry_volume.removeprefix(f"pvc://{CLAIM}/")}},
            "webhook": {"enabled": False},
            "resyncSeconds": 5,
            "nodeSelector": {"kubernetes.io/hostname": LOCAL_NODE},
            "replicaCount": 1,
        },
    )
    if "modelFileRoots" not in _chart_values():
        values.pop("modelFileRoots")
    values = install.merged(values, chart_values)
    values_file = paths.STATE_DIR / f"values-{namespace}.json"
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
    """The operator container's output (`kubectl logs`), its last 6000 characters."""
    with connection.api_client() as api:
        try:
            log = client.CoreV1Api(api).read_namespaced_pod_log(
                pod.metadata.name, pod.metadata.namespace, container="operator"
            )
        except client.ApiException as error:
            return f"(no log: {error.reason})"
    return log[-6000:]
