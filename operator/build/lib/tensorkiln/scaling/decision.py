"""The SLO scaling decision: observations and recent history in, desired replicas out (pure).

Scale up when the observed percentile is over target, sized by how far over it is (the HPA
ratio rule on latency: ceil(replicas * observed / target)), bounded by a step factor (2x) and
maxReplicas, so a 4x load step is met in one or two decisions. Scale down one replica at a
time, and only when every observation of the stabilisation window says the latency would stay
under target with one replica fewer, with headroom:
- from Triton's busy time, the projected latency with one replica fewer: the service time plus
  a queueing term that grows like rho/(1 - rho) (M/M/1), its factor calibrated on the
  observation itself. The service time floors the latency, so latency alone says nothing of
  how much load one replica fewer would carry;
- and, once learned, per-replica capacity: the request rate a replica carried while latency was
  at 50-100% of target.
Missing metrics never move replicas.

Under spec.slo.placement LeastCost the replicas of each class follow the least-cost placement
(scaling.placement) instead (`follow_placement`): up at once (after the scale-up window; the
placement goes by the request rate, so no cooldown for a latency reading to catch up), down one
replica at a time once the whole scale-down window wanted fewer (`scale_down_window`, which
`decide` uses too).
"""

import math
import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Policy:
    target_ms: float
    percentile: str
    min_replicas: int
    max_replicas: int
    scale_up_stabilization_s: float = 0.0
    scale_down_stabilization_s: float = 300.0
    headroom: float = 0.7  # scale down only if the projected latency is under 70% of target
    max_step_factor: float = 2.0  # at most 2x the replicas in one decision: saturated latency overshoots
    cooldown_s: float = 20.0  # after a scale-up, new pods need time to become ready and be measured
    instances: int = 1  # model instances per replica: what busy time is shared by


@dataclass(frozen=True)
class Sample:
    """One observation of a target: when, how slow, at how many ready replicas."""

    at: float
    latency_ms: float
    replicas: int
    rate: float = 0.0  # requests per second the target served
    busy: float | None = None  # model-instance seconds per second spent executing, all pods
    service_ms: float | None = None  # execution time a request spends, queueing excluded
    recent_rate: float | None = None  # the rate over the recent window: a step shows there first

    @property
    def rising(self) -> float:
        """How much above the rate window's load the recent window's is (1 when not): busy time is over
        the rate window, and half a minute after a step it holds half of the step."""
        return max(self.recent_rate / self.rate, 1.0) if self.recent_rate and self.rate else 1.0


@dataclass(frozen=True)
class Decision:
    replicas: int
    reason: str  # CamelCase, used as the Event and condition reason
    message: str
    slo_met: bool | None  # None: unknown (no metrics)


@dataclass(frozen=True)
class Wish:
    """What the least-cost placement wanted for a target at one evaluation."""

    at: float
    replicas: int
    # What the placement wants at the demand over the scale-down headroom (Policy.headroom): a class
    # goes down only below both, so the demand must fall by the headroom's margin before a replica
    # goes (as under decide), and a demand at a capacity boundary does not flap; None: as `replicas`.
    # Conservative where that placement mixes in another class (a full cheap pool): it is kept.
    keeps: int | None = None

    @property
    def floor(self) -> int:
        """Replicas a scale-down may go to: the more of the two placements."""
        return self.replicas if self.keeps is None else max(self.replicas, self.keeps)


def _over_window(samples: list, now: float, window: float) -> list:
    return [s for s in samples if s.at >= now - window]


def _cooling(policy: Policy, last_scale_at: float | None, now: float) -> bool:
    return last_scale_at is not None and now - last_scale_at < policy.cooldown_s


def scale_down_window(records: list, policy: Policy, last_scale_at: float | None, now: float) -> list | None:
    """The records (Samples or Wishes, oldest first) of the scale-down stabilisation window when a
    scale-down may be weighed at all: out of the cooldown, no action within the window, and the
    window observed from its start (a restart, or a target just started, waits a whole window);
    None otherwise."""
    window_s = policy.scale_down_stabilization_s
    if _cooling(policy, last_scale_at, now) or (last_scale_at is not None and now - last_scale_at < window_s):
        return None
    window = _over_window(records, now, window_s)
    return window if window and _observed_throughout(records, now - window_s) else None


