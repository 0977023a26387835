import math

from tensorkiln_local.load.evaluation import (
    Point,
    direction_changes,
    latency_series,
    replica_changes,
    replica_seconds,
    restore_seconds,
    violation_seconds,
)
from tensorkiln_local.load.loadgen import Request


def _requests(latency_by_second: dict[int, float], per_second: int = 10, failed_at: int | None = None):
    return [
        Request(second + (i + 0.5) / per_second, latency_by_second[second] / 1000, second != failed_at, "p")
        for second in sorted(latency_by_second)
        for i in range(per_second)
    ]


def test_latency_series_is_the_percentile_over_the_window_and_failures_count_as_infinite():
    requests = _requests({0: 10, 1: 10, 2: 100, 3: 10}, failed_at=3)
    series = dict(latency_series(requests, "p95", window_s=1.0, step_s=1.0, end_s=4.0))
    assert series[1.0] == 10  # arrivals in (0, 1]
    assert series[3.0] == 100
    assert series[4.0] == math.inf


def test_violation_and_restore_times():
    series = [(t, 200.0 if 10 <= t < 25 else 50.0) for t in range(0, 60)]
    assert violation_seconds(series, 100, 1.0) == 15
    assert violation_seconds(series, 100, 1.0, start_s=20, end_s=60) == 5
    assert restore_seconds(series, 100, start_s=10, end_s=60) == 14  # last violation at 24
    assert restore_seconds(series, 100, start_s=30, end_s=60) == 0
    assert restore_seconds(series, 100, start_s=0, end_s=20) is None  # still violated at the end


def test_replica_seconds_hold_each_sample_until_the_next():
    points = [Point(0, 1, 1, 1), Point(10, 2, 2, 1), Point(20, 2, 1, 1)]
    assert replica_seconds(points, 0, 30) == 10 + 20 + 10
    assert replica_seconds(points, 5, 15) == 5 + 10


def test_direction_changes_count_turnarounds():
    counts = [1, 1, 2, 4, 4, 3, 2, 3]
    points = [Point(i, c, c, c) for i, c in enumerate(counts)]
    assert replica_changes(points, 0, 99) == [1, 2, 4, 3, 2, 3]
    assert direction_changes(points, 0, 99) == 2  # up then down, down then up
    assert direction_changes(points, 0, 5) == 0


def test_server_series_holds_the_newest_sample_each_second():
    from tensorkiln_local.load.evaluation import server_series

    points = [Point(0.5, 1, 1, 1, 80.0), Point(2.2, 1, 1, 1, 300.0), Point(2.9, 1, 1, 1, None)]
    assert server_series(points, 4) == [(1.0, 80.0), (2.0, 80.0), (3.0, None), (4.0, None)]
