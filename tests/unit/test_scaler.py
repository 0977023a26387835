"""The scaler in the controller shape: observe (its memory, Prometheus: reads only) -> decide
(scaling.slo, pure) -> commit (what it remembers); metrics in, decision and status out; missing
metrics hold replicas."""

from datetime import UTC, datetime

import pytest
from tensorkiln.hardware.classes import HardwareClass
from tensorkiln.scaling import scaler as scaler_module
from tensorkiln.scaling.memory import TargetMemory
from tensorkiln.scaling.metrics import MetricsUnavailable, Observation
from tensorkiln.scaling.scaler import Scaler
from tensorkiln.scaling.slo import TargetSignals, decide_target
from tensorkiln.status.serving import Rollout
from tensorkiln.status.slo import slo_conditions
from tensorkiln_api.common import kube_time

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
    return Observation(
        latency_ms=latency_ms, latency_source="summary-p95", queue_ms=1.5, request_rate=rate, recent_request_rate=rate,
        failure_rate=0.0, pending=0.0, batch_size=1.0, service_ms=None, busy=None, ready_pods=1, at=datetime.now(UTC),
    )  # fmt: skip


def evaluate(scaler, spec, target, rollout, previous):
    """One reconcile's part of it: observe, decide, and commit (the replicas taken as applied)."""
    verdict = decide_target(spec, target, rollout, previous, None, scaler.observe_target(MODEL, spec, target))
    scaler.commit_target(MODEL, target.name, verdict)
    return verdict.outcome


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
    outcome = evaluate(Scaler(object()), SPEC, CPU, Rollout("d", 1, 1, True), {})
    assert outcome.replicas == 2  # 3x over target, but at most 2x in one step
    assert outcome.slo_status["lastDecision"] == "ScaledUp"
    assert outcome.slo_status["observedMilliseconds"] == 150 and "lastScaleTime" in outcome.slo_status
    conditions, summary = slo_conditions(SPEC["slo"], {"cpu": outcome})
    assert {c["type"]: c["status"] for c in conditions} == {"SLOMetricsAvailable": "True", "SLOMet": "False"}
    assert summary == "p95 150.0/50 ms"


def test_the_latency_column_is_a_dash_until_requests_are_served(metrics):
    """An idle target's 0 ms was measured on no request: kubectl shows "-", not "p95 0.0/50 ms"."""
    metrics.append(observation(12.0, rate=0.0))
    idle = evaluate(Scaler(object()), SPEC, CPU, Rollout("d", 1, 1, True), {})
    assert idle.slo_status["latencySource"] == "idle"
    assert slo_conditions(SPEC["slo"], {"cpu": idle})[1] == "-"
    assert slo_conditions(SPEC["slo"], {})[1] == "-"  # nothing serves yet


def test_prometheus_down_or_no_data_holds_replicas_and_says_why(metrics):
    metrics.extend([MetricsUnavailable("connection refused"), None])
    held = evaluate(Scaler(object()), SPEC, CPU, Rollout("d", 3, 3, True), {"lastScaleTime": "2026-01-01T00:00:00Z"})
    assert (held.replicas, held.metrics[:2]) == (3, (False, "PrometheusUnavailable"))
    assert held.slo_status == {"lastScaleTime": "2026-01-01T00:00:00Z"}  # the previous status stands
    empty = evaluate(Scaler(object()), SPEC, CPU, Rollout("d", 3, 3, True), {})
    assert (empty.replicas, empty.metrics[1]) == (3, "NoData")
    conditions, _ = slo_conditions(SPEC["slo"], {"cpu": empty})
    assert conditions[0]["reason"] == "NoData" and conditions[1]["status"] == "Unknown"


def test_simulated_pools_are_never_scaled_on_metrics_that_cannot_exist(metrics):
    outcome = evaluate(Scaler(object()), SPEC, SIMULATED, Rollout("d", 2, 2, True), {})
    assert (outcome.replicas, outcome.metrics[1]) == (2, "SimulatedPool")


def test_a_restarted_operator_keeps_the_cooldown_from_status(metrics):
    metrics.append(observation(150))
    just_now = {"lastScaleTime": kube_time(datetime.now(UTC))}
    outcome = evaluate(Scaler(object()), SPEC, CPU, Rollout("d", 2, 2, True), just_now)
    assert outcome.replicas == 2 and outcome.slo_status["lastDecision"] == "WaitingForReplicas"


