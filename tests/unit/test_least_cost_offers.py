"""The least-cost placement's offers (scaling.offers): capacity per replica with its source
(scaling.capacity), price, bounds, and room in the pool (hardware.pools), from what gather observes."""

from dataclasses import replace

import pytest
from tensorkiln.hardware import pools
from tensorkiln.hardware.classes import HardwareClass
from tensorkiln.scaling import capacity
from tensorkiln.scaling.decision import Sample, steady
from tensorkiln.scaling.offers import COUNTED_SHARE, Pool, class_offer
from tensorkiln_api import CapacitySource
from tensorkiln_api.registry.manifest import BatcherSetting, Benchmark, ServingTuning, SimulatedLoad

from .test_serving_builders import manifest

L4 = HardwareClass("nvidia-l4", "GPU", "NVIDIA-L4", {}, nodes=("l4-0", "l4-1"), price_per_hour=0.8)
CPU = HardwareClass("cpu", "CPU", "Intel amd64 CPU (amx)", {}, nodes=("c-0",), price_per_hour=0.04)
TUNED = BatcherSetting(dynamic_batching=True, preferred_batch_sizes=[8], max_queue_delay_microseconds=500)


def load(clients, throughput, p95, p99=None):
    return SimulatedLoad(
        clients=clients, throughput_per_s=throughput, p50_ms=p95 / 2, p90_ms=p95 * 0.9, p95_ms=p95,
        p99_ms=p99 or p95 * 1.5, mean_batch=1.0,
    )  # fmt: skip


def benchmark(batch, p50, p95, p99=None):
    return Benchmark(batch_size=batch, p50_ms=p50, p95_ms=p95, p99_ms=p99 or p95, throughput_per_s=1000 / p50,
                     threads=1, warmup_runs=1, runs=10)  # fmt: skip


def engine(tmp_path, tuning=None, benchmarks=()):
    found = manifest(tmp_path, "TensorRT", "GPU")
    winner = found.candidates[0].model_copy(update={"benchmarks": list(benchmarks)})
    return found.model_copy(update={"candidates": [winner], "serving_tuning": tuning})


def tuning(max_batch=32, setting=TUNED):
    return ServingTuning(
        setting=setting, reason="", max_batch_size=max_batch, service_times=[], throughput_bound_per_s=900.0,
        simulated=[load(1, 40, 5), load(8, 100, 20), load(32, 180, 60)],
        unbatched=[load(1, 35, 6), load(8, 60, 24), load(32, 70, 90)],
    )  # fmt: skip


SERVED_AS_TUNED = TUNED


def test_the_compile_capacity_is_the_most_throughput_whose_percentile_meets_the_target(tmp_path):
    tuned = engine(tmp_path, tuning())
    assert capacity.measured_at_compile(tuned, SERVED_AS_TUNED, 32, "p95", 25) == 100  # 180/s is at 60 ms
    assert capacity.measured_at_compile(tuned, SERVED_AS_TUNED, 32, "p95", 60) == 180
    assert capacity.measured_at_compile(tuned, SERVED_AS_TUNED, 32, "p99", 25) == 40  # p99 at 8 clients: 30 ms
    assert capacity.measured_at_compile(tuned, SERVED_AS_TUNED, 32, "p95", 4) == 0  # a lone client misses it


def test_served_without_batching_on_one_instance_the_unbatched_figures_stand_in(tmp_path):
    tuned = engine(tmp_path, tuning())
    assert (
        capacity.measured_at_compile(
            tuned,
            BatcherSetting(dynamic_batching=False, preferred_batch_sizes=[8], max_queue_delay_microseconds=500),
            32,
            "p95",
            25,
        )
        == 60
    )


