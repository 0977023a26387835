"""spec.slo.placement LeastCost through the reconcile's steps: gather (from the watch cache, Triton's figures
from a stand-in for Prometheus) -> plan (exactly the replicas written per class, the scaler's verdicts) ->
the scaler's commit -> status.

Two GPU classes: L4 at 0.80/h a GPU, 100 req/s a replica under 25 ms by the compile's figures (80 counted),
and A100 at 2.00/h, 200 req/s (160 counted): per request served, L4 is the cheaper.
"""

from dataclasses import dataclass
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from tensorkiln.builders import serving
from tensorkiln.controllers.inferencemodel import commit_scaling, normalised_spec
from tensorkiln.controllers.observed import Observed, TargetObserved, gather
from tensorkiln.controllers.plan import ModelPlan, plan_model
from tensorkiln.hardware.classes import discover
from tensorkiln.hardware.prices import PRICE_ANNOTATION
from tensorkiln.scaling import scaler as scaler_module
from tensorkiln.scaling.metrics import Observation
from tensorkiln.scaling.scaler import Scaler
from tensorkiln.status.conditions import find
from tensorkiln.status.inferencemodel import Rollup, inference_model_status
from tensorkiln_api import InferenceModelStatus
from tensorkiln_api.registry.manifest import BatcherSetting, ServingTuning, SimulatedLoad

from .test_builders import sample_model
from .test_model_plan import SETTINGS, compile_job, snapshot, stored
from .test_serving_builders import manifest
from .test_watch_cache import ReadsCounted, filled

L4, A100 = "nvidia-l4", "nvidia-a100-sxm4-40gb"
PRODUCTS = {L4: "NVIDIA-L4", A100: "NVIDIA-A100-SXM4-40GB"}
PRICES = {L4: "0.8", A100: "2.0"}
CAPACITY = {L4: 100.0, A100: 200.0}  # req/s a replica serves with p95 under 25 ms, by the compile's model
START = 1_800_000_000.0


def least_cost_model(min_replicas=0, max_replicas=8, placement="LeastCost"):
    model = sample_model()
    model["spec"]["hardware"] = {"mode": "Auto", "include": list(PRODUCTS.values())}
    model["spec"]["slo"] |= {"minReplicas": min_replicas, "maxReplicas": max_replicas, "placement": placement}
    return model


def gpu_node(name, cls, gpus):
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/arch": "amd64",
                "nvidia.com/gpu.product": PRODUCTS[cls],
            },
            "annotations": {PRICE_ANNOTATION: PRICES[cls]},
        },  # fmt: skip
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


# L4: two nodes of 2 GPUs (4 replicas at most); A100: one node of 8
NODES = [gpu_node("l4-0", L4, 2), gpu_node("l4-1", L4, 2), gpu_node("a100-0", A100, 8)]
CLASSES = {c.name: c for c in discover(NODES)}


def engine(tmp_path, cls):
    """The class's engine, tuned for the served settings: its model of the batcher meets 25 ms up to CAPACITY."""
    top = CAPACITY[cls]

    def load(clients, throughput, p95):
        return SimulatedLoad(clients=clients, throughput_per_s=throughput, p50_ms=p95 / 2, p90_ms=p95,
                             p95_ms=p95, p99_ms=p95 * 2, mean_batch=1.0)  # fmt: skip

    tuning = ServingTuning(
        setting=BatcherSetting(dynamic_batching=True, preferred_batch_sizes=[8], max_queue_delay_microseconds=500),
        reason="", max_batch_size=32, service_times=[], throughput_bound_per_s=top * 3,
        simulated=[load(1, top / 4, 5), load(8, top, 20), load(32, top * 1.5, 60)], unbatched=[],
    )  # fmt: skip
    found = manifest(tmp_path, "TensorRT", "GPU")
    return found.model_copy(update={"key": found.key.model_copy(update={"hardware_class": cls}),
                                    "serving_tuning": tuning})  # fmt: skip