def test_an_idle_target_counts_as_zero_latency_not_as_its_stale_summary(metrics):
    metrics.append(observation(900, rate=0.0))
    outcome = evaluate(Scaler(object()), SPEC, CPU, Rollout("d", 2, 2, True), {})
    assert outcome.replicas == 2 and outcome.slo_status["latencySource"] == "idle"
    assert outcome.decision.slo_met is True


def test_an_action_is_not_repeated_on_a_status_read_before_it(metrics):
    """A handler and the resync both reconcile; the second may carry the status from before the first acted."""
    metrics.extend([observation(150), observation(150)])
    scaler = Scaler(object())
    first = evaluate(scaler, SPEC, CPU, Rollout("d", 1, 1, True), {})
    assert first.replicas == 2 and [e[:2] for e in first.events] == [("Normal", "ScaledUp")]
    again = evaluate(scaler, SPEC, CPU, Rollout("d", 2, 2, True), {})  # stale: no lastScaleTime
    assert (again.replicas, again.decision.reason, again.events) == (2, "WaitingForReplicas", ())
    assert again.slo_status["lastScaleTime"] == first.slo_status["lastScaleTime"]


def test_reaching_the_maximum_warns_once(metrics):
    metrics.extend([observation(500), observation(500)])
    scaler, spec = Scaler(object()), {"slo": {**SPEC["slo"], "maxReplicas": 2}}
    maxed = [evaluate(scaler, spec, CPU, Rollout("d", 2, 2, True), {}) for _ in range(2)]
    assert [o.decision.reason for o in maxed] == ["MaxReplicasReached"] * 2
    assert [e[:2] for e in maxed[0].events] == [("Warning", "MaxReplicasReached")] and maxed[1].events == ()


def test_scaling_up_to_the_maximum_is_a_scale_action_and_a_warning(metrics):
    metrics.append(observation(500))
    spec = {"slo": {**SPEC["slo"], "maxReplicas": 3}}
    outcome = evaluate(Scaler(object()), spec, CPU, Rollout("d", 2, 2, True), {})
    assert outcome.replicas == 3
    assert [e[:2] for e in outcome.events] == [("Normal", "ScaledUp"), ("Warning", "MaxReplicasReached")]


def test_decide_is_pure_a_scale_action_is_remembered_with_its_time():
    """Memory in, memory out: no scaler, no Prometheus."""
    signals = TargetSignals(1000.0, TargetMemory(), reading=observation(150))
    verdict = decide_target(SPEC, CPU, Rollout("d", 1, 1, True), {}, None, signals)
    assert (verdict.outcome.replicas, verdict.outcome.decision.reason) == (2, "ScaledUp")
    assert verdict.memory.last_scale == 1000.0 and [s.latency_ms for s in verdict.memory.samples] == [150]
    assert signals.memory == TargetMemory()  # what was observed is left as it was
    again = decide_target(
        SPEC, CPU, Rollout("d", 2, 2, True), {}, None, TargetSignals(1005.0, verdict.memory, reading=observation(150))
    )
    assert (again.outcome.replicas, again.outcome.decision.reason) == (2, "WaitingForReplicas")  # the cooldown


def test_observing_writes_nothing_an_uncommitted_verdict_is_forgotten(metrics):
    """A reconcile whose apply failed commits nothing: the next one decides from the same memory again."""
    metrics.extend([observation(150), observation(150)])
    scaler = Scaler(object())
    first = scaler.observe_target(MODEL, SPEC, CPU)
    decide_target(SPEC, CPU, Rollout("d", 1, 1, True), {}, None, first)  # not committed
    second = scaler.observe_target(MODEL, SPEC, CPU)
    assert second.memory == first.memory == TargetMemory()
    assert decide_target(SPEC, CPU, Rollout("d", 1, 1, True), {}, None, second).outcome.decision.reason == "ScaledUp"


def test_within_the_period_the_last_outcome_repeats_without_its_events_or_a_read(metrics):
    metrics.append(observation(150))
    at = [1000.0]
    scaler = Scaler(object(), period=10, clock=lambda: at[0])
    first = evaluate(scaler, SPEC, CPU, Rollout("d", 1, 1, True), {})
    at[0] = 1005.0
    signals = scaler.observe_target(MODEL, SPEC, CPU)  # Prometheus is not asked: no answer is queued
    assert signals.reading is None and signals.recent == first
    repeated = decide_target(SPEC, CPU, Rollout("d", 2, 1, True), {}, None, signals)
    assert (repeated.outcome.replicas, repeated.outcome.events, repeated.memory) == (2, (), None)
