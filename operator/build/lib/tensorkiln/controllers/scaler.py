"""The SLO scaler: per target, read Triton's metrics from Prometheus, decide, and report.

spec.slo.placement PerClass (`evaluate`): each target is decided alone, on its own latency
(scaling.decision.decide). LeastCost (`place`): the model's targets are decided together: the demand
(the request rate of every target) is placed on the classes at the least cost per hour
(scaling.placement, from each class's offer: scaling.offers), and each target follows its share of the
placement under the same stabilisation rules (scaling.decision.follow_placement).

Holds each target's recent observations (and, under LeastCost, what the placement wanted) in memory
(a restart only makes the next scale-down wait one stabilisation window longer); the time of the last
scale action lives in status, so a restarted operator keeps its cooldown and repeats no action.
"""

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from tensorkiln_api import CapacitySource
from tensorkiln_api.registry.manifest import EngineManifest

from tensorkiln.builders.tritonconfig import instance_count
from tensorkiln.controllers.offers import Offer, Pool, class_offer
from tensorkiln.hardware.classes import HardwareClass
from tensorkiln.scaling.decision import Decision, Policy, Sample, Wish, decide, follow_placement
from tensorkiln.scaling.metrics import MetricsUnavailable, Observation, observe
from tensorkiln.scaling.placement import INSUFFICIENT_CAPACITY, Placement, place
from tensorkiln.status.conditions import timestamp
from tensorkiln.status.serving import Rollout

HISTORY_SECONDS = 900
IDLE_RATE = 0.05  # requests/s below which a target counts as idle
# A LeastCost model keeps the replicas it runs while they meet the demand at most this much above the least
# cost (scaling.placement.place): near-equal placements would otherwise take turns as capacity figures move.
KEEP_WITHIN = 0.10


def _kept_for(spec: dict) -> float:
    """How far back a target's records (samples, wishes) are kept: HISTORY_SECONDS, or its scale-down window
    and a minute where that is longer (the API allows 3600 s): a window longer than its records is never
    observed from its start, and would never scale down."""
    return max(HISTORY_SECONDS, spec["slo"]["scaleDownStabilizationSeconds"] + 60)


@dataclass(frozen=True)
class Outcome:
    replicas: int
    slo_status: dict  # TargetSLOStatus
    metrics: tuple[bool, str, str]  # SLOMetricsAvailable: status, reason, message
    decision: Decision | None
    events: tuple[tuple[str, str, str], ...] = ()  # (type, reason, message): an action, reaching the maximum


@dataclass(frozen=True)
class Member:
    """One target of a LeastCost model, as the gather step observes it: one with a Deployment, or about to
    get one (its rollout then at minReplicas, none ready)."""

    target: HardwareClass
    rollout: Rollout
    previous: dict  # its last slo status
    engine: str | None  # digest of the engine it is to serve
    manifest: EngineManifest | None  # of that engine (None: not read)
    pool: Pool