def pod(model, cls, name, node=None, unschedulable=False):
    conditions = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}] if unschedulable else []
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": serving.selector(model, CLASSES[cls]),
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": ({"nodeName": node} if node else {}) | {"containers": [{"resources": {"requests": {
            "nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Running" if node else "Pending", "conditions": conditions},
    }  # fmt: skip


class Registry:
    engine_uri = staticmethod(lambda digest: f"file:///r/{digest}")

    def __init__(self, engines):
        self.engines = engines

    def manifest(self, digest):
        return self.engines[digest]


class Cluster:
    """The watch cache of one LeastCost model with a Deployment per class in `replicas` (and the engine alone,
    compiled but not deployed yet, of each class in `compiled`), and Triton's figures per class."""

    def __init__(self, tmp_path, model, replicas, nodes=NODES, pods=None, compiled=()):
        self.model, self.figures = model, {}
        engines = {cls: engine(tmp_path, cls) for cls in CLASSES}
        self.registry = Registry({m.digest(): m for m in engines.values()})
        jobs = {
            cls: stored(compile_job(model, CLASSES[cls]), phase="Succeeded", engine={"digest": engines[cls].digest()})
            for cls in CLASSES
        }
        objects = list(nodes) + [jobs[cls] for cls in compiled]
        for cls, (count, ready) in replicas.items():
            job = jobs[cls]
            found = TargetObserved(CLASSES[cls], job, {}, manifest=engines[cls])
            applied = plan_model(snapshot(model, [found]), SETTINGS).targets[0].serving.applies
            held = {obj["kind"]: stored(obj) for obj in applied}
            held["Deployment"]["spec"]["replicas"] = count
            held["Deployment"]["status"] = {"observedGeneration": 1, "replicas": count, "updatedReplicas": count,
                                            "availableReplicas": ready, "readyReplicas": ready}  # fmt: skip
            objects += [job, *held.values()]
        if pods is None:  # every replica running, on the class's nodes in turn
            pods = [
                pod(model, cls, f"{cls}-{i}", CLASSES[cls].nodes[i % len(CLASSES[cls].nodes)])
                for cls, (count, _) in replicas.items()
                for i in range(count)
            ]
        self.state = ReadsCounted(filled(*objects, *pods))
        self.state._manifests = {}

    def serve(self, cls, rate, latency_ms=10.0, busy=None, service_ms=None, recent_rate=None):
        self.figures[cls] = Observation(
            latency_ms=latency_ms, latency_source="summary-p95", queue_ms=1.0, request_rate=rate,
            recent_request_rate=recent_rate, failure_rate=0.0, pending=0.0, batch_size=1.0, service_ms=service_ms,
            busy=busy, ready_pods=1, at=datetime.now(UTC),
        )  # fmt: skip

    def reconcile(self, scaler):
        """(the reconcile's snapshot and plan, the replicas the plan writes per class); the scaler commits
        every verdict, as when each write succeeds."""
        observed = gather(self.state, self.registry, scaler, SETTINGS, self.model, normalised_spec(self.model))
        steps = plan_model(observed, SETTINGS)
        assert self.state.reads == []  # the watch cache alone
        commit_scaling(scaler, self.model, steps, {t.target.name for t in steps.targets if t.serving is not None})
        return Reconciled(observed, steps), {t.target.name: t.serving.replicas for t in steps.targets}


@dataclass(frozen=True)
class Reconciled:
    observed: Observed
    steps: ModelPlan

    @property
    def least_cost(self):
        return self.steps.placement.outcome if self.steps.placement else None

    @property
    def slo(self):
        """The scaler's outcome per class."""
        return {t.target.name: t.slo.outcome for t in self.steps.targets if t.slo is not None}


