"""`helm install` of charts/tensorkiln into the local cluster (fixtures: helm_release): the chart's
operator pod runs on the real node local-0, logs in as the chart's ServiceAccount, and reconciles
an InferenceModel to Ready under the chart's RBAC, the webhook off (test_helm_webhook has it on).

The InferenceModel is the SIMULATED step-load workload (slo_workloads): its engine is a SIMULATION
published into the registry's directory beforehand (engine_seeds.publish_simulation, origin
"simulation"), so the CompileJob is a cache hit and no compile runs; Triton serves it for real.
"""

import json

import pytest
from kubernetes import client
from tensorkiln_api import GROUP, VERSION
from tensorkiln_local.cluster.slo_workloads import SIMULATED, deploy

from . import helm_release
from .helm_release import LOCAL_NODE, SA_PATH, container_log, run, wait_operator_ready
from .helpers import wait_for

# The shared fixtures, found by pytest as this module's attributes.
chart_values, registry_volume, release, tools = (
    helm_release.chart_values,
    helm_release.registry_volume,
    helm_release.release,
    helm_release.tools,
)

pytestmark = pytest.mark.cluster


def in_pod(kubectl: list[str], pod: client.V1Pod, *command: str) -> str:
    """`kubectl exec` in the operator container: what its process sees."""
    done = run([*kubectl, "exec", "-n", pod.metadata.namespace, pod.metadata.name, "-c", "operator", "--", *command])
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_helm_install_reconciles_a_model_to_ready_as_the_chart_service_account(
    alone,
    api,
    tools,
    namespace,
    registry_volume,
    release,
    tmp_path,
):
    _, kubectl = tools
    core = client.CoreV1Api(api)
    pod = wait_operator_ready(core, namespace, release)
    account = f"{release}-tensorkiln"
    assert pod.spec.node_name == LOCAL_NODE
    assert pod.spec.service_account_name == account

    # ServiceAccount admission added the token volume; the kubelet mounted it where clients look, and gave
    # the process the `kubernetes` Service's address.
    assert any(v.name.startswith("kube-api-access-") for v in pod.spec.volumes)
    assert any(m.mount_path == SA_PATH for m in pod.spec.containers[0].volume_mounts)
    env = dict(line.split("=", 1) for line in in_pod(kubectl, pod, "env").splitlines() if "=" in line)
    assert "KUBECONFIG" not in env
    kubernetes_service = core.read_namespaced_service("kubernetes", "default").spec.cluster_ip
    assert (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]) == (kubernetes_service, "443")
    as_pod = client.Configuration()
    as_pod.host, as_pod.ssl_ca_cert = api.configuration.host, api.configuration.ssl_ca_cert
    as_pod.cert_file = as_pod.key_file = None
    as_pod.api_key = {"BearerToken": "Bearer " + in_pod(kubectl, pod, "cat", f"{SA_PATH}/token")}
    with client.ApiClient(as_pod) as pod_api:
        review = client.AuthenticationV1Api(pod_api).create_self_subject_review({"metadata": {}})
    assert review.status.user_info.username == f"system:serviceaccount:{namespace}:{account}"

    # The operator reconciles a model to Ready with only the chart's RBAC.
    try:
        deployment = deploy(api, registry_volume, namespace, SIMULATED, tmp_path / "engines", ready_within=240)
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
    # Ready means serving: the first replica answers while the second may still start.
    apps, replicas = client.AppsV1Api(api), SIMULATED.slo["minReplicas"]
    wait_for(
        lambda: apps.read_namespaced_deployment(deployment, namespace).status.ready_replicas == replicas,
        timeout=120,
        what=f"{replicas} ready replicas of {deployment}",
    )
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
