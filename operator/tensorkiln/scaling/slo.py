"""The SLO scaler's decisions (pure): from what was observed of a target (its reading from Prometheus,
what the scaler remembers of it, its last slo status), its replicas, slo status and Events, and what
to remember.

spec.slo.placement PerClass (`decide_target`): each target is decided alone, on its own latency
(scaling.decision.decide). LeastCost (`decide_placement`): the model's targets are decided together: the
demand (the request rate of every target) is placed on the classes at the least cost per hour
(scaling.placement, from each class's offer: scaling.offers), and each target follows its share of the
placement under the same stabilisation rules (scaling.decision.follow_placement).

A target or model is read at most once a period (scaling.scaler): in between, its last outcome is
repeated, without its Events, which were posted already.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from tensorkiln_api.registry.manifest import EngineManifest

from tensorkiln.builders.tritonconfig import instance_count
from tensorkiln.hardware.classes import HardwareClass
from tensorkiln.scaling.decision import Decision, Policy, Sample, Wish, decide, follow_placement
from tensorkiln.scaling.memory import ModelMemory, TargetMemory
from tensorkiln.scaling.metrics import Observation, Unread
from tensorkiln.scaling.offers import Offer, Pool, class_offer
from tensorkiln.scaling.placement import INSUFFICIENT_CAPACITY, Placement, place
from tensorkiln.scaling.target_status import offer_status, parse_time, target_slo_status

HISTORY_SECONDS = 900
# A LeastCost model keeps the replicas it runs while they meet the demand at most this much above the least
# cost (scaling.placement.place): near-equal placements would otherwise take turns as capacity figures move.
KEEP_WITHIN = 0.10

Reading = Observation | Unread


class Rollout(Protocol):
    """A target's replicas as observed (status.serving.Rollout is one)."""

    replicas: int
    ready_replicas: int


Event = tuple[str, str, str]  # (type, reason, message)


@dataclass(frozen=True)
class Outcome:
    replicas: int
    slo_status: dict  # TargetSLOStatus
    metrics: tuple[bool, str, str]  # SLOMetricsAvailable: status, reason, message
    decision: Decision | None
    events: tuple[Event, ...] = ()  # an action, reaching the maximum


@dataclass(frozen=True)
class Member:
    """One target of a LeastCost model, as observed: one with a Deployment, or about to get one (its
    rollout then at minReplicas, none ready)."""

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
    events: tuple[Event, ...] = ()  # model-wide: a spill-over, capacity running short


@dataclass(frozen=True)
class TargetSignals:
    """What the scaler observed of one target: its last outcome while its period runs, else its reading."""

    at: float  # the scaler's clock when observed
    memory: TargetMemory
    reading: Reading | None = None
    recent: Outcome | None = None


@dataclass(frozen=True)
class PlacementSignals:
    """What the scaler observed of a LeastCost model's members: their last outcome while the period runs,
    else a reading of each serving member (one scaled to 0, or whose pods are starting, has none)."""

    at: float
    memories: Mapping[str, TargetMemory]  # by class, every member's
    memory: ModelMemory
    readings: Mapping[str, Reading] = field(default_factory=dict)  # by class
    recent: LeastCostOutcome | None = None


@dataclass(frozen=True)
class TargetVerdict:
    outcome: Outcome
    at: float
    memory: TargetMemory | None  # what the scaler remembers from now on; None: a recent outcome repeated


@dataclass(frozen=True)
class PlacementVerdict:
    outcome: LeastCostOutcome
    at: float
    memories: Mapping[str, TargetMemory]  # by class; empty: a recent outcome repeated
    memory: ModelMemory | None


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


def decide_target(
    spec: dict,
    target: HardwareClass,
    rollout: Rollout,
    previous: dict,
    manifest: EngineManifest | None,
    signals: TargetSignals,
) -> TargetVerdict:
    """A PerClass target's replicas under spec.slo; `previous`: its last slo status, `manifest`: that of the
    engine it is to serve (None: not read)."""
    at, reading = signals.at, signals.reading
    if signals.recent is not None:
        return TargetVerdict(_repeated(signals.recent, rollout), at, None)
    if isinstance(reading, Unread):
        return TargetVerdict(Outcome(rollout.replicas, previous, reading.metrics, None), at, signals.memory)
    memory = signals.memory.with_sample(_sample(reading, rollout, at), _kept_for(spec))
    last_scale = _last_scale_at(memory, previous)
    decision = decide(
        list(memory.samples),
        rollout.replicas,
        rollout.ready_replicas,
        policy_of(spec, target, manifest),
        last_scale,
        at,
    )
    events, memory, acted = _act(memory, decision, rollout, at)
    status = target_slo_status(previous, decision, at, acted or last_scale, reading)
    return TargetVerdict(Outcome(decision.replicas, status, _flowing(reading), decision, events), at, memory)