def status_of(decided):
    observed, found = decided.observed, decided.observed.per_target
    rollup = Rollup(
        list(observed.targets), {n: f.compile_job for n, f in found.items()},
        {n: f.rollout for n, f in found.items()}, {n: f.engine for n, f in found.items()}, list(observed.products),
        decided.slo, least_cost=decided.least_cost,
    )  # fmt: skip
    return inference_model_status(observed.model, rollup, Registry.engine_uri, datetime.now(UTC))


@pytest.fixture
def clock():
    """The scaler's clock, moved by the test (`scaler()`: a scaler that reads it, period 10 s)."""
    now = SimpleNamespace(at=START)
    now.scaler = lambda: Scaler(object(), period=10, clock=lambda: now.at)
    return now


@pytest.fixture
def prometheus(monkeypatch):
    clusters = []

    def observe(prometheus, namespace, model, hardware_class, percentile, recent_window):
        return clusters[-1].figures.get(hardware_class)

    monkeypatch.setattr(scaler_module, "observe", observe)
    return clusters


def test_the_cheapest_class_per_request_takes_the_load(tmp_path, clock, prometheus):
    cluster = Cluster(tmp_path, least_cost_model(), {L4: (1, 1), A100: (1, 1)})
    prometheus.append(cluster)
    cluster.serve(L4, 150)
    cluster.serve(A100, 150)
    decided, replicas = cluster.reconcile(clock.scaler())
    # 300 req/s: 4 x L4 (320 counted) 3.20/h beats 2 x A100 (4.00) and 3 x L4 + 1 x A100 (4.40). L4 goes up
    # at once; A100's last replica stays: with the scale-down headroom (300 / 0.7 = 429 req/s) the
    # placement would want A100s, the L4 pool being full at 4.
    assert replicas == {A100: 1, L4: 4}
    placement = decided.least_cost.placement
    assert (placement.replicas, placement.cost_per_hour, decided.least_cost.demand) == ({L4: 4, A100: 0}, 3.2, 300)
    l4, a100 = decided.slo[L4], decided.slo[A100]
    assert (l4.decision.reason, a100.decision.reason) == ("ScaledUp", "Placed")
    assert a100.decision.message == (
        "1 replica kept: the placement wants 0, but 1 with the 30% headroom a scale-down leaves"
    )
    assert [e[:2] for e in l4.events] == [("Normal", "ScaledUp")] and a100.events == ()
    assert {k: v for k, v in l4.slo_status.items() if k not in ("lastDecisionTime", "lastScaleTime")} == {
        "observedMilliseconds": 10.0, "latencySource": "summary-p95", "requestRate": 150.0, "queueMilliseconds": 1.0,
        "desiredReplicas": 4, "lastDecision": "ScaledUp", "lastDecisionMessage": "the least-cost placement wants 4: 1 -> 4",
        "capacityPerReplica": 100.0, "capacitySource": "MeasuredAtCompile", "capacityMeasuredAtCompile": 100.0,
        "replicaPricePerHour": 0.8, "loadShare": 0.8, "costPerHour": 3.2,
    }  # fmt: skip
    # the Service spreads evenly over the 5 decided replicas: 4 of 5 requests go to L4
    assert (a100.slo_status["costPerHour"], a100.slo_status["loadShare"]) == (2.0, 0.2)
    status = status_of(decided)
    InferenceModelStatus.model_validate(status)  # every field is in the CRD's schema
    assert status["costPerHour"] == 5.2  # what the replicas decided cost: 4 x 0.80 + 1 x 2.00
    met = find(status["conditions"], "SLOMet")
    assert (met["status"], met["reason"]) == ("True", "WithinTarget")
    assert met["message"].startswith("p95 within 25 ms; 300 req/s at the least cost, 3.2/h: nvidia-l4 4 x 80 req/s")


