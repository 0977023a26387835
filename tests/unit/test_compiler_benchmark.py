import pytest
from tensorkiln_compiler.benchmark import BenchmarkPlan, measure_all, settled
from tensorkiln_compiler.candidates import Runner

from .compiler_support import FakeClock, Sleeper


def test_round_robin_figures_and_failures(monkeypatch):
    clock = FakeClock(monkeypatch)
    runners = {
        "fast": Sleeper(clock, 0.001),
        "slow": Sleeper(clock, 0.004),
        "flaky": Sleeper(clock, 0.001, fail_on_call=4),
    }
    plan = BenchmarkPlan(warmup=2, runs=6, time_cap_s=10, block=4, max_runs=6)
    results, failures = measure_all(runners, {}, 4, plan, threads=2)
    assert set(results) == {"fast", "slow"} and str(failures["flaky"]) == "device lost"
    fast, slow = results["fast"], results["slow"]
    assert (fast.runs, fast.warmup_runs, fast.threads, fast.batch_size) == (6, 2, 2, 4)
    assert runners["fast"].calls == runners["slow"].calls == 2 + (1 + 4) + (1 + 2)  # warm-up, two blocks
    assert fast.p50_ms < slow.p50_ms <= slow.p95_ms <= slow.p99_ms
    assert slow.throughput_per_s == pytest.approx(4 / 0.004, rel=0.1)  # inferences, not batches


def test_time_cap_stops_after_the_minimum_rounds(monkeypatch):
    clock = FakeClock(monkeypatch)
    runners = {"a": Sleeper(clock, 0.002), "b": Sleeper(clock, 0.002)}
    results, _ = measure_all(
        runners, {}, 1, BenchmarkPlan(warmup=0, runs=1000, time_cap_s=0.0, min_runs=3, block=3), threads=1
    )
    assert results["a"].runs == results["b"].runs == 3


class Scripted(Runner):
    """Takes the given seconds per call, in turn (warm-up and untimed runs included), on a fake
    clock: the timings are exactly these, whatever the machine's load."""

    def __init__(self, seconds, monkeypatch):
        self.seconds, self.clock = iter(seconds), FakeClock(monkeypatch)

    def run(self, feeds):
        self.clock.now += next(self.seconds)
        return []


def test_settled_means_the_last_windows_medians_agree_within_the_tolerance():
    plan = BenchmarkPlan(block=3, windows=3, tolerance=0.10)
    assert settled([1.0] * 9, plan)
    assert not settled([1.0] * 8, plan)  # fewer than three windows
    assert not settled([2.0] * 3 + [1.0] * 6, plan)  # the oldest window is off by more than 10%
    assert settled([2.0] * 3 + [1.0] * 9, plan)  # ... and left the last three
    assert settled([1.0, 5.0, 1.0] * 3, plan)  # a window's outlier does not move its median


def test_an_engine_is_timed_until_it_settles_and_recorded_as_such(monkeypatch):
    plan = BenchmarkPlan(warmup=0, runs=6, block=3, windows=2, tolerance=0.2, max_runs=30, time_cap_s=60)
    # After an untimed run, each block: noisy at first (a neighbour), then steady.
    noisy = [1.0] + [8.0] * 3 + ([1.0] + [2.0] * 3) * 10
    results, _ = measure_all({"a": Scripted(noisy, monkeypatch)}, {}, 1, plan, threads=1)
    assert results["a"].stable and results["a"].runs == 9  # the first window differed: one more was needed


def test_an_engine_that_never_settles_stops_at_max_runs_marked_unstable(monkeypatch):
    plan = BenchmarkPlan(warmup=0, runs=3, block=3, windows=2, tolerance=0.1, max_runs=9, time_cap_s=600)
    seconds = ([1.0] + [1.0] * 3 + [1.0] + [4.0] * 3) * 3
    results, _ = measure_all({"a": Scripted(seconds, monkeypatch)}, {}, 1, plan, threads=1)
    assert results["a"].runs == 9 and results["a"].stable is False


def test_by_default_an_engine_is_timed_until_three_runs_lie_beyond_its_p95(monkeypatch):
    steady = [1.0] * 200  # settled after three blocks; the old default of 20 would have ended it there
    plan = BenchmarkPlan(warmup=0, time_cap_s=600)  # a second a run on the fake clock: within the time budget
    results, _ = measure_all({"a": Scripted(steady, monkeypatch)}, {}, 1, plan, threads=1)
    assert results["a"].runs == 60 and results["a"].runs * (1 - 0.95) >= 3 and results["a"].stable
