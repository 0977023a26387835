"""The SLO scaler: per target, read Triton's metrics from Prometheus, decide, and report.

Holds each target's recent observations in memory (a restart only makes the next scale-down
wait one stabilisation window longer); the time of the last scale action lives in status, so a
restarted operator keeps its cooldown and repeats no action.
"""

import threading
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from tensorkiln.builders.tritonconfig import instance_count
from tensorkiln.hardware.classes import HardwareClass
from tensorkiln.registry.manifest import EngineManifest
from tensorkiln.scaling.decision import Decision, Policy, Sample, decide
from tensorkiln.scaling.metrics import MetricsUnavailable, observe
from tensorkiln.status.conditions import timestamp
from tensorkiln.status.serving import Rollout

HISTORY_SECONDS = 900
IDLE_RATE = 0.05  # requests/s below which a target counts as idle


@dataclass(frozen=True)
class Outcome:
    replicas: int
    slo_status: dict  # TargetSLOStatus
    metrics: tuple[bool, str, str]  # SLOMetricsAvailable: status, reason, message
    decision: Decision | None
    events: tuple[tuple[str, str, str], ...] = ()  # (type, reason, message): an action, reaching the maximum


def policy_of(spec: dict, target: HardwareClass, manifest: EngineManifest | None = None) -> Policy:
    """`manifest`: the engine the target is to serve, whose compile may have chosen its instance count."""
    slo = spec["slo"]
    return Policy(
        instances=instance_count(spec.get("serving", {}), manifest, target.kind == "GPU"),
        target_ms=slo["targetMilliseconds"],
        percentile=slo["percentile"],
        min_replicas=max(slo["minReplicas"], 1),
        max_replicas=slo["maxReplicas"],
        scale_up_stabilization_s=slo["scaleUpStabilizationSeconds"],
        scale_down_stabilization_s=slo["scaleDownStabilizationSeconds"],
    )


def _format_time(at: float) -> str:
    return timestamp(datetime.fromtimestamp(at, UTC))


def _parse_time(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


class Scaler:
    def __init__(self, prometheus, period: float = 0.0):
        self.prometheus = prometheus  # a PrometheusConnect, or None when no URL is configured
        # Each target is evaluated at most once a period; a reconcile in between (an owned
        # object's event) gets the last outcome, without its Events, which were posted already.
        self.period = period
        self._outcomes: dict[tuple[str, str, str], tuple[float, Outcome]] = {}
        self._history: dict[tuple[str, str, str], list[Sample]] = {}
        self._last_scale: dict[tuple[str, str, str], float] = {}
        self._warned_max: set[tuple[str, str, str]] = set()
        self._lock = threading.Lock()

    def _record(self, key: tuple[str, str, str], sample: Sample) -> list[Sample]:
        with self._lock:
            samples = [s for s in self._history.get(key, []) if s.at > sample.at - HISTORY_SECONDS]
            if not samples or sample.at - samples[-1].at >= 1:
                samples.append(sample)
            self._history[key] = samples
            return list(samples)

    def evaluate(
        self,
        model: dict,
        spec: dict,
        target: HardwareClass,
        rollout: Rollout,
        previous: dict,
        manifest: EngineManifest | None = None,
    ) -> Outcome:
        """Desired replicas for a serving target under spec.slo; `previous` is its last slo status, `manifest`
        that of the engine it is to serve (None: not read)."""
        meta = model["metadata"]
        key, now = (meta["namespace"], meta["name"], target.name), time.monotonic()
        with self._lock:
            last = self._outcomes.get(key)
        if last is not None and now - last[0] < self.period:
            outcome = last[1]
            return replace(outcome, replicas=outcome.replicas if outcome.decision else rollout.replicas, events=())
        outcome = self._evaluate(model, spec, target, rollout, previous, manifest)
        with self._lock:
            self._outcomes[key] = (now, outcome)
        return outcome

    def _evaluate(
        self,
        model: dict,
        spec: dict,
        target: HardwareClass,
        rollout: Rollout,
        previous: dict,
        manifest: EngineManifest | None,
    ) -> Outcome:
        meta = model["metadata"]
        hold = rollout.replicas
        if target.simulated:
            return Outcome(hold, previous, (False, "SimulatedPool", "no Triton runs on kwok-simulated nodes"), None)
        if self.prometheus is None:
            return Outcome(hold, previous, (False, "NoPrometheus", "no Prometheus URL configured"), None)
        policy = policy_of(spec, target, manifest)
        try:
            obs = observe(self.prometheus, meta["namespace"], meta["name"], target.name, policy.percentile)
        except MetricsUnavailable as error:
            return Outcome(hold, previous, (False, "PrometheusUnavailable", f"{error}; holding replicas"), None)
        if obs is None:
            return Outcome(hold, previous, (False, "NoData", "no Triton metrics yet; holding replicas"), None)
        now = time.time()
        key = (meta["namespace"], meta["name"], target.name)
        # No traffic: nothing waits, whatever quantile Triton's summary still holds from earlier load.
        idle = obs.request_rate < IDLE_RATE or obs.latency_ms is None
        latency = 0.0 if idle else obs.latency_ms
        sample = Sample(now, latency, max(rollout.ready_replicas, 1), obs.request_rate, obs.busy, obs.service_ms)
        samples = self._record(key, sample)
        # The status this reconcile read may predate this process's last action (a reconcile since
        # wrote a newer one): the later time counts, so no action is repeated within the cooldown.
        times = (_parse_time(previous.get("lastScaleTime")), self._last_scale.get(key))
        last_scale = max((t for t in times if t is not None), default=None)
        decision = decide(samples, rollout.replicas, rollout.ready_replicas, policy, last_scale, now)
        events = []
        if decision.replicas != rollout.replicas:
            last_scale = self._last_scale[key] = now
            action = "ScaledUp" if decision.replicas > rollout.replicas else "ScaledDown"
            events.append(("Normal", action, decision.message))
            self._warned_max.discard(key)
        if decision.reason == "MaxReplicasReached" and key not in self._warned_max:
            events.append(("Warning", decision.reason, decision.message))
            self._warned_max.add(key)  # once per stay at the maximum
        elif decision.slo_met:
            self._warned_max.discard(key)
        same = (previous.get("lastDecision"), previous.get("desiredReplicas")) == (decision.reason, decision.replicas)
        status = {
            "observedMilliseconds": round(latency, 3),
            "latencySource": "idle" if idle else obs.latency_source,
            "requestRate": round(obs.request_rate, 3),
            "desiredReplicas": decision.replicas,
            "lastDecision": decision.reason,
            "lastDecisionMessage": decision.message[:1024],
            # When this decision was first reached: an unchanged decision leaves status unchanged.
            "lastDecisionTime": previous["lastDecisionTime"]
            if same and previous.get("lastDecisionTime")
            else _format_time(now),
        }
        if obs.queue_ms is not None:
            status["queueMilliseconds"] = round(obs.queue_ms, 3)
        if last_scale is not None:
            status["lastScaleTime"] = _format_time(last_scale)
        metrics = (True, "MetricsFlowing", f"latency from {obs.latency_source}")
        return Outcome(decision.replicas, status, metrics, decision, tuple(events))