def test_burst_capacity_keeps_spare_replicas_through_a_low_load(tmp_path, clock, prometheus):
    model = least_cost_model()
    model["spec"]["slo"]["burstRequestsPerSecond"] = 200
    cluster = Cluster(tmp_path, model, {L4: (1, 1), A100: (0, 0)})
    prometheus.append(cluster)
    cluster.serve(L4, 60)
    decided, replicas = cluster.reconcile(clock.scaler())
    # 60 req/s needs 1 L4 (80 counted); with 200 req/s of burst capacity, 260 needs 4 L4 (3.20/h), which
    # beats 2 A100 (4.00/h)
    assert replicas == {L4: 4, A100: 0}
    met = find(status_of(decided)["conditions"], "SLOMet")
    assert (met["status"], met["reason"]) == ("True", "WithinTarget")
    assert "60 req/s + 200 req/s of burst capacity at the least cost, 3.2/h: nvidia-l4 4 x 80 req/s" in met["message"]


def test_a_full_cheap_pool_spills_to_the_next_cheapest_class_and_says_so(tmp_path, clock, prometheus):
    model = least_cost_model()
    # L4 runs 2 replicas; its third is Pending, Unschedulable: another workload holds the other GPUs
    pods = [pod(model, L4, "l4-a", "l4-0"), pod(model, L4, "l4-b", "l4-1"), pod(model, L4, "l4-c", unschedulable=True)]
    cluster = Cluster(tmp_path, model, {L4: (3, 2), A100: (0, 0)}, pods=pods)
    prometheus.append(cluster)
    cluster.serve(L4, 300, latency_ms=40.0)
    scaler = clock.scaler()
    decided, replicas = cluster.reconcile(scaler)
    # The Service spreads 300 req/s evenly: a mix of 2 L4 and 2 A100 gives each replica 75 (within L4's 80
    # counted), 1.60 + 4.00 = 5.60/h; 2 x A100 at 150 each cost 4.00/h. L4 alone would need 4 (3.20/h), which
    # its pool cannot run: the demand spilled to A100.
    assert replicas == {A100: 2, L4: 3}  # A100 up at once; L4 goes down only after the scale-down window
    placement = decided.least_cost.placement
    assert placement.replicas == {L4: 0, A100: 2} and placement.cost_per_hour == pytest.approx(4.0)
    spill = f"{L4} pool full: 2 replicas fit (2 running, 0 more fit), the placement wants 4; spilled to {A100}"
    assert [s.message for s in placement.spills] == [spill]
    assert decided.least_cost.events == (("Warning", "SpilledOver", spill),)
    met = find(status_of(decided)["conditions"], "SLOMet")
    assert (met["status"], met["reason"]) == ("False", "LatencyOverTarget")  # L4's latency now, before the spill
    cluster.serve(L4, 300)
    clock.at += 10
    again, _ = cluster.reconcile(scaler)
    assert again.least_cost.events == ()  # the same spill: one Event
    met = find(status_of(again)["conditions"], "SLOMet")
    assert (met["status"], met["reason"]) == ("True", "SpilledOver") and met["message"].endswith(spill)


def test_demand_beyond_every_class_at_its_maximum_uses_the_most_capacity_and_gives_the_shortfall(
    tmp_path, clock, prometheus
):
    cluster = Cluster(tmp_path, least_cost_model(min_replicas=1, max_replicas=2), {L4: (1, 1), A100: (1, 1)})
    prometheus.append(cluster)
    cluster.serve(L4, 500, latency_ms=80.0)
    cluster.serve(A100, 500, latency_ms=60.0)
    scaler = clock.scaler()
    decided, replicas = cluster.reconcile(scaler)
    # every class at its maximum; the even spread gives each of the 4 replicas a quarter, so they sustain
    # 4 x the slowest's 80 counted = 320 (2 x A100 alone, with L4's minimum of 1 beside them: 3 x 80 = 240)
    assert replicas == {A100: 2, L4: 2}
    placement = decided.least_cost.placement
    assert (placement.reason, placement.shortfall) == ("InsufficientCapacity", 680)
    met = find(status_of(decided)["conditions"], "SLOMet")
    assert (met["status"], met["reason"]) == ("False", "InsufficientCapacity")
    assert met["message"].startswith("demand 1000 req/s exceeds the most the classes can serve, 320 req/s")
    assert met["message"].endswith("short by 680 req/s")
    assert decided.least_cost.events == (("Warning", "InsufficientCapacity", met["message"]),)
    clock.at += 10
    assert cluster.reconcile(scaler)[0].least_cost.events == ()  # once per stay short


