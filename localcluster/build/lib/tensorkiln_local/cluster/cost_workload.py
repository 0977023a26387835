"""The two-class workload of the least-cost placement (e2e/bench_cost.py,
tests/integration/test_least_cost_two_nodes.py): one InferenceModel served on two real nodes as two
hardware classes, a fast expensive one and a slow cheap one, as a GPU and a cheaper GPU would differ.

Both classes serve a SIMULATION: the fixed-service-time engine of engine_seeds (it sleeps per batch
and computes nothing), 10 ms per batch on local-0's pool and 25 ms on local-1's, in real Triton, with
real Prometheus and the real scaler acting on it. Nothing here is a GPU. The engines are published
with their defined latency as their figures (publish_simulation's with_figures), so the placement
knows each class's capacity per replica before either has served.

Prices are the nodes' `tensorkiln.dev/price-per-hour` annotation, per CPU core: a replica requests
100m, so a fast replica costs 0.5 an hour and a cheap one 0.1: the cheap class is the cheaper per
request (0.1 for 16 req/s counted against 0.5 for 60), by enough that noisy capacity figures do not
turn the choice over.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client
from tensorkiln.builders.serving import target_name
from tensorkiln.hardware.classes import HardwareClass
from tensorkiln.hardware.prices import PRICE_ANNOTATION
from tensorkiln.hardware.selection import select_targets
from tensorkiln_api import GROUP, VERSION

from tensorkiln_local.cluster.engine_seeds import publish_simulation
from tensorkiln_local.cluster.nodes import CPU_POOL_LABEL
from tensorkiln_local.cluster.slo_workloads import SIMULATED


@dataclass(frozen=True)
class Pool:
    name: str  # the Explicit pool, so the hardware class
    node: str  # the real node it selects by its CPU-pool label
    service_ms: float  # of the SIMULATED engine served there
    price_per_core_hour: float  # the node's price annotation


POOLS = (Pool("fast-local-0", "local-0", 10.0, 5.0), Pool("cheap-local-1", "local-1", 25.0, 1.0))
REPLICA_CPU = 0.1  # cores a replica requests: its price is this times the price per core
NAME = "two-class-simulation"


def manifest(namespace: str, placement: str, max_replicas: int = 6, burst: float = 0.0) -> dict:
    """The InferenceModel: SIMULATED's classifier interface and batcher (one request per execution),
    served on the two pools, SLO p95 < 100 ms, minReplicas 0 (PerClass keeps 1 per class anyway);
    `burst`: slo.burstRequestsPerSecond (LeastCost only), unset when 0."""
    spec = copy.deepcopy(SIMULATED.spec)
    spec["hardware"] = {
        "mode": "Explicit",
        "pools": [{"name": p.name, "kind": "CPU", "nodeSelector": {CPU_POOL_LABEL: p.node}} for p in POOLS],
    }
    spec["slo"] = {
        "percentile": "p95",
        "targetMilliseconds": 100,
        "minReplicas": 0,
        "maxReplicas": max_replicas,
        "scaleDownStabilizationSeconds": 20,
        "placement": placement,
    } | ({"burstRequestsPerSecond": burst} if burst else {})
    meta = {"name": NAME, "namespace": namespace}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceModel", "metadata": meta, "spec": spec}


def set_prices(core: client.CoreV1Api, prices: dict[str, str | None]) -> None:
    """Annotate (None: unannotate) the real nodes with their price per core-hour, by node name."""
    for node, price in prices.items():
        core.patch_node(node, {"metadata": {"annotations": {PRICE_ANNOTATION: price}}})


def pool_prices() -> dict[str, str]:
    return {p.node: f"{p.price_per_core_hour:g}" for p in POOLS}


def targets(api: client.ApiClient, model: dict) -> dict[str, HardwareClass]:
    nodes = [api.sanitize_for_serialization(n) for n in client.CoreV1Api(api).list_node().items]
    found = select_targets(model["spec"]["hardware"], [], nodes)
    return {t.name: t for t in found}


def deploy(
    api: client.ApiClient, registry_uri: str, namespace: str, placement: str, work_dir: Path, burst: float = 0.0
) -> dict[str, str]:
    """Publish each pool's SIMULATED engine, apply the model; returns each pool's Deployment name."""
    model = manifest(namespace, placement, burst=burst)
    found = targets(api, model)
    inputs, outputs = SIMULATED.tensors()
    for pool in POOLS:
        publish_simulation(
            registry_uri, model, found[pool.name], work_dir, pool.service_ms, inputs, outputs, with_figures=True
        )
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", model)
    return {pool.name: target_name(NAME, found[pool.name]) for pool in POOLS}


def wait_ready(api: client.ApiClient, namespace: str, within: float) -> dict:
    """The model once its phase is Ready; TimeoutError naming its last phase otherwise."""
    custom, deadline, found = client.CustomObjectsApi(api), time.monotonic() + within, {}
    while time.monotonic() < deadline:
        found = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", NAME)
        if found.get("status", {}).get("phase") == "Ready":
            return found
        time.sleep(2)
    raise TimeoutError(f"{namespace}/{NAME} not Ready within {within:g} s: {found.get('status', {}).get('phase')}")
