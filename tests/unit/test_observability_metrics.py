"""The operator's own metrics: what moves each one, and /metrics serving them."""

import asyncio
import logging
import urllib.request

import pytest
from kopf._cogs.clients import api, watching
from kopf._cogs.configs.configuration import OperatorSettings
from kopf._cogs.structs.references import Resource
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from tensorkiln.builders.labels import MODEL
from tensorkiln.observability import metrics


def value(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def compile_job(phase: str | None = None, cache_hit: bool = False) -> dict:
    status = {"phase": phase, "cacheHit": cache_hit} if phase else {}
    return {
        "metadata": {"name": "m-l4", "namespace": "ns1", "labels": {MODEL: "m"}},
        "spec": {"hardware": {"className": "nvidia-l4"}},
        "status": status,
    }


def test_reconciling_counts_times_and_counts_errors():
    before = value("tensorkiln_reconciles_total", kind="CompileJob")
    timed = value("tensorkiln_reconcile_duration_seconds_count", kind="CompileJob")
    errors = value("tensorkiln_reconcile_errors_total", kind="CompileJob")

    with metrics.reconciling("CompileJob"):
        pass
    with pytest.raises(RuntimeError), metrics.reconciling("CompileJob"):
        raise RuntimeError("API down")

    assert value("tensorkiln_reconciles_total", kind="CompileJob") == before + 2
    assert value("tensorkiln_reconcile_duration_seconds_count", kind="CompileJob") == timed + 2
    assert value("tensorkiln_reconcile_errors_total", kind="CompileJob") == errors + 1


def test_series_exist_before_any_event():
    for kind in metrics.KINDS:
        assert REGISTRY.get_sample_value("tensorkiln_reconciles_total", {"kind": kind}) is not None
    for result in ("hit", "miss"):
        assert REGISTRY.get_sample_value("tensorkiln_registry_lookups_total", {"result": result}) is not None


@pytest.mark.parametrize(
    ("old", "new", "result"),
    [
        ("Running", compile_job("Succeeded")["status"], "Succeeded"),
        (None, compile_job("Succeeded", cache_hit=True)["status"], "CacheHit"),
        ("Pending", compile_job("Failed")["status"], "Failed"),
    ],
)
def test_compile_result_counted_once_on_the_transition(old, new, result):
    labels = {"namespace": "ns1", "model": "m", "hardware_class": "nvidia-l4", "result": result}
    before = value("tensorkiln_compile_results_total", **labels)
    body = compile_job(old)

    metrics.record_compile_transition(body, body["status"], new)
    metrics.record_compile_transition(body, new, new)  # a later reconcile: the phase stands

    assert value("tensorkiln_compile_results_total", **labels) == before + 1


def test_compile_phases_that_are_not_final_are_not_results():
    assert metrics.compile_result({"phase": "Running"}) is None
    assert metrics.compile_result({"phase": "Pending"}) is None
    assert metrics.compile_result({}) is None


def test_scale_actions_by_direction():
    labels = {"namespace": "ns1", "model": "m", "hardware_class": "cpu"}
    up, down = (value("tensorkiln_scale_actions_total", **labels, direction=d) for d in ("up", "down"))

    metrics.record_scale_action("ns1", "m", "cpu", "up")
    metrics.record_scale_action("ns1", "m", "cpu", "Up")
    metrics.record_scale_action("ns1", "m", "cpu", "down")

    assert value("tensorkiln_scale_actions_total", **labels, direction="up") == up + 2
    assert value("tensorkiln_scale_actions_total", **labels, direction="down") == down + 1


def test_registry_lookups_hit_and_miss():
    hits, misses = (
        value("tensorkiln_registry_lookups_total", result="hit"),
        value("tensorkiln_registry_lookups_total", result="miss"),
    )

    metrics.record_registry_lookup("key", object())
    metrics.record_registry_lookup("key", None)
    metrics.record_registry_lookup("key", None)
    metrics.record_registry_lookup(None, None)  # no key (digest unknown): no lookup was made

    assert value("tensorkiln_registry_lookups_total", result="hit") == hits + 1
    assert value("tensorkiln_registry_lookups_total", result="miss") == misses + 2


def test_target_gauges_follow_status_and_go_with_the_model():
    model = {"metadata": {"name": "gauged", "namespace": "ns2"}, "spec": {"slo": {"targetMilliseconds": 25}}}
    targets = [
        {"hardwareClass": "cpu", "replicas": 3, "readyReplicas": 2},
        {"hardwareClass": "nvidia-l4"},  # compiling: no rollout yet
    ]
    cpu = {"namespace": "ns2", "model": "gauged", "hardware_class": "cpu"}
    l4 = {**cpu, "hardware_class": "nvidia-l4"}

    metrics.record_targets(model, {"targets": targets})
    assert value("tensorkiln_target_replicas", **cpu) == 3
    assert value("tensorkiln_target_ready_replicas", **cpu) == 2
    assert value("tensorkiln_slo_target_milliseconds", **cpu) == 25
    assert REGISTRY.get_sample_value("tensorkiln_target_replicas", l4) == 0

    metrics.record_targets(model, {"targets": targets[:1]})  # the L4 pool went away
    assert REGISTRY.get_sample_value("tensorkiln_target_replicas", l4) is None

    placed = {**targets[0], "slo": {"costPerHour": 0.3, "loadShare": 0.75, "capacityPerReplica": 16.0}}
    metrics.record_targets(model, {"targets": [placed]})  # placement LeastCost
    assert value("tensorkiln_target_cost_per_hour", **cpu) == 0.3
    assert value("tensorkiln_target_load_share", **cpu) == 0.75
    assert value("tensorkiln_target_capacity_per_replica", **cpu) == 16
    metrics.record_targets(model, {"targets": targets[:1]})  # PerClass again: no placement figures
    assert REGISTRY.get_sample_value("tensorkiln_target_cost_per_hour", cpu) is None

    metrics.retain_models([("ns2", "other")])  # the model was deleted
    assert REGISTRY.get_sample_value("tensorkiln_target_replicas", cpu) is None
    assert REGISTRY.get_sample_value("tensorkiln_slo_target_milliseconds", cpu) is None


@pytest.fixture
def reconnect_counter():
    logger = logging.getLogger(metrics.WatchReconnectCounter.LOGGER)
    level = logger.level
    counter = metrics.WatchReconnectCounter.install(threshold=logging.INFO)
    yield counter
    logger.removeFilter(counter)
    logger.setLevel(level)


def resource() -> Resource:
    return Resource("tensorkiln.dev", "v1alpha1", "inferencemodels", namespaced=True)


def test_watch_reconnects_counted_from_kopfs_own_records(reconnect_counter, monkeypatch, caplog):
    """Drives kopf's real watch code with a stubbed API stream: a 410 Gone, then an idle stream."""
    settings = OperatorSettings()
    settings.watching.initial_streaming = True  # straight to the watch request, no listing
    settings.watching.inactivity_timeout = 0.05

    async def expired(**_):
        yield {"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}

    async def idle(**_):
        await asyncio.sleep(1)
        yield {}

    async def consume(stream_fn, watch) -> None:
        monkeypatch.setattr(api, "stream", stream_fn)
        async for _ in watch(
            settings=settings,
            resource=resource(),
            namespace="ns1",
            operator_pause_waiter=asyncio.get_running_loop().create_future(),
        ):
            pass

    before = {r: value("tensorkiln_watch_reconnects_total", reason=r) for r in metrics.WATCH_RECONNECT_REASONS}
    with caplog.at_level(logging.DEBUG, logger=metrics.WatchReconnectCounter.LOGGER):
        asyncio.run(consume(expired, watching.continuous_watch))
        asyncio.run(consume(idle, watching.watch_objs))

    assert value("tensorkiln_watch_reconnects_total", reason="expired") == before["expired"] + 1
    assert value("tensorkiln_watch_reconnects_total", reason="inactive") == before["inactive"] + 1
    assert value("tensorkiln_watch_reconnects_total", reason="error") == before["error"]
    # Counted, then kept out of the output: they are below the operator's level.
    assert not [r for r in caplog.records if r.name == metrics.WatchReconnectCounter.LOGGER]


def test_failed_watch_requests_count_and_stay_in_the_output(reconnect_counter):
    logger = logging.getLogger(metrics.WatchReconnectCounter.LOGGER)
    before = value("tensorkiln_watch_reconnects_total", reason="error")
    record = logger.makeRecord(
        logger.name, logging.ERROR, __file__, 1, "Request attempt #1/9 failed; will retry: GET /apis -> %r", (), None
    )
    assert reconnect_counter.filter(record) is True
    assert value("tensorkiln_watch_reconnects_total", reason="error") == before + 1


def test_metrics_endpoint_serves_every_name():
    metrics.record_scale_action("ns3", "served", "cpu", "up")
    metrics.record_compile_transition(compile_job("Running"), {"phase": "Running"}, {"phase": "Failed"})
    metrics.record_targets(
        {"metadata": {"name": "served", "namespace": "ns3"}},
        {"targets": [{"hardwareClass": "cpu", "slo": {"costPerHour": 0.1, "loadShare": 1, "capacityPerReplica": 9}}]},
    )
    server = metrics.serve(0, addr="127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5) as response:
            assert response.status == 200
            text = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()

    served = {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}
    assert metrics.NAMES - {"tensorkiln_slo_target_milliseconds"} <= served  # no SLO in that model
    assert 'tensorkiln_scale_actions_total{direction="up",hardware_class="cpu",model="served",namespace="ns3"}' in text
    assert "process_cpu_seconds_total" in served  # the default collectors come along