@dataclass(frozen=True)
class LeastCostOutcome:
    """A LeastCost model's evaluation: each member's outcome, and the placement they follow."""

    outcomes: Mapping[str, Outcome]  # by class: replicas, slo status (capacity, price, share, cost), decision
    placement: Placement | None  # None: held (a serving target without metrics: the demand is not known)
    demand: float | None  # requests/s placed: the request rate of every target
    cost_per_hour: float | None  # of the replicas decided; None: a member has no price, or held
    events: tuple[tuple[str, str, str], ...] = ()  # model-wide: a spill-over, capacity running short


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
    def __init__(self, prometheus, period: float = 0.0, recent_window: str = "10s"):
        self.prometheus = prometheus  # a PrometheusConnect, or None when no URL is configured
        self.recent_window = recent_window  # the short rate window: a load step shows there first
        # Each target is evaluated at most once a period; a reconcile in between (an owned
        # object's event) gets the last outcome, without its Events, which were posted already.
        self.period = period
        self._outcomes: dict[tuple[str, str, str], tuple[float, Outcome]] = {}
        self._history: dict[tuple[str, str, str], list[Sample]] = {}
        self._last_scale: dict[tuple[str, str, str], float] = {}
        self._warned_max: set[tuple[str, str, str]] = set()
        self._wishes: dict[tuple[str, str, str], list[Wish]] = {}  # LeastCost: what the placement wanted
        self._placements: dict[tuple[str, str], tuple[float, LeastCostOutcome]] = {}  # by model
        self._warned_placement: dict[tuple[str, str], tuple] = {}  # the spill and shortfall last warned of
        self._lock = threading.Lock()

    def _record(self, key: tuple[str, str, str], sample: Sample, keep_s: float) -> list[Sample]:
        with self._lock:
            samples = [s for s in self._history.get(key, []) if s.at > sample.at - keep_s]
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

    def _observe(
        self, model: dict, spec: dict, target: HardwareClass, rollout: Rollout, previous: dict
    ) -> tuple[Observation | None, Outcome | None]:
        """(the target's figures from Prometheus, None), or (None, an Outcome that holds its replicas and
        says why there are none)."""
        meta = model["metadata"]
        hold = rollout.replicas
        if target.simulated:
            return None, Outcome(
                hold, previous, (False, "SimulatedPool", "no Triton runs on kwok-simulated nodes"), None
            )
        if self.prometheus is None:
            return None, Outcome(hold, previous, (False, "NoPrometheus", "no Prometheus URL configured"), None)
        percentile = spec["slo"]["percentile"]
        try:
            obs = observe(
                self.prometheus, meta["namespace"], meta["name"], target.name, percentile,
                recent_window=self.recent_window,
            )  # fmt: skip
        except MetricsUnavailable as error:
            return None, Outcome(hold, previous, (False, "PrometheusUnavailable", f"{error}; holding replicas"), None)
        if obs is None:
            return None, Outcome(hold, previous, (False, "NoData", "no Triton metrics yet; holding replicas"), None)
        return obs, None

    def _sample(
        self, key: tuple[str, str, str], obs: Observation, rollout: Rollout, now: float, keep_s: float
    ) -> list[Sample]:
        """Record the observation in the target's history (kept for `keep_s`); returns it, newest last."""
        # No traffic: nothing waits, whatever quantile Triton's summary still holds from earlier load.
        latency = 0.0 if _idle(obs) else obs.latency_ms
        sample = Sample(
            now, latency, max(rollout.ready_replicas, 1), obs.request_rate, obs.busy, obs.service_ms,
            obs.recent_request_rate,
        )  # fmt: skip
        return self._record(key, sample, keep_s)

    def _last_scale_at(self, key: tuple[str, str, str], previous: dict) -> float | None:
        # The status this reconcile read may predate this process's last action (a reconcile since
        # wrote a newer one): the later time counts, so no action is repeated within the cooldown.
        times = (_parse_time(previous.get("lastScaleTime")), self._last_scale.get(key))
        return max((t for t in times if t is not None), default=None)

    def _act(
        self, key: tuple[str, str, str], decision: Decision, rollout: Rollout, now: float
    ) -> tuple[list[tuple[str, str, str]], float | None]:
        """The Events of a decision (a scale action; the maximum newly reached with the SLO missed), and
        the time of the action when it is one."""
        events, acted = [], None
        if decision.replicas != rollout.replicas:
            acted = self._last_scale[key] = now
            action = "ScaledUp" if decision.replicas > rollout.replicas else "ScaledDown"
            events.append(("Normal", action, decision.message))
            self._warned_max.discard(key)
        if decision.reason == "MaxReplicasReached" and key not in self._warned_max:
            events.append(("Warning", decision.reason, decision.message))
            self._warned_max.add(key)  # once per stay at the maximum
        elif decision.slo_met:
            self._warned_max.discard(key)
        return events, acted

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
        obs, held = self._observe(model, spec, target, rollout, previous)
        if held is not None:
            return held
        policy = policy_of(spec, target, manifest)
        now = time.time()
        key = (meta["namespace"], meta["name"], target.name)
        samples = self._sample(key, obs, rollout, now, _kept_for(spec))
        last_scale = self._last_scale_at(key, previous)
        decision = decide(samples, rollout.replicas, rollout.ready_replicas, policy, last_scale, now)
        events, acted = self._act(key, decision, rollout, now)
        status = _slo_status(previous, decision, now, acted or last_scale, obs)
        metrics = (True, "MetricsFlowing", f"latency from {obs.latency_source}")
        return Outcome(decision.replicas, status, metrics, decision, tuple(events))

    def place(self, model: dict, spec: dict, members: list[Member]) -> LeastCostOutcome:
        """Replicas for every member of a LeastCost model (`spec` validated), at most once a period: a
        reconcile in between gets the last outcome, without its Events, which were posted already."""
        meta = model["metadata"]
        key, now = (meta["namespace"], meta["name"]), time.monotonic()
        with self._lock:
            last = self._placements.get(key)
        if (
            last is not None
            and now - last[0] < self.period
            and set(last[1].outcomes) == {m.target.name for m in members}
        ):
            rollouts = {m.target.name: m.rollout for m in members}
            outcomes = {
                name: replace(o, replicas=o.replicas if o.decision else rollouts[name].replicas, events=())
                for name, o in last[1].outcomes.items()
            }
            return replace(last[1], outcomes=outcomes, events=())
        outcome = self._place(model, spec, members)
        with self._lock:
            self._placements[key] = (now, outcome)
        return outcome

    def _place(self, model: dict, spec: dict, members: list[Member]) -> LeastCostOutcome:
        meta, slo, now = model["metadata"], spec["slo"], time.time()
        by_name = {m.target.name: m for m in members}
        keys = {name: (meta["namespace"], meta["name"], name) for name in by_name}
        readings: dict[str, Observation] = {}
        held: dict[str, Outcome] = {}
        keep_s = _kept_for(spec)
        for name, m in by_name.items():
            if m.rollout.serving:  # a target scaled to 0, or whose pods are starting, has no metrics to read
                obs, hold = self._observe(model, spec, m.target, m.rollout, m.previous)
                if hold is not None:
                    held[name] = hold
                else:
                    readings[name] = obs
                    self._sample(keys[name], obs, m.rollout, now, keep_s)
        if held:  # a serving target without figures: the demand is not known, and no target moves
            outcomes = {
                name: held.get(name) or Outcome(m.rollout.replicas, m.previous, _flowing(readings.get(name)), None)
                for name, m in by_name.items()
            }
            return LeastCostOutcome(outcomes, None, None, None)
        last_scale = {name: self._last_scale_at(keys[name], m.previous) for name, m in by_name.items()}
        offers = {
            name: class_offer(
                m.target, spec, m.engine, m.manifest, self._samples(keys[name]), last_scale[name], m.previous, m.pool
            )
            for name, m in by_name.items()
        }
        demand = sum(_demand(obs) for obs in readings.values())
        offered = [o.offer for o in offers.values()]
        burst = slo.get("burstRequestsPerSecond", 0.0)
        placement = place(offered, demand, KEEP_WITHIN, burst)
        # What a scale-down goes by: the placement of the demand over the headroom (Wish.keeps).
        keeps = place(offered, demand / Policy.headroom, KEEP_WITHIN, burst).replicas
        decisions, events, acted = {}, {}, {}
        for name, m in by_name.items():
            wishes = self._wish(keys[name], Wish(now, placement.replicas[name], keeps[name]), keep_s)
            obs = readings.get(name)
            met = None if obs is None else _idle(obs) or obs.latency_ms <= slo["targetMilliseconds"]
            decisions[name] = follow_placement(
                wishes, m.rollout.replicas, (slo["minReplicas"], slo["maxReplicas"]),
                policy_of(spec, m.target, m.manifest), last_scale[name], now, met,
            )  # fmt: skip
            events[name], acted[name] = self._act(keys[name], decisions[name], m.rollout, now)
        replicas = {name: d.replicas for name, d in decisions.items()}
        costs, shares = _costs(offers, replicas), _shares(offers, replicas)
        outcomes = {}
        for name, m in by_name.items():
            obs, decision = readings.get(name), decisions[name]
            status = _slo_status(m.previous, decision, now, acted[name] or last_scale[name], obs)
            status |= _offer_status(offers[name], shares[name], costs[name])
            outcomes[name] = Outcome(decision.replicas, status, _flowing(obs), decision, tuple(events[name]))
        total = None if any(c is None for c in costs.values()) else round(sum(costs.values()), 6)
        model_events = self._placement_events((meta["namespace"], meta["name"]), placement)
        return LeastCostOutcome(outcomes, placement, demand, total, model_events)

    def _samples(self, key: tuple[str, str, str]) -> list[Sample]:
        with self._lock:
            return list(self._history.get(key, []))

    def _wish(self, key: tuple[str, str, str], wish: Wish, keep_s: float) -> list[Wish]:
        """Record what the placement wants for a target (kept for `keep_s`); returns its recent wishes, newest
        last."""
        with self._lock:
            wishes = [w for w in self._wishes.get(key, []) if w.at > wish.at - keep_s] + [wish]
            self._wishes[key] = wishes
            return list(wishes)

    def _placement_events(self, key: tuple[str, str], placement: Placement) -> tuple[tuple[str, str, str], ...]:
        """One Warning when the placement newly spills (or spills from other classes), and one when the
        capacity newly runs short; nothing while the same state lasts."""
        spilled = tuple(s.hardware_class for s in placement.spills)
        short = placement.reason == INSUFFICIENT_CAPACITY
        with self._lock:
            before = self._warned_placement.get(key, ((), False))
            self._warned_placement[key] = (spilled, short)
        events = []
        if spilled and spilled != before[0]:
            events.append(("Warning", "SpilledOver", "; ".join(s.message for s in placement.spills)))
        if short and not before[1]:
            events.append(("Warning", INSUFFICIENT_CAPACITY, placement.message))
        return tuple(events)