def test_settings_the_compile_did_not_simulate_fall_back_to_the_benchmark_projection(tmp_path):
    # spec.serving overrides the tuned delay: the simulation says nothing of it; 2 ms per request alone
    found = engine(tmp_path, tuning(), [benchmark(8, 9, 12), benchmark(1, 2, 3)])
    overridden = capacity.measured_at_compile(
        found, TUNED.model_copy(update={"max_queue_delay_microseconds": 2000}), 32, "p95", 26
    )
    # 2 * (1 + 3 u / (1 - u)) = 26 -> u = 0.8: 0.8 * 1000 / 2 = 400/s
    assert overridden == pytest.approx(400)
    assert capacity.measured_at_compile(found, SERVED_AS_TUNED, 16, "p95", 26) == pytest.approx(400)  # other max batch
    assert capacity.measured_at_compile(found, SERVED_AS_TUNED, 16, "p95", 2.5) == 0  # p95 alone 3 ms
    assert capacity.measured_at_compile(engine(tmp_path), SERVED_AS_TUNED, 32, "p95", 25) is None  # no figure


def test_the_capacity_at_a_target_inverts_the_projected_latency():
    # 25 * (1 + 3 u / (1 - u)) = 100 -> u = 0.5: 0.5 * 1000 / 25 = 20/s; 10 ms -> u = 0.75: 75/s
    assert capacity.capacity_at_target(25, 100) == pytest.approx(20)
    assert capacity.capacity_at_target(10, 100) == pytest.approx(75)
    assert capacity.capacity_at_target(100, 100) == 0  # the service time alone reaches the target


def test_the_observed_capacity_is_projected_from_the_newest_settled_loaded_observation():
    # 4 replicas carrying 200/s with 2 instance-seconds/s busy (u 0.5), 10 ms per request, p95 20 ms:
    # the queueing factor learned is (20 - 10) / (10 * 0.5 / 0.5) = 1; at 30 ms target u = 2/3
    # the load steady for the minute Triton's summary remembers: one sample each 10 s
    loaded = [Sample(40.0 + 10 * i, 20.0, 4, rate=200.0 + i, busy=2.0, service_ms=10.0) for i in range(7)]
    quiet = Sample(110.0, 11.0, 4, rate=20.0, busy=0.2, service_ms=10.0)  # u 0.05: says little of load
    observed = capacity.observed([*loaded, quiet], 30.0, None, instances=1)
    assert observed == pytest.approx((2 / 3) * 206 / 2.0)  # 68.7/s a replica, from the newest loaded one
    assert capacity.observed([quiet], 30.0, None, instances=1) is None
    assert capacity.observed(loaded, 30.0, last_scale_at=45.0, instances=1) is None  # within a minute of an action
    assert capacity.observed(loaded, 8.0, None, instances=1) == 0  # the service time alone misses 8 ms


def test_no_observed_capacity_from_a_load_that_just_changed():
    # A step: 50/s for a minute, then 200/s on the same 4 replicas. Triton's p95 still holds the queueing
    # of the step (200 ms), which would teach a factor that makes a replica look a tenth of itself.
    before = [Sample(10.0 * i, 12.0, 4, rate=50.0, busy=0.5, service_ms=10.0) for i in range(7)]
    step = Sample(70.0, 200.0, 4, rate=200.0, busy=2.0, service_ms=10.0)
    assert not steady([*before, step], step)
    assert capacity.observed([*before, step], 30.0, None, instances=1) is None  # before: u 0.125, not loaded
    assert steady(before, before[-1]) and not steady(before[:3], before[2])  # half a minute seen


def test_the_observed_figure_once_there_is_one_is_the_one_counted_on():
    assert capacity.Capacity(100.0, None).source == CapacitySource.MEASURED_AT_COMPILE
    both = capacity.Capacity(100.0, 70.0)
    assert (both.per_replica, both.source) == (70.0, CapacitySource.OBSERVED)
    assert (capacity.Capacity(None, None).per_replica, capacity.Capacity(None, None).source) == (None, None)


def node(name, gpus=None, cpu=None, ready=True, cordoned=False):
    allocatable = {k: v for k, v in (("nvidia.com/gpu", gpus), ("cpu", cpu)) if v is not None}
    return {
        "metadata": {"name": name},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {"allocatable": allocatable, "conditions": [{"type": "Ready", "status": str(ready)}]},
    }


