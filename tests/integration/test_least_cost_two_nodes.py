"""Least-cost placement across two real hardware classes: the local cluster's local-0 and a second
real node, local-1 (`tensorkiln-local node up local-1`), each its own CPU pool, serve one model as a
fast expensive class and a slow cheap one (tensorkiln_local.cluster.cost_workload: both serve a
SIMULATION, a fixed-service-time engine that computes nothing, in real Triton; the real scaler reads
real Prometheus). Prices are the nodes' annotations.

Under `slo.placement: LeastCost` a low load goes all to the cheap class, and the fast one, whose
minReplicas is 0, is scaled away; switched to PerClass, each class keeps a replica and both serve.
e2e/bench_cost.py runs the step load under both policies and compares their cost.
"""

import threading

import pytest
from kubernetes import client
from tensorkiln.status.conditions import find
from tensorkiln_api import GROUP, VERSION
from tensorkiln_local.cluster import cluster, cost_workload, nodes
from tensorkiln_local.cluster.cost_workload import NAME
from tensorkiln_local.cluster.slo_workloads import SIMULATED
from tensorkiln_local.load.loadgen import OpenLoopLoad, Phase

from .helpers import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.serving]
FAST, CHEAP = (pool.name for pool in cost_workload.POOLS)


@pytest.fixture
def second_node(api):
    """local-1 up, both real nodes priced; afterwards unpriced, and local-1 gone (unless it ran before)."""
    core = client.CoreV1Api(api)
    was_up = "local-1" in nodes.running()
    cluster.start_node(core, "local-1")
    cost_workload.set_prices(core, cost_workload.pool_prices())
    yield
    cost_workload.set_prices(core, dict.fromkeys(cost_workload.pool_prices()))
    if not was_up:
        nodes.delete(core, "local-1")


def model(api, namespace) -> dict:
    return client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", NAME)


def targets(found: dict) -> dict[str, dict]:
    return {t["hardwareClass"]: t for t in found.get("status", {}).get("targets", [])}


@pytest.mark.timeout(900)
def test_least_cost_serves_a_low_load_on_the_cheap_node_alone_and_per_class_on_both(
    api, operator, namespace, second_node, tmp_path
):
    deployments = cost_workload.deploy(api, operator.registry_uri, namespace, "LeastCost", tmp_path)
    cost_workload.wait_ready(api, namespace, 300)
    load = OpenLoopLoad(api, namespace, NAME, NAME, SIMULATED.inputs(), seed=3)
    runner = threading.Thread(target=load.run, args=([Phase("low", 8, 600)],), daemon=True)
    runner.start()
    apps = client.AppsV1Api(api)
    try:

        def placed_on_cheap_alone():
            found = model(api, namespace)
            by_class = targets(found)
            fast = apps.read_namespaced_deployment(deployments[FAST], namespace).spec.replicas
            cheap = by_class.get(CHEAP, {}).get("slo", {})
            return (
                found if fast == 0 and cheap.get("requestRate", 0) > 0 and found["status"].get("costPerHour") else None
            )

        # 8 req/s fits one cheap replica (16 counted): the fast class goes to 0 once its scale-down window passed
        found = wait_for(placed_on_cheap_alone, 240, 2, "the fast class scaled to 0, the cheap one serving")
        fast, cheap = (targets(found)[c]["slo"] for c in (FAST, CHEAP))
        context = f"fast {fast}; cheap {cheap}"
        assert (fast["replicaPricePerHour"], cheap["replicaPricePerHour"]) == (0.5, 0.1), context
        assert (fast["loadShare"], cheap["loadShare"]) == (0, 1), context
        assert cheap["capacitySource"] in ("MeasuredAtCompile", "Observed"), context
        assert found["status"]["costPerHour"] == pytest.approx(0.1 * cheap["desiredReplicas"]), context
        met = find(found["status"]["conditions"], "SLOMet")
        assert met["status"] == "True" and "least cost" in met["message"], met
        pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"tensorkiln.dev/model={NAME}")
        serving = [p for p in pods.items if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
        assert {p.spec.node_name for p in serving} == {"local-1"}, [
            (p.metadata.name, p.spec.node_name) for p in serving
        ]
        assert all(p.status.pod_ip.startswith("10.244.1.") for p in serving)

        # PerClass: each class keeps a replica of its own, and the Service's even spread sends both requests
        patch = {"spec": {"slo": {"placement": "PerClass"}}}
        client.CustomObjectsApi(api).patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "inferencemodels", NAME, patch
        )

        def both_serve():
            by_class = targets(model(api, namespace))
            rates = [by_class.get(c, {}).get("slo", {}).get("requestRate", 0) for c in (FAST, CHEAP)]
            return rates if all(r >= 2.5 for r in rates) else None  # even spread: about 4 req/s each

        rates = wait_for(both_serve, 240, 2, "both classes serving about half the load under PerClass")
        assert sum(rates) == pytest.approx(8, rel=0.3), rates
    finally:
        load.stop()
        runner.join()
    failed = [r for r in load.results if not r.ok]
    assert len(failed) <= 2, failed[:5]
