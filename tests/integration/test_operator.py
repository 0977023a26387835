"""The operator against the real API server, scheduler and kwok-simulated GPU pools."""

import copy
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from tensorkiln.builders.labels import COMPILE_JOB, MODEL
from tensorkiln.hardware.classes import GPU_PRODUCT
from tensorkiln_api import GROUP, VERSION
from tensorkiln_local import install
from tensorkiln_local.cluster import paths, pools

from .helpers import wait_for

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[2]
SAMPLE = yaml.safe_load((REPO / "manifests/samples/resnet50-gpu.yaml").read_text())


def create_model(api, namespace, name="resnet50", **spec_changes) -> dict:
    body = copy.deepcopy(SAMPLE)
    body["metadata"] = {"name": name, "namespace": namespace}
    body["spec"].update(spec_changes)
    return client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "inferencemodels", body
    )


def get_model(api, namespace, name="resnet50") -> dict:
    return client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", name)


def compile_jobs(api, namespace, model=None) -> list[dict]:
    selector = f"{MODEL}={model}" if model else None
    return client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, "compilejobs", label_selector=selector
    )["items"]


def gpu_products(api) -> set[str]:
    nodes = client.CoreV1Api(api).list_node().items
    return {n.metadata.labels[GPU_PRODUCT] for n in nodes if GPU_PRODUCT in (n.metadata.labels or {})}


def scheduled_pods(api, namespace) -> list:
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=COMPILE_JOB).items
    return [p for p in pods if p.spec.node_name]