def test_a_class_the_placement_leaves_unused_goes_down_only_after_the_scale_down_window(tmp_path, clock, prometheus):
    cluster = Cluster(tmp_path, least_cost_model(), {L4: (4, 4), A100: (1, 1)})
    prometheus.append(cluster)
    scaler = clock.scaler()
    written = []
    for step in range(31):  # every 10 s for 300 s: the default scale-down window
        cluster.serve(L4, 160 if step != 15 else 300)  # half-way, a burst that wants the A100 too
        cluster.serve(A100, 40)
        written.append(cluster.reconcile(scaler)[1][A100])
        clock.at += 10
    assert written == [1] * 31  # the burst's wish is within the window
    written = []
    for _ in range(16):  # 200 req/s: 3 x L4 would do, and 4 (all the pool) with the scale-down headroom
        cluster.serve(L4, 160)
        cluster.serve(A100, 40)
        decided, replicas = cluster.reconcile(scaler)
        written.append(replicas[A100])
        clock.at += 10
    assert written == [1] * 15 + [0]  # 300 s after the burst: the window wanted none throughout
    assert replicas == {A100: 0, L4: 4}
    a100 = decided.slo[A100]
    assert a100.decision.message == (
        "for 300s the least-cost placement wanted at most 0 with the 30% headroom a scale-down leaves: 1 -> 0"
    )
    assert [e[:2] for e in a100.events] == [("Normal", "ScaledDown")]


def test_a_scale_down_window_longer_than_the_default_history_still_ends(tmp_path, clock, prometheus):
    # The API allows windows up to 3600 s; the records were kept 900 s, so a longer window was never observed
    # from its start, and the class it would take away ran on.
    model = least_cost_model()
    model["spec"]["slo"]["scaleDownStabilizationSeconds"] = 1200
    cluster = Cluster(tmp_path, model, {L4: (2, 2), A100: (1, 1)})
    prometheus.append(cluster)
    scaler = clock.scaler()
    written = []
    for _ in range(121):  # every 10 s: 140 req/s fits 2 x L4 (160 counted), A100 unwanted throughout
        cluster.serve(L4, 100)
        cluster.serve(A100, 40)
        written.append(cluster.reconcile(scaler)[1][A100])
        clock.at += 10
    assert written == [1] * 120 + [0]  # down once the 1200 s window has been observed


def test_unused_class_at_zero_replicas_is_not_waited_for(tmp_path, clock, prometheus):
    cluster = Cluster(tmp_path, least_cost_model(), {L4: (2, 2), A100: (0, 0)})
    prometheus.append(cluster)
    cluster.serve(L4, 100)
    decided, replicas = cluster.reconcile(clock.scaler())
    assert replicas == {A100: 0, L4: 2}  # 100 req/s: 2 x L4 (160 counted), as placed
    assert decided.slo[L4].decision.reason == "Placed"
    status = status_of(decided)
    ready = find(status["conditions"], "Ready")
    assert (status["phase"], ready["status"]) == ("Ready", "True")
    assert ready["message"] == f"Triton serves on 1 targets ({A100} unused by the least-cost placement)"
    assert status["costPerHour"] == 1.6


