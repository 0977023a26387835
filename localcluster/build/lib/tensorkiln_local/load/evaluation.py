"""How a step-load run went, from its requests and replica timeline (pure): the figures the SLO
tests assert and e2e/bench_slo.py reports.

Latency is what clients saw: the percentile over requests that arrived in a sliding window,
a failed request counting as infinitely slow. Times are seconds since the load started.
"""

import math
from dataclasses import dataclass

import numpy as np

PERCENTILES = {"p50": 50, "p90": 90, "p95": 95, "p99": 99}


@dataclass(frozen=True)
class Point:
    """A target's replicas at one time."""

    at: float
    replicas: int  # asked for (spec.replicas)
    pods: int  # existing, ready or not (status.replicas): what capacity costs
    ready: int
    server_ms: float | None = None  # the latency Triton reported (as the scaler reads it), if sampled


def latency_series(
    requests, percentile: str, window_s: float, step_s: float, end_s: float
) -> list[tuple[float, float | None]]:
    """(t, client latency percentile in ms over arrivals in (t - window, t]) every step; None: no arrival."""
    arrivals = np.array([r.at for r in requests])
    latencies = np.array([r.latency_s * 1000 if r.ok else math.inf for r in requests])
    series = []
    for t in np.arange(window_s, end_s + 1e-9, step_s):
        inside = latencies[(arrivals > t - window_s) & (arrivals <= t)]
        value = float(np.percentile(inside, PERCENTILES[percentile], method="higher")) if len(inside) else None
        series.append((float(t), value))
    return series


def _violated(value: float | None, target_ms: float) -> bool:
    return value is not None and value > target_ms


def violation_seconds(series, target_ms: float, step_s: float, start_s: float = 0.0, end_s: float = math.inf) -> float:
    return step_s * sum(1 for t, v in series if start_s <= t < end_s and _violated(v, target_ms))


def restore_seconds(series, target_ms: float, start_s: float, end_s: float) -> float | None:
    """Seconds after `start_s` from which the SLO held until `end_s`; None if it was violated at the end."""
    inside = [(t, v) for t, v in series if start_s <= t < end_s]
    if not inside or _violated(inside[-1][1], target_ms):
        return None
    last_violation = max((t for t, v in inside if _violated(v, target_ms)), default=start_s)
    return last_violation - start_s


def replica_seconds(points: list[Point], start_s: float, end_s: float) -> float:
    """Pod-seconds that existed in [start, end): each sample holds until the next."""
    total = 0.0
    for point, following in zip(points, [*points[1:], None]):
        begin, finish = max(point.at, start_s), min(following.at if following else end_s, end_s)
        total += point.pods * max(finish - begin, 0.0)
    return total


def replica_changes(points: list[Point], start_s: float, end_s: float) -> list[int]:
    """The asked-for replica counts in [start, end), each change once, starting with the count at start."""
    counts = [p.replicas for p in points if start_s <= p.at < end_s]
    return [c for i, c in enumerate(counts) if i == 0 or c != counts[i - 1]]


def direction_changes(points: list[Point], start_s: float, end_s: float) -> int:
    """How often scaling turned around (up then down, or down then up) in [start, end)."""
    counts = replica_changes(points, start_s, end_s)
    steps = [b - a for a, b in zip(counts, counts[1:])]
    return sum(1 for a, b in zip(steps, steps[1:]) if (a > 0) != (b > 0))


@dataclass(frozen=True)
class PhaseReport:
    name: str
    start_s: float
    end_s: float
    rate: float
    violation_s: float
    restore_s: float | None  # None: still violated when the phase ended
    replica_s: float
    replicas: list[int]  # asked-for counts in the phase, each change once
    direction_changes: int


def server_series(points: list[Point], end_s: float) -> list[tuple[float, float | None]]:
    """(t, latency Triton reported) every second: the newest sample at or before t."""
    series, i, value = [], 0, None
    for t in range(1, int(end_s) + 1):
        while i < len(points) and points[i].at <= t:
            value, i = points[i].server_ms, i + 1
        series.append((float(t), value))
    return series


def report(
    phases,
    requests,
    points: list[Point],
    target_ms: float,
    percentile: str,
    window_s: float = 10.0,
    source: str = "client",
):
    """Per phase (Phase objects from serving.loadgen, run back to back from t=0) and the series it
    came from: the clients' latency ("client"), or what Triton reported ("server": the latency
    the SLO is defined on, without the clients' own time)."""
    end = sum(p.seconds for p in phases)
    if source == "server":
        series = server_series(points, end)
    else:
        series = latency_series(requests, percentile, window_s, 1.0, end)
    reports, start = [], 0.0
    for phase in phases:
        stop = start + phase.seconds
        reports.append(
            PhaseReport(
                name=phase.name,
                start_s=start,
                end_s=stop,
                rate=phase.rate,
                violation_s=violation_seconds(series, target_ms, 1.0, start, stop),
                restore_s=restore_seconds(series, target_ms, start, stop),
                replica_s=replica_seconds(points, start, stop),
                replicas=replica_changes(points, start, stop),
                direction_changes=direction_changes(points, start, stop),
            )
        )
        start = stop
    return reports, series