def test_one_compile_job_per_gpu_product_each_pod_on_that_product(api, operator, namespace):
    create_model(api, namespace)
    products = gpu_products(api)
    assert len(products) >= 3
    wait_for(
        lambda: len(scheduled_pods(api, namespace)) == len(products),
        timeout=120,
        what="one scheduled compile pod per GPU product",
    )

    jobs = compile_jobs(api, namespace)
    assert sorted(cj["spec"]["hardware"]["product"] for cj in jobs) == sorted(products)
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    for cj in jobs:
        owned = batch.list_namespaced_job(namespace, label_selector=f"{COMPILE_JOB}={cj['metadata']['name']}").items
        assert len(owned) == 1, f"{cj['metadata']['name']} should own exactly one Job"
        pod = next(p for p in scheduled_pods(api, namespace) if p.metadata.labels["job-name"] == owned[0].metadata.name)
        node = core.read_node(pod.spec.node_name)
        assert node.metadata.labels[GPU_PRODUCT] == cj["spec"]["hardware"]["product"]
        assert node.metadata.annotations.get(pools.KWOK_ANNOTATION) == "fake"

    def rolled_up():
        status = get_model(api, namespace).get("status", {})
        targets = status.get("targets", [])
        return status if len(targets) == len(products) and all("compileJob" in t for t in targets) else None

    status = wait_for(rolled_up, what="targets rolled up into InferenceModel status")
    assert {c["type"] for c in status["conditions"]} >= {"Ready", "Compiled", "Deployed"}
    wait_for(
        lambda: all(
            any(c["type"] == "Scheduled" and c["status"] == "True" for c in cj.get("status", {}).get("conditions", []))
            for cj in compile_jobs(api, namespace)
        ),
        what="CompileJob Scheduled conditions",
    )
    assert all(cj["status"]["simulatedNode"] for cj in compile_jobs(api, namespace))
    # Compile pods on kwok nodes never run: the model says so at a glance, not "Compiling" for ever.
    simulated = wait_for(
        lambda: (s := get_model(api, namespace).get("status", {})).get("phase") == "Simulated" and s,
        what="phase Simulated",
    )
    ready = next(c for c in simulated["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "SimulatedPools" and "no compile pod runs there" in ready["message"]
    assert simulated["targetSummary"] == f"0/{len(products)} serving, 0 compiled, {len(products)} simulated"


def test_no_matching_hardware_is_a_condition_not_a_crash(api, operator, namespace):
    create_model(api, namespace, hardware={"mode": "Auto", "include": ["NVIDIA-B300*"]})

    def ready_condition():
        conditions = get_model(api, namespace).get("status", {}).get("conditions", [])
        return next((c for c in conditions if c["type"] == "Ready"), None)

    ready = wait_for(ready_condition, what="Ready condition")
    assert (ready["status"], ready["reason"]) == ("False", "NoMatchingHardware")
    assert "NVIDIA-H100-80GB-HBM3" in ready["message"]
    assert compile_jobs(api, namespace) == []


def test_a_new_gpu_pool_gets_its_compile_job_without_editing_the_model(api, operator, namespace):
    create_model(api, namespace)
    before = len(gpu_products(api))
    wait_for(lambda: len(compile_jobs(api, namespace)) == before, what="initial CompileJobs")
    pool = pools.Pool(
        name=f"b200-{namespace}",
        nodes=1,
        cpu="224",
        memory="2Ti",
        gpu=pools.GPU(
            product=f"NVIDIA-B200-{namespace}", count=8, memoryMiB=183359, family="blackwell", computeCapability="10.0"
        ),
    )
    node = pools.build_node(pool, 0, pools.Driver(version="580.95.05", cudaRuntime="13.0"))
    core = client.CoreV1Api(api)
    core.create_node(node)
    try:
        wait_for(
            lambda: len(compile_jobs(api, namespace)) == before + 1, timeout=60, what="a CompileJob for the new pool"
        )
        new = next(cj for cj in compile_jobs(api, namespace) if cj["spec"]["hardware"]["product"] == pool.gpu.product)
        assert new["metadata"]["labels"]["tensorkiln.dev/hardware-class"] == f"nvidia-b200-{namespace}"
    finally:
        core.delete_node(node["metadata"]["name"])


def test_operator_killed_mid_way_converges_without_duplicates(api, operator, namespace):
    for i in range(5):
        create_model(api, namespace, name=f"m{i}")
    operator.kill()  # SIGKILL while handlers are in flight
    operator.start()
    products = gpu_products(api)
    wait_for(
        lambda: len(scheduled_pods(api, namespace)) == 5 * len(products),
        timeout=180,
        what="every compile pod scheduled after the restart",
    )
    operator.restart()
    jobs = compile_jobs(api, namespace)
    assert len(jobs) == 5 * len(products)
    assert len({(cj["metadata"]["labels"][MODEL], cj["spec"]["hardware"]["className"]) for cj in jobs}) == len(jobs)
    batch_jobs = client.BatchV1Api(api).list_namespaced_job(namespace).items
    assert len(batch_jobs) == len(jobs), "one Job per CompileJob, even across restarts"
    assert len(client.CoreV1Api(api).list_namespaced_pod(namespace).items) == len(jobs)


def test_deleting_the_model_garbage_collects_everything(api, operator, namespace):
    create_model(api, namespace)
    wait_for(lambda: scheduled_pods(api, namespace), what="compile pods")
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        GROUP, VERSION, namespace, "inferencemodels", "resnet50", propagation_policy="Foreground"
    )
    wait_for(
        lambda: not compile_jobs(api, namespace)
        and not client.BatchV1Api(api).list_namespaced_job(namespace).items
        and not client.CoreV1Api(api).list_namespaced_pod(namespace).items,
        timeout=120,
        what="garbage collection of CompileJobs, Jobs and pods",
    )


def kubectl(*args: str) -> str:
    return subprocess.run(
        [str(paths.BIN_DIR / "kubectl"), "--kubeconfig", str(paths.KUBECONFIG), *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def test_kubectl_explain_teaches_the_api():
    text = kubectl("explain", "inferencemodel.spec.slo")
    assert "targetMilliseconds" in text and "DESCRIPTION" in text.upper()
    assert "percentile" in text


def test_kubectl_get_prints_readable_columns(api, operator, namespace):
    create_model(api, namespace)
    wait_for(lambda: get_model(api, namespace).get("status", {}).get("targetSummary"), what="status")
    header = kubectl("get", "im", "-n", namespace).splitlines()[0].split()
    assert header[:4] == ["NAME", "PHASE", "TARGETS", "READY"]
    assert kubectl("get", "cjob", "-n", namespace).splitlines()[0].split()[:4] == ["NAME", "CLASS", "PHASE", "NODE"]


def test_a_namespace_with_compile_pods_on_simulated_nodes_is_deleted(api, operator):
    """Job pods carry a finalizer that only terminal pods lose: kwok must terminate them as a kubelet would."""
    core = client.CoreV1Api(api)
    name = f"t-gone-{uuid.uuid4().hex[:6]}"
    install.create_namespace(core, name)  # with the registry claim compile pods mount
    create_model(api, name)
    wait_for(lambda: scheduled_pods(api, name), what="compile pods")
    install.delete_namespace(core, name, timeout=120, until_gone=True)


def test_compile_jobs_get_events_from_handlers_and_resync_alike(api, operator, namespace):
    create_model(api, namespace)
    wait_for(lambda: scheduled_pods(api, namespace), what="compile pods")

    def compile_events():
        events = client.CoreV1Api(api).list_namespaced_event(namespace).items
        return [e for e in events if e.source.component == "tensorkiln" and e.reason.startswith("Compile")]

    assert wait_for(compile_events, timeout=60, what="CompileRunning events")
    assert "LookupError" not in operator.log()  # the resync thread posts events without kopf's context