def _observed_throughout(records: list, start: float) -> bool:
    """The records (oldest first) cover the time since `start` without a gap: one is at or before it, and from that
    one on none follows the one before by more than 3 times the usual (median) spacing of them all (a missed
    evaluation or two passes), so neither a restart's empty memory nor an outage of the metrics passes for a
    window of wishes. (Asking for a record within 5 s of the start instead missed it for good when
    evaluations ran a little over the period apart: six 10.05 s apart span 60.3 s, so a 60 s window always
    began about 10 s before its first record.)"""
    times = [r.at for r in records]
    first = sum(1 for t in times if t <= start) - 1  # the last record at or before the start
    if first < 0 or len(times) < 2:
        return False
    spacing = statistics.median(b - a for a, b in zip(times, times[1:]))
    return all(b - a <= 3 * spacing for a, b in zip(times[first:], times[first + 1 :]))


def capacity_per_replica(samples: list[Sample], target_ms: float) -> float | None:
    """Requests/s one replica carried while latency was near (50-100% of) target; None if never seen."""
    loaded = [s.rate / s.replicas for s in samples if s.replicas and 0.5 * target_ms <= s.latency_ms <= target_ms]
    return max(loaded) if loaded else None


SUMMARY_MEMORY_S = 60.0  # Triton's latency summaries keep about a minute of observations
DEFAULT_QUEUEING_FACTOR = 3.0  # p95 of an exponential wait is ~3x its mean


def _utilisation(sample: Sample, replicas: int, instances: int) -> float:
    return sample.busy / (replicas * instances)


STEADY_RATE = 0.25  # a steady load: every rate within the summary's memory within this fraction of the last


def steady(samples: list[Sample], sample: Sample) -> bool:
    """Whether the load had been steady for Triton's summary memory up to `sample`: the samples of that
    minute (half of it at least is observed) have its replica count and a rate within STEADY_RATE of its
    own. Triton's p95 is over that minute, so after a change of load (a step the replicas have not caught
    up with yet) it still holds the queueing of the change, and a queueing factor learned from it would
    make a replica look a fraction of what it is."""
    window = [s for s in samples if sample.at - SUMMARY_MEMORY_S <= s.at <= sample.at]
    if not window or window[0].at > sample.at - SUMMARY_MEMORY_S / 2:
        return False
    return all(s.replicas == sample.replicas and abs(s.rate - sample.rate) <= STEADY_RATE * sample.rate for s in window)


def queueing_factor(samples: list[Sample], last_scale_at: float | None, instances: int = 1) -> float:
    """How p95 latency grows with utilisation on this target: p95 = service * (1 + f * u / (1 - u)),
    f learned from the newest settled observation: one after a minute of steady load (`steady`), and
    not within a minute after a scale action. The summary still mixes in the latency from before
    either: learned from a step's queue, the factor would ask for several times the replicas needed."""
    for sample in reversed(samples):
        if last_scale_at is not None and last_scale_at <= sample.at < last_scale_at + SUMMARY_MEMORY_S:
            continue
        if sample.busy is None or not sample.service_ms or not steady(samples, sample):
            continue
        u, wait = _utilisation(sample, sample.replicas, instances), sample.latency_ms - sample.service_ms
        if 0.2 <= u < 0.9 and wait > 0:  # steady queueing; near saturation latency is not steady
            return min(max(wait / (sample.service_ms * u / (1 - u)), 1.0), 10.0)
    return DEFAULT_QUEUEING_FACTOR


def projected_latency_ms(sample: Sample, replicas: int, factor: float, instances: int = 1) -> float | None:
    """p95 latency at the sample's load (the recent window's, where higher) on `replicas` replicas; None
    without busy or service time."""
    if sample.busy is None or not sample.service_ms or replicas < 1:
        return None
    u = _utilisation(sample, replicas, instances) * sample.rising
    return math.inf if u >= 1 else sample.service_ms * (1 + factor * u / (1 - u))