def test_a_new_model_starts_only_the_replicas_the_placement_wants(tmp_path, clock, prometheus):
    # Both engines compiled, no Deployment yet, no demand known: one replica on the cheaper class (per request
    # served, L4), none on A100, rather than one on each for a scale-down window.
    cluster = Cluster(tmp_path, least_cost_model(), {}, compiled=(L4, A100))
    prometheus.append(cluster)
    decided, replicas = cluster.reconcile(clock.scaler())
    assert replicas == {A100: 0, L4: 1}
    assert decided.least_cost.placement.replicas == {A100: 0, L4: 1}
    l4, a100 = decided.slo[L4], decided.slo[A100]
    assert (a100.decision.reason, a100.decision.message, a100.events) == (
        "Placed",
        "0 replicas, as the least-cost placement wants",
        (),
    )
    assert (l4.decision.message, [e[:2] for e in l4.events]) == (
        "the least-cost placement wants 1: 0 -> 1",
        [("Normal", "ScaledUp")],
    )
    # With burst capacity, as many as carry it: 200 req/s is 3 x L4 (240 counted).
    bursty = least_cost_model()
    bursty["spec"]["slo"]["burstRequestsPerSecond"] = 200
    cluster = Cluster(tmp_path, bursty, {}, compiled=(L4, A100))
    prometheus.append(cluster)
    assert cluster.reconcile(clock.scaler())[1] == {A100: 0, L4: 3}
    # minReplicas 1: each class starts at its minimum, as placed, not "outside the bounds" of a 0 it never ran.
    cluster = Cluster(tmp_path, least_cost_model(min_replicas=1), {}, compiled=(L4, A100))
    prometheus.append(cluster)
    decided, replicas = cluster.reconcile(clock.scaler())
    assert replicas == {A100: 1, L4: 1}
    assert {decided.slo[c].decision.reason for c in (L4, A100)} == {"Placed"}


def test_a_class_compiled_later_joins_at_what_the_placement_wants(tmp_path, clock, prometheus):
    cluster = Cluster(tmp_path, least_cost_model(), {L4: (2, 2)}, compiled=(A100,))
    prometheus.append(cluster)
    cluster.serve(L4, 100)
    assert cluster.reconcile(clock.scaler())[1] == {A100: 0, L4: 2}
    # No figures yet for the serving class: the placement is held, and the new class starts as without
    # LeastCost (one replica), not at a placement nobody made.
    cluster.figures.clear()
    decided, replicas = cluster.reconcile(clock.scaler())
    assert decided.least_cost.placement is None and replicas == {A100: 1, L4: 2}


def test_a_step_is_placed_from_the_recent_window_before_the_rate_window_rises_to_it(tmp_path, clock, prometheus):
    cluster = Cluster(tmp_path, least_cost_model(), {L4: (2, 2), A100: (0, 0)})
    prometheus.append(cluster)
    # 100 req/s until 5 s ago, 300 since: the 30 s window reads 133, the 10 s window 200
    cluster.serve(L4, 133.3, recent_rate=200.0)
    decided, replicas = cluster.reconcile(clock.scaler())
    assert decided.least_cost.demand == 200.0 and replicas == {A100: 0, L4: 3}  # 3 x 80 counted
    cluster.serve(L4, 133.3, recent_rate=None)  # scraped too seldom for the recent window: the rate window
    clock.at += 10
    again, _ = cluster.reconcile(clock.scaler())
    assert again.least_cost.demand == 133.3


def observed_steadily(cluster, clock, scaler):
    """2 L4 replicas carry 100 req/s half busy at 10 ms a request, p95 20 ms, for half the minute Triton's
    summary remembers: the queueing factor is 1, and at 25 ms u = 0.6: a replica sustains 0.6 * 100 / 1.0 =
    60 req/s, not the compile's 100. The last reconcile's (decided, replicas)."""
    cluster.serve(L4, 100, latency_ms=20.0, busy=1.0, service_ms=10.0)
    decided, _ = cluster.reconcile(scaler)
    status = decided.slo[L4].slo_status
    assert status["capacitySource"] == "MeasuredAtCompile"  # one observation: the load's steadiness is not known
    for _ in range(3):
        clock.at += 10
        decided, replicas = cluster.reconcile(scaler)
    return decided, replicas


