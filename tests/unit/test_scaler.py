"""The scaler's wiring: metrics in, decision and status out; missing metrics hold replicas."""

from datetime import UTC
from types import SimpleNamespace

import pytest
from tensorkiln.controllers import scaler as scaler_module
from tensorkiln.controllers.scaler import Scaler
from tensorkiln.hardware.classes import HardwareClass
from tensorkiln.scaling.metrics import MetricsUnavailable
from tensorkiln.status.serving import Rollout
from tensorkiln.status.slo import slo_conditions

MODEL = {"metadata": {"name": "m", "namespace": "d"}}
SPEC = {
    "slo": {
        "percentile": "p95",
        "targetMilliseconds": 50,
        "minReplicas": 1,
        "maxReplicas": 6,
        "scaleUpStabilizationSeconds": 0,
        "scaleDownStabilizationSeconds": 300,
        "mode": "Operator",
    }
}
CPU = HardwareClass(name="cpu", kind="CPU", product="cpu", node_selector={}, nodes=("local-0",))
SIMULATED = HardwareClass(name="l4", kind="GPU", product="L4", node_selector={}, nodes=("n",), simulated=True)


def observation(latency_ms, rate=100.0):
    return SimpleNamespace(
        latency_ms=latency_ms, latency_source="summary-p95", queue_ms=1.5, request_rate=rate, busy=None, service_ms=None,
        recent_request_rate=rate,
    )  # fmt: skip


@pytest.fixture
def metrics(monkeypatch):
    answers = []

    def observe(prometheus, namespace, model, hardware_class, percentile, recent_window):
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(scaler_module, "observe", observe)
    return answers


def test_over_target_scales_up_and_records_the_decision(metrics):
    metrics.append(observation(150))
    outcome = Scaler(object()).evaluate(MODEL, SPEC, CPU, Rollout("d", 1, 1, True), {})
    assert outcome.replicas == 2  # 3x over target, but at most 2x in one step
    assert outcome.slo_status["lastDecision"] == "ScaledUp"
    assert outcome.slo_status["observedMilliseconds"] == 150 and "lastScaleTime" in outcome.slo_status
    conditions, summary = slo_conditions(SPEC["slo"], {"cpu": outcome})
    assert {c["type"]: c["status"] for c in conditions} == {"SLOMetricsAvailable": "True", "SLOMet": "False"}
    assert summary == "p95 150.0/50 ms"


def test_the_latency_column_is_a_dash_until_requests_are_served(metrics):
    """An idle target's 0 ms was measured on no request: kubectl shows "-", not "p95 0.0/50 ms"."""
    metrics.append(observation(12.0, rate=0.0))
    idle = Scaler(object()).evaluate(MODEL, SPEC, CPU, Rollout("d", 1, 1, True), {})
    assert idle.slo_status["latencySource"] == "idle"
    assert slo_conditions(SPEC["slo"], {"cpu": idle})[1] == "-"
    assert slo_conditions(SPEC["slo"], {})[1] == "-"  # nothing serves yet


def test_prometheus_down_or_no_data_holds_replicas_and_says_why(metrics):
    metrics.extend([MetricsUnavailable("connection refused"), None])
    held = Scaler(object()).evaluate(
        MODEL, SPEC, CPU, Rollout("d", 3, 3, True), {"lastScaleTime": "2026-01-01T00:00:00Z"}
    )
    assert (held.replicas, held.metrics[:2]) == (3, (False, "PrometheusUnavailable"))
    assert held.slo_status == {"lastScaleTime": "2026-01-01T00:00:00Z"}  # the previous status stands
    empty = Scaler(object()).evaluate(MODEL, SPEC, CPU, Rollout("d", 3, 3, True), {})
    assert (empty.replicas, empty.metrics[1]) == (3, "NoData")
    conditions, _ = slo_conditions(SPEC["slo"], {"cpu": empty})
    assert conditions[0]["reason"] == "NoData" and conditions[1]["status"] == "Unknown"


def test_simulated_pools_are_never_scaled_on_metrics_that_cannot_exist(metrics):
    outcome = Scaler(object()).evaluate(MODEL, SPEC, SIMULATED, Rollout("d", 2, 2, True), {})
    assert (outcome.replicas, outcome.metrics[1]) == (2, "SimulatedPool")


def test_a_restarted_operator_keeps_the_cooldown_from_status(metrics):
    from datetime import datetime

    from tensorkiln.status.conditions import timestamp

    metrics.append(observation(150))
    just_now = {"lastScaleTime": timestamp(datetime.now(UTC))}
    outcome = Scaler(object()).evaluate(MODEL, SPEC, CPU, Rollout("d", 2, 2, True), just_now)
    assert outcome.replicas == 2 and outcome.slo_status["lastDecision"] == "WaitingForReplicas"


def test_an_idle_target_counts_as_zero_latency_not_as_its_stale_summary(metrics):
    metrics.append(observation(900, rate=0.0))
    outcome = Scaler(object()).evaluate(MODEL, SPEC, CPU, Rollout("d", 2, 2, True), {})
    assert outcome.replicas == 2 and outcome.slo_status["latencySource"] == "idle"
    assert outcome.decision.slo_met is True


def test_an_action_is_not_repeated_on_a_status_read_before_it(metrics):
    """A handler and the resync both reconcile; the second may carry the status from before the first acted."""
    metrics.extend([observation(150), observation(150)])
    scaler = Scaler(object())
    first = scaler.evaluate(MODEL, SPEC, CPU, Rollout("d", 1, 1, True), {})
    assert first.replicas == 2 and [e[:2] for e in first.events] == [("Normal", "ScaledUp")]
    again = scaler.evaluate(MODEL, SPEC, CPU, Rollout("d", 2, 2, True), {})  # stale: no lastScaleTime
    assert (again.replicas, again.decision.reason, again.events) == (2, "WaitingForReplicas", ())
    assert again.slo_status["lastScaleTime"] == first.slo_status["lastScaleTime"]


def test_reaching_the_maximum_warns_once(metrics):
    metrics.extend([observation(500), observation(500)])
    scaler, spec = Scaler(object()), {"slo": {**SPEC["slo"], "maxReplicas": 2}}
    maxed = [scaler.evaluate(MODEL, spec, CPU, Rollout("d", 2, 2, True), {}) for _ in range(2)]
    assert [o.decision.reason for o in maxed] == ["MaxReplicasReached"] * 2
    assert [e[:2] for e in maxed[0].events] == [("Warning", "MaxReplicasReached")] and maxed[1].events == ()


def test_scaling_up_to_the_maximum_is_a_scale_action_and_a_warning(metrics):
    metrics.append(observation(500))
    spec = {"slo": {**SPEC["slo"], "maxReplicas": 3}}
    outcome = Scaler(object()).evaluate(MODEL, spec, CPU, Rollout("d", 2, 2, True), {})
    assert outcome.replicas == 3
    assert [e[:2] for e in outcome.events] == [("Normal", "ScaledUp"), ("Warning", "MaxReplicasReached")]
