"""The SLO scaling decision: observations and recent history in, desired replicas out (pure).

Scale up when the observed percentile is over target, sized by how far over it is (the HPA
ratio rule on latency: ceil(replicas * observed / target)), bounded by a step factor (2x) and
maxReplicas, so a 4x load step is met in one or two decisions. Scale down one replica at a
time, and only when every observation of the stabilisation window says the load would fit in
one replica fewer with headroom: per-replica capacity is learned from observations taken near
the target (the request rate a replica carried at 50-100% of the latency target). Missing
metrics never move replicas.
"""

import math
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


@dataclass(frozen=True)
class Sample:
    """One observation of a target: when, how slow, at how many ready replicas."""

    at: float
    latency_ms: float
    replicas: int
    rate: float = 0.0  # requests per second the target served


@dataclass(frozen=True)
class Decision:
    replicas: int
    reason: str  # CamelCase, used as the Event and condition reason
    message: str
    slo_met: bool | None  # None: unknown (no metrics)


def _over_window(samples: list[Sample], now: float, window: float) -> list[Sample]:
    return [s for s in samples if s.at >= now - window]


def capacity_per_replica(samples: list[Sample], target_ms: float) -> float | None:
    """Requests/s one replica carried while latency was near (50-100% of) target; None if never seen."""
    loaded = [s.rate / s.replicas for s in samples if s.replicas and 0.5 * target_ms <= s.latency_ms <= target_ms]
    return max(loaded) if loaded else None


def _fits_one_fewer(sample: Sample, current: int, capacity: float | None, policy: Policy) -> bool:
    if capacity is not None:
        return sample.rate / (current - 1) < capacity * policy.headroom
    # No capacity learned yet: assume latency grows with load per replica, conservatively.
    return sample.latency_ms * sample.replicas / (current - 1) < policy.target_ms * policy.headroom


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
    if current < low or current > high:
        bounded = min(max(current, low), high)
        return Decision(bounded, "OutOfBounds", f"{current} replicas is outside [{low}, {high}]", None)
    if not samples or samples[-1].at < now - 60:
        return Decision(current, "NoMetrics", "no recent latency observation: holding replicas", None)
    latest = samples[-1]
    met = latest.latency_ms <= policy.target_ms
    cooling = last_scale_at is not None and now - last_scale_at < policy.cooldown_s
    if not met:
        window = _over_window(samples, now, policy.scale_up_stabilization_s) or [latest]
        if any(s.latency_ms <= policy.target_ms for s in window):
            return Decision(current, "StabilizingUp", "over target, within the scale-up stabilization window", False)
        if cooling or ready < current:
            return Decision(current, "WaitingForReplicas", f"{ready}/{current} ready; measuring before acting", False)
        wanted = math.ceil(current * latest.latency_ms / policy.target_ms)
        wanted = min(max(wanted, current + 1), math.ceil(current * policy.max_step_factor))
        if wanted > high:
            return Decision(
                high, "MaxReplicasReached",
                f"{policy.percentile} {latest.latency_ms:.1f} ms > {policy.target_ms:g} ms target"
                f" needs {wanted} replicas; max is {high}",
                False,
            )  # fmt: skip
        return Decision(
            wanted,
            "ScaledUp",
            f"{policy.percentile} {latest.latency_ms:.1f} ms > {policy.target_ms:g} ms target: {current} -> {wanted}",
            False,
        )
    if (
        current > low
        and not cooling
        and (last_scale_at is None or now - last_scale_at >= policy.scale_down_stabilization_s)
    ):
        window = _over_window(samples, now, policy.scale_down_stabilization_s)
        covers = window and window[0].at <= now - policy.scale_down_stabilization_s + 5  # the window is observed
        capacity = capacity_per_replica(samples, policy.target_ms)
        if covers and all(_fits_one_fewer(s, current, capacity, policy) for s in window):
            return Decision(
                current - 1, "ScaledDown",
                f"for {policy.scale_down_stabilization_s:g}s the load fit in {current - 1} replicas with "
                f"{1 - policy.headroom:.0%} headroom: {current} -> {current - 1}",
                True,
            )  # fmt: skip
    return Decision(
        current, "SLOMet", f"{policy.percentile} {latest.latency_ms:.1f} ms <= {policy.target_ms:g} ms target", True
    )