def test_the_observed_capacity_once_there_is_one_is_what_the_placement_counts_on(tmp_path, clock, prometheus):
    cluster = Cluster(tmp_path, least_cost_model(), {L4: (2, 2), A100: (0, 0)})
    prometheus.append(cluster)
    decided, replicas = observed_steadily(cluster, clock, clock.scaler())
    status = decided.slo[L4].slo_status
    assert (status["capacityPerReplica"], status["capacitySource"]) == (60.0, "Observed")
    assert (status["capacityObserved"], status["capacityMeasuredAtCompile"]) == (60.0, 100.0)
    # 48 counted a replica: 3 x L4 2.40/h, or one A100 (160 counted) 2.00/h: the A100 now serves cheaper
    assert decided.least_cost.placement.replicas == {L4: 0, A100: 1}
    assert replicas == {A100: 1, L4: 2}  # up at once; L4 down once the window says so


def test_a_restarted_operator_counts_on_the_observed_capacity_its_status_kept(tmp_path, clock, prometheus):
    """A new scaler's memory is empty: the compile's figure would count until a steady minute had passed, and
    on a busy node it can be several times too high (issue 15's trial: 363 req/s against 103 observed)."""
    cluster = Cluster(tmp_path, least_cost_model(), {L4: (2, 2), A100: (0, 0)})
    prometheus.append(cluster)
    decided, _ = observed_steadily(cluster, clock, clock.scaler())
    kept = status_of(decided)
    before = decided.slo[L4].slo_status
    assert before["capacityObservedFor"].startswith("engine ") and before["capacityObservedFor"].endswith(
        "1 nvidia.com/gpu per replica, p95 < 25 ms"
    )
    cluster.model = cluster.model | {"status": kept}
    clock.at += 10
    restarted, _ = cluster.reconcile(clock.scaler())
    status = restarted.slo[L4].slo_status
    assert (status["capacityPerReplica"], status["capacitySource"]) == (60.0, "Observed")
    assert status["capacityObservedFor"] == before["capacityObservedFor"]
    assert restarted.least_cost.placement.replicas == {L4: 0, A100: 1}  # as before the restart
    # Another SLO target: what was observed at 25 ms holds no more, and the compile's figure counts
    cluster.model["spec"] = cluster.model["spec"] | {"slo": cluster.model["spec"]["slo"] | {"targetMilliseconds": 30}}
    changed, _ = cluster.reconcile(clock.scaler())
    status = changed.slo[L4].slo_status
    assert status["capacitySource"] == "MeasuredAtCompile" and "capacityObserved" not in status


def test_no_metrics_from_a_serving_class_holds_every_class(tmp_path, clock, prometheus):
    cluster = Cluster(tmp_path, least_cost_model(), {L4: (1, 1), A100: (1, 1)})
    prometheus.append(cluster)
    cluster.serve(L4, 300)  # the A100's pods serve, but Prometheus has nothing of them
    decided, replicas = cluster.reconcile(clock.scaler())
    assert replicas == {A100: 1, L4: 1} and decided.least_cost.placement is None
    status = status_of(decided)
    assert "costPerHour" not in status
    assert find(status["conditions"], "SLOMetricsAvailable")["reason"] == "NoData"
    assert find(status["conditions"], "SLOMet")["status"] == "Unknown"


def test_per_class_placement_still_scales_each_class_alone_on_its_latency(tmp_path, clock, prometheus):
    cluster = Cluster(tmp_path, least_cost_model(placement="PerClass"), {L4: (1, 1), A100: (1, 1)})
    prometheus.append(cluster)
    cluster.serve(L4, 150, latency_ms=60.0)  # over the 25 ms target: 60 / 25 -> 3, at most 2x a step
    cluster.serve(A100, 150)
    decided, replicas = cluster.reconcile(clock.scaler())
    assert replicas == {A100: 1, L4: 2} and decided.least_cost is None
    assert decided.slo[L4].decision.reason == "ScaledUp"
    assert "capacityPerReplica" not in decided.slo[L4].slo_status
    assert "costPerHour" not in status_of(decided)