def pod(name, node_name=None, requests=None, phase="Running", unschedulable=False, init=None, deleting=False):
    containers = [{"resources": {"requests": r}} for r in (requests or [])]
    conditions = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}] if unschedulable else []
    meta = {"name": name, "namespace": "ns"} | ({"deletionTimestamp": "2026-01-01T00:00:00Z"} if deleting else {})
    spec = {"containers": containers} | ({"nodeName": node_name} if node_name else {})
    if init:
        spec["initContainers"] = [{"resources": {"requests": init}}]
    return {"metadata": meta, "spec": spec, "status": {"phase": phase, "conditions": conditions}}


GPU = {"limits": {"nvidia.com/gpu": "1"}}


def test_a_replica_takes_its_gpus_or_its_cpu_request():
    assert pools.replica_request("GPU", GPU) == ("nvidia.com/gpu", 1.0)
    assert pools.replica_request("GPU", {"requests": {"nvidia.com/gpu": "2"}}) == ("nvidia.com/gpu", 2.0)
    assert pools.replica_request("CPU", {"requests": {"cpu": "500m"}}) == ("cpu", 0.5)
    assert pools.replica_request("CPU", {"limits": {"cpu": "2"}}) == ("cpu", 2.0)  # requests default to limits
    assert pools.replica_request("CPU", {"requests": {"memory": "1Gi"}}) is None
    assert pools.pod_request(pod("p", requests=[{"cpu": "1"}, {"cpu": "250m"}], init={"cpu": "2"}), "cpu") == 2.0
    assert pools.pod_request(pod("p", requests=[{"cpu": "1"}, {"cpu": "250m"}], init={"cpu": "1"}), "cpu") == 1.25


def test_free_replicas_count_whole_replicas_per_node_on_nodes_that_take_pods():
    nodes = [node("a", gpus="4"), node("b", gpus="2"), node("c", gpus="8", cordoned=True), node("d", "8", ready=False)]
    bound = [
        pod("x", "a", [{"nvidia.com/gpu": "1"}]),
        pod("y", "a", [{"nvidia.com/gpu": "2"}]),
        pod("done", "b", [{"nvidia.com/gpu": "2"}], phase="Succeeded"),  # holds nothing any more
        pod("elsewhere", "z", [{"nvidia.com/gpu": "1"}]),
    ]
    assert pools.free_replicas(nodes, bound, "nvidia.com/gpu", 1) == 1 + 2
    assert pools.free_replicas(nodes, bound, "nvidia.com/gpu", 2) == 0 + 1  # a replica is never split
    assert pools.free_replicas([node("c", cpu="4")], [pod("p", "c", [{"cpu": "1500m"}])], "cpu", 0.5) == 5


def test_the_room_of_a_target_its_replicas_running_and_more_that_fit():
    nodes = [node("l4-0", gpus="2"), node("l4-1", gpus="2")]
    own = [pod("r0", "l4-0", [{"nvidia.com/gpu": "1"}]), pod("r1", "l4-1", [{"nvidia.com/gpu": "1"}]),
           pod("gone", "l4-1", [{"nvidia.com/gpu": "1"}], deleting=True), pod("new")]  # fmt: skip
    other = pod("other-model", "l4-0", [{"nvidia.com/gpu": "1"}])
    room = pools.room("GPU", GPU, nodes, own, own + [other])
    assert (room.running, room.free, room.pending) == (2, 0, 0)  # 4 GPUs: 2 ours, 1 terminating, 1 another model's
    assert room.note == "0 more fit (1 nvidia.com/gpu each, TensorKiln's pods counted)"
    roomy = pools.room("GPU", GPU, nodes, own[:2], own[:2])
    assert (roomy.running, roomy.free) == (2, 2)


def test_an_unschedulable_replica_means_the_pool_is_full_whatever_the_count():
    """The cache holds TensorKiln's pods only: other workloads' requests show up as our pods pending."""
    own = [pod("r0", "l4-0", [{"nvidia.com/gpu": "1"}]), pod("r1", unschedulable=True)]
    room = pools.room("GPU", GPU, [node("l4-0", gpus="8")], own, own)
    assert (room.running, room.free, room.pending) == (1, 0, 1)
    assert room.note == "1 replica(s) unschedulable: the pool is full"


def test_without_the_pods_of_the_pool_its_room_is_not_limited():
    room = pools.room("GPU", GPU, [node("l4-0", gpus="8")], [], None)
    assert (room.running, room.free) == (0, None)