def decide_placement(spec: dict, members: tuple[Member, ...], signals: PlacementSignals) -> PlacementVerdict:
    """Replicas for every member of a LeastCost model (`spec` validated)."""
    by_name = {m.target.name: m for m in members}
    at = signals.at
    if signals.recent is not None:
        outcomes = {name: _repeated(o, by_name[name].rollout) for name, o in signals.recent.outcomes.items()}
        return PlacementVerdict(replace(signals.recent, outcomes=outcomes, events=()), at, {}, None)
    slo, keep_s, memories = spec["slo"], _kept_for(spec), dict(signals.memories)
    readings = {name: r for name, r in signals.readings.items() if isinstance(r, Observation)}
    unread = {name: r for name, r in signals.readings.items() if isinstance(r, Unread)}
    for name, obs in readings.items():
        memories[name] = memories[name].with_sample(_sample(obs, by_name[name].rollout, at), keep_s)
    if unread:  # a serving target without figures: the demand is not known, and no target moves
        metrics = {name: unread[name].metrics if name in unread else _flowing(readings.get(name)) for name in by_name}
        outcomes = {name: Outcome(m.rollout.replicas, m.previous, metrics[name], None) for name, m in by_name.items()}
        return PlacementVerdict(LeastCostOutcome(outcomes, None, None, None), at, memories, signals.memory)
    last_scale = {name: _last_scale_at(memories[name], m.previous) for name, m in by_name.items()}
    offers = {
        name: class_offer(
            m.target, spec, m.engine, m.manifest, list(memories[name].samples), last_scale[name], m.previous, m.pool
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
        memory = memories[name].with_wish(Wish(at, placement.replicas[name], keeps[name]), keep_s)
        obs = readings.get(name)
        met = None if obs is None else obs.idle or obs.latency_ms <= slo["targetMilliseconds"]
        decisions[name] = follow_placement(
            list(memory.wishes), m.rollout.replicas, (slo["minReplicas"], slo["maxReplicas"]),
            policy_of(spec, m.target, m.manifest), last_scale[name], at, met,
        )  # fmt: skip
        events[name], memories[name], acted[name] = _act(memory, decisions[name], m.rollout, at)
    replicas = {name: d.replicas for name, d in decisions.items()}
    costs, shares = _costs(offers, replicas), _shares(offers, replicas)
    outcomes = {}
    for name, m in by_name.items():
        obs, decision = readings.get(name), decisions[name]
        status = target_slo_status(m.previous, decision, at, acted[name] or last_scale[name], obs)
        status |= offer_status(offers[name], shares[name], costs[name])
        outcomes[name] = Outcome(decision.replicas, status, _flowing(obs), decision, events[name])
    total = None if any(c is None for c in costs.values()) else round(sum(costs.values()), 6)
    model_events, model_memory = _placement_events(signals.memory, placement)
    return PlacementVerdict(
        LeastCostOutcome(outcomes, placement, demand, total, model_events), at, memories, model_memory
    )


def _kept_for(spec: dict) -> float:
    """How far back a target's records (samples, wishes) are kept: HISTORY_SECONDS, or its scale-down window
    and a minute where that is longer (the API allows 3600 s): a window longer than its records is never
    observed from its start, and would never scale down."""
    return max(HISTORY_SECONDS, spec["slo"]["scaleDownStabilizationSeconds"] + 60)


def _repeated(outcome: Outcome, rollout: Rollout) -> Outcome:
    """A recent outcome again: its decided replicas (a held one: the replicas as they are now), no Events."""
    return replace(outcome, replicas=outcome.replicas if outcome.decision else rollout.replicas, events=())


def _sample(obs: Observation, rollout: Rollout, at: float) -> Sample:
    latency = 0.0 if obs.idle else obs.latency_ms
    return Sample(
        at, latency, max(rollout.ready_replicas, 1), obs.request_rate, obs.busy, obs.service_ms, obs.recent_request_rate
    )


def _last_scale_at(memory: TargetMemory, previous: dict) -> float | None:
    # The status this reconcile read may predate this process's last action (a reconcile since
    # wrote a newer one): the later time counts, so no action is repeated within the cooldown.
    times = (parse_time(previous.get("lastScaleTime")), memory.last_scale)
    return max((t for t in times if t is not None), default=None)


def _act(
    memory: TargetMemory, decision: Decision, rollout: Rollout, at: float
) -> tuple[tuple[Event, ...], TargetMemory, float | None]:
    """The Events of a decision (a scale action; the maximum newly reached with the SLO missed), the memory
    after it, and the time of the action when it is one."""
    events, acted, warned = [], None, memory.warned_max
    if decision.replicas != rollout.replicas:
        acted = at
        action = "ScaledUp" if decision.replicas > rollout.replicas else "ScaledDown"
        events.append(("Normal", action, decision.message))
        warned = False
    if decision.reason == "MaxReplicasReached" and not warned:
        events.append(("Warning", decision.reason, decision.message))
        warned = True  # once per stay at the maximum
    elif decision.slo_met:
        warned = False
    last_scale = acted if acted is not None else memory.last_scale
    return tuple(events), replace(memory, last_scale=last_scale, warned_max=warned), acted


def _placement_events(memory: ModelMemory, placement: Placement) -> tuple[tuple[Event, ...], ModelMemory]:
    """One Warning when the placement newly spills (or spills from other classes), and one when the
    capacity newly runs short; nothing while the same state lasts."""
    spilled = tuple(s.hardware_class for s in placement.spills)
    short = placement.reason == INSUFFICIENT_CAPACITY
    events = []
    if spilled and spilled != memory.spilled:
        events.append(("Warning", "SpilledOver", "; ".join(s.message for s in placement.spills)))
    if short and not memory.short:
        events.append(("Warning", INSUFFICIENT_CAPACITY, placement.message))
    return tuple(events), ModelMemory(spilled, short)


def _demand(obs: Observation) -> float:
    """A target's request rate to place: the larger of the rate window's and the recent window's. A step
    shows in the recent window within seconds, where the 30 s one would take half a minute to rise to
    it; a drop shows at once too, but fewer replicas wait for the scale-down window anyway."""
    return max(obs.request_rate, obs.recent_request_rate or 0.0)


def _flowing(obs: Observation | None) -> tuple[bool, str, str]:
    if obs is None:  # a member no pod of which serves: nothing to read, nothing missing
        return (True, "NotServing", "no ready replica: no metrics to read")
    return (True, "MetricsFlowing", f"latency from {obs.latency_source}")


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