def utilisation_at_target(service_ms: float, factor: float, target_ms: float) -> float:
    """The utilisation at which the projected latency (projected_latency_ms) reaches `target_ms`: its
    inverse, service * (1 + f * u / (1 - u)) = target; 0 when the service time alone misses it."""
    if target_ms <= service_ms:
        return 0.0
    x = (target_ms / service_ms - 1) / factor
    return x / (1 + x)


def _fits_one_fewer(sample: Sample, current: int, capacity: float | None, factor: float, policy: Policy) -> bool:
    fits = capacity is None or sample.rate / (current - 1) < capacity * policy.headroom
    projected = projected_latency_ms(sample, current - 1, factor, policy.instances)
    if projected is None:  # no busy time: assume latency grows with load per replica, conservatively
        projected = sample.latency_ms * sample.replicas / (current - 1)
    return fits and projected < policy.target_ms * policy.headroom


def decide(
    samples: list[Sample],
    current: int,
    ready: int,
    policy: Policy,
    last_scale_at: float | None,
    now: float,
) -> Decision:
    """Desired replicas for a target. `samples` are this target's recent observations, newest last."""
    low, high = policy.min_replicas, max(policy.max_replicas, policy.min_replicas)
    if out := _out_of_bounds(current, low, high, None):
        return out
    if not samples or samples[-1].at < now - 60:
        return Decision(current, "NoMetrics", "no recent latency observation: holding replicas", None)
    latest = samples[-1]
    met = latest.latency_ms <= policy.target_ms
    cooling = _cooling(policy, last_scale_at, now)
    if not met:
        window = _over_window(samples, now, policy.scale_up_stabilization_s) or [latest]
        if any(s.latency_ms <= policy.target_ms for s in window):
            return Decision(current, "StabilizingUp", "over target, within the scale-up stabilization window", False)
        if cooling or ready < current:
            return Decision(current, "WaitingForReplicas", f"{ready}/{current} ready; measuring before acting", False)
        # Triton's summary remembers a minute, so after a scale-up it still shows the saturated
        # past and overstates the need; busy time is fresh. Within that minute, hold while the
        # replicas there are projected to meet the target, else take the fewest replicas projected
        # to meet it, if fewer than the latency ratio asks for. Outside it the summary is the
        # present (a queue building now), and the ratio stands: the first readings of a step hold
        # only part of it in the rate and busy time, which would size the step short.
        factor = queueing_factor(samples, last_scale_at, policy.instances)
        now_projected = projected_latency_ms(latest, current, factor, policy.instances)
        settling = last_scale_at is not None and now - last_scale_at < SUMMARY_MEMORY_S
        if settling and now_projected is not None and now_projected <= policy.target_ms:
            return Decision(
                current, "WaitingForSummary",
                f"{policy.percentile} {latest.latency_ms:.1f} ms > {policy.target_ms:g} ms target is Triton's minute"
                f" from before the last scale action; busy time projects {now_projected:.0f} ms on {current}: holding",
                False,
            )  # fmt: skip
        wanted = math.ceil(current * latest.latency_ms / policy.target_ms)
        wanted = min(max(wanted, current + 1), math.ceil(current * policy.max_step_factor))
        if settling:
            for replicas in range(current + 1, wanted):
                projected = projected_latency_ms(latest, replicas, factor, policy.instances)
                if projected is not None and projected <= policy.target_ms:
                    wanted = replicas
                    break
        if wanted > high:
            return Decision(
                high, "MaxReplicasReached",
                f"{policy.percentile} {latest.latency_ms:.1f} ms > {policy.target_ms:g} ms target"
                f" needs {wanted} replicas; max is {high}: {current} -> {high}",
                False,
            )  # fmt: skip
        return Decision(
            wanted,
            "ScaledUp",
            f"{policy.percentile} {latest.latency_ms:.1f} ms > {policy.target_ms:g} ms target: {current} -> {wanted}",
            False,
        )
    if current > low and (window := scale_down_window(samples, policy, last_scale_at, now)):
        capacity = capacity_per_replica(samples, policy.target_ms)
        factor = queueing_factor(samples, last_scale_at, policy.instances)
        if all(_fits_one_fewer(s, current, capacity, factor, policy) for s in window):
            return Decision(
                current - 1, "ScaledDown",
                f"for {policy.scale_down_stabilization_s:g}s the load fit in {current - 1} replicas with "
                f"{1 - policy.headroom:.0%} headroom: {current} -> {current - 1}",
                True,
            )  # fmt: skip
    return Decision(
        current, "SLOMet", f"{policy.percentile} {latest.latency_ms:.1f} ms <= {policy.target_ms:g} ms target", True
    )