def test_an_offer_counts_on_a_share_of_the_capacity_prices_the_replica_and_takes_the_bounds(tmp_path):
    spec = {
        "slo": {"percentile": "p95", "targetMilliseconds": 25, "minReplicas": 0, "maxReplicas": 6},
        "serving": {"maxBatchSize": 32, "dynamicBatching": {}},
    }
    pool = Pool((node("l4-0", gpus="2"), node("l4-1", gpus="2")), (pod("r0", "l4-0", [{"nvidia.com/gpu": "1"}]),),
                [pod("r0", "l4-0", [{"nvidia.com/gpu": "1"}])])  # fmt: skip
    made = class_offer(L4, spec, None, engine(tmp_path, tuning()), [], None, {}, pool)
    assert made.capacity == capacity.Capacity(100.0, None)
    offer = made.offer
    assert (offer.hardware_class, offer.capacity, offer.price) == ("nvidia-l4", 100 * COUNTED_SHARE, 0.8)
    assert (offer.min_replicas, offer.max_replicas, offer.running, offer.free) == (0, 6, 1, 3)
    two_gpus = spec | {"serving": spec["serving"] | {"resources": {"limits": {"nvidia.com/gpu": "2"}}}}
    made = class_offer(L4, two_gpus, None, engine(tmp_path, tuning()), [], None, {}, pool)
    assert (made.replica_price, made.capacity.measured_at_compile, made.offer.free) == (1.6, 200.0, 1)


def test_a_cpu_replica_costs_its_cores_and_an_unknown_capacity_is_counted_as_none(tmp_path):
    spec = {
        "slo": {"percentile": "p95", "targetMilliseconds": 25, "minReplicas": 1, "maxReplicas": 4},
        "serving": {"maxBatchSize": 32, "dynamicBatching": {}, "resources": {"requests": {"cpu": "2"}}},
    }
    pool = Pool((node("c-0", cpu="16"),), (), None)
    made = class_offer(CPU, spec, None, None, [], None, {}, pool)  # the registry is away: no manifest
    assert made.replica_price == pytest.approx(0.08)
    assert (made.capacity.per_replica, made.offer.capacity, made.offer.free) == (None, 0.0, None)
    no_request = spec | {"serving": spec["serving"] | {"resources": {"requests": {"cpu": "0"}}}}
    assert class_offer(CPU, no_request, None, None, [], None, {}, pool).offer.price_error == (
        "its replicas request no CPU, and the price is per core"
    )
    refused = replace(CPU, price_per_hour=None, price_error="node c-0: tensorkiln.dev/price-per-hour '-1' is not ...")
    assert class_offer(refused, spec, None, None, [], None, {}, pool).offer.price_error == refused.price_error


def test_a_cpu_replica_counts_on_its_share_of_the_cores_the_compile_measured_with(tmp_path):
    """The compile pod measured with its usable CPUs; a replica that requests fewer cores serves about that much
    less (issue 15: the OCR classifier's 1213 req/s was measured on 2 CPUs, for a replica of 0.5)."""
    spec = {
        "slo": {"percentile": "p95", "targetMilliseconds": 25, "minReplicas": 1, "maxReplicas": 4},
        "serving": {"maxBatchSize": 32, "dynamicBatching": {}, "resources": {"requests": {"cpu": "500m"}}},
    }
    pool = Pool((node("c-0", cpu="16"),), (), None)
    on_two = engine(tmp_path, tuning()).model_copy(
        update={"hardware_kind": "CPU", "fingerprint": {"cpu": {"usableCpus": 2}}}
    )
    assert class_offer(CPU, spec, None, on_two, [], None, {}, pool).capacity.measured_at_compile == pytest.approx(25.0)
    four_cores = spec | {"serving": spec["serving"] | {"resources": {"requests": {"cpu": "4"}}}}
    assert (
        class_offer(CPU, four_cores, None, on_two, [], None, {}, pool).capacity.measured_at_compile == 100.0
    )  # at most all
    unknown = on_two.model_copy(update={"fingerprint": {}})
    assert class_offer(CPU, spec, None, unknown, [], None, {}, pool).capacity.measured_at_compile == 100.0