def _demand(obs: Observation) -> float:
    """A target's request rate to place: the larger of the rate window's and the recent window's. A step
    shows in the recent window within seconds, where the 30 s one would take half a minute to rise to
    it; a drop shows at once too, but fewer replicas wait for the scale-down window anyway."""
    return max(obs.request_rate, obs.recent_request_rate or 0.0)


def _idle(obs: Observation) -> bool:
    return obs.request_rate < IDLE_RATE or obs.latency_ms is None


def _flowing(obs: Observation | None) -> tuple[bool, str, str]:
    if obs is None:  # a member no pod of which serves: nothing to read, nothing missing
        return (True, "NotServing", "no ready replica: no metrics to read")
    return (True, "MetricsFlowing", f"latency from {obs.latency_source}")


def _slo_status(
    previous: dict, decision: Decision, now: float, last_scale: float | None, obs: Observation | None
) -> dict:
    """A target's slo status (TargetSLOStatus): the figures observed (none for a target no pod of which
    serves) and the decision, which keeps the time it was first reached while it repeats."""
    same = (previous.get("lastDecision"), previous.get("desiredReplicas")) == (decision.reason, decision.replicas)
    status = {}
    if obs is not None:
        idle = _idle(obs)
        status |= {
            "observedMilliseconds": round(0.0 if idle else obs.latency_ms, 3),
            "latencySource": "idle" if idle else obs.latency_source,
            "requestRate": round(obs.request_rate, 3),
        }
    status |= {
        "desiredReplicas": decision.replicas,
        "lastDecision": decision.reason,
        "lastDecisionMessage": decision.message[:1024],
        # When this decision was first reached: an unchanged decision leaves status unchanged.
        "lastDecisionTime": previous["lastDecisionTime"]
        if same and previous.get("lastDecisionTime")
        else _format_time(now),
    }
    if obs is not None and obs.queue_ms is not None:
        status["queueMilliseconds"] = round(obs.queue_ms, 3)
    if last_scale is not None:
        status["lastScaleTime"] = _format_time(last_scale)
    return status