def _out_of_bounds(current: int, low: int, high: int, slo_met: bool | None) -> Decision | None:
    """Replicas outside the bounds (a spec edit) go to the nearest bound at once."""
    if low <= current <= high:
        return None
    bounded = min(max(current, low), high)
    return Decision(
        bounded, "OutOfBounds", f"{_replicas(current)} is outside [{low}, {high}]: {current} -> {bounded}", slo_met
    )


def _replicas(n: int) -> str:
    return "1 replica" if n == 1 else f"{n} replicas"


def follow_placement(
    wishes: list[Wish],
    current: int,
    bounds: tuple[int, int],
    policy: Policy,
    last_scale_at: float | None,
    now: float,
    slo_met: bool | None,
) -> Decision:
    """A target's replicas under LeastCost: toward what the placement wants now (`wishes[-1]`; `wishes`
    are this target's recent ones, oldest first), with `decide`'s rules. Up at once to what it wants,
    once the scale-up window wanted more throughout, without `decide`'s cooldown or wait for new pods:
    those let a latency reading catch up with the replicas, and the placement goes by the request rate,
    which new pods do not change (so a step met by 2 -> 3 takes the 4th as soon as the rate asks, not a
    pod start later); down one replica at a time once the scale-down window (scale_down_window) wanted
    fewer throughout, and never while the target's latency is over target.
    `bounds`: min and max replicas (min may be 0: a class the placement leaves unused); `slo_met`: the
    target's own latency against the target (None: not observed), which the decision carries."""
    low, high = bounds
    if out := _out_of_bounds(current, low, high, slo_met):
        return out
    wanted = wishes[-1].replicas
    if wanted > current:
        window = _over_window(wishes, now, policy.scale_up_stabilization_s) or wishes[-1:]
        if any(w.replicas <= current for w in window):
            return Decision(current, "StabilizingUp", f"the placement wants {wanted}, within the scale-up "
                            "stabilization window", slo_met)  # fmt: skip
        return Decision(wanted, "ScaledUp", f"the least-cost placement wants {wanted}: {current} -> {wanted}", slo_met)
    floor = wishes[-1].floor
    if floor < current and slo_met is False:
        # The placement's capacity figures say fewer would do, the latency says not (a compile figure not
        # yet corrected by an observed one, as after a restart): no scale-down while over target.
        return Decision(
            current, "HeldOverTarget",
            f"the placement wants {wanted}, but {policy.percentile} is over the {policy.target_ms:g} ms target: "
            f"{current} kept",
            slo_met,
        )  # fmt: skip
    if floor < current:
        window = scale_down_window(wishes, policy, last_scale_at, now)
        if window and all(w.floor <= current - 1 for w in window):
            return Decision(
                current - 1, "ScaledDown",
                f"for {policy.scale_down_stabilization_s:g}s the least-cost placement wanted at most "
                f"{max(w.floor for w in window)}{_with_headroom(policy)}: {current} -> {current - 1}",
                slo_met,
            )  # fmt: skip
        return Decision(
            current, "StabilizingDown",
            f"the placement wants {floor}{_with_headroom(policy)}; {current} kept until the scale-down "
            f"stabilization window ({policy.scale_down_stabilization_s:g}s) wants fewer throughout",
            slo_met,
        )  # fmt: skip
    replicas = _replicas(current)
    if wanted < current:
        return Decision(
            current, "Placed",
            f"{replicas} kept: the placement wants {wanted}, but {current}{_with_headroom(policy)}",
            slo_met,
        )  # fmt: skip
    return Decision(current, "Placed", f"{replicas}, as the least-cost placement wants", slo_met)


def _with_headroom(policy: Policy) -> str:
    return f" with the {1 - policy.headroom:.0%} headroom a scale-down leaves"