def _costs(offers: Mapping[str, Offer], replicas: Mapping[str, int]) -> dict[str, float | None]:
    """Per class, what its decided replicas cost an hour; None without a price."""
    return {
        name: None if o.replica_price is None else round(o.replica_price * replicas[name], 6)
        for name, o in offers.items()
    }


def _shares(offers: Mapping[str, Offer], replicas: Mapping[str, int]) -> dict[str, float]:
    """Per class, its share of the model's load: its decided replicas over the model's, as the Service spreads
    requests evenly over ready pods (replicas its pool cannot run count none)."""
    serving = {name: min(replicas[name], o.offer.fits) for name, o in offers.items()}
    total = sum(serving.values())
    return {name: round(n / total, 4) if total else 0.0 for name, n in serving.items()}


def _offer_status(offer: Offer, share: float, cost: float | None) -> dict:
    """The capacity, price, share and cost fields of a LeastCost target's slo status."""
    capacity, status = offer.capacity, {"loadShare": share}
    if capacity.per_replica is not None:
        status["capacityPerReplica"] = round(capacity.per_replica, 3)
        status["capacitySource"] = CapacitySource(capacity.source).value
    if capacity.measured_at_compile is not None:
        status["capacityMeasuredAtCompile"] = round(capacity.measured_at_compile, 3)
    if capacity.observed is not None:
        status["capacityObserved"] = round(capacity.observed, 3)
        if offer.observed_for is not None:
            status["capacityObservedFor"] = offer.observed_for
    if offer.replica_price is not None:
        status["replicaPricePerHour"] = round(offer.replica_price, 6)
    if cost is not None:
        status["costPerHour"] = cost
    return status
