import time

import pytest
from tensorkiln_compiler.benchmark import BenchmarkPlan, measure_all
from tensorkiln_compiler.candidates import Runner


class Sleeper(Runner):
    def __init__(self, seconds: float, fail_on_call: int | None = None):
        self.seconds, self.fail_on_call, self.calls = seconds, fail_on_call, 0

    def run(self, feeds):
        self.calls += 1
        if self.calls == self.fail_on_call:
            raise RuntimeError("device lost")
        time.sleep(self.seconds)
        return []


def test_round_robin_figures_and_failures():
    runners = {"fast": Sleeper(0.001), "slow": Sleeper(0.004), "flaky": Sleeper(0.001, fail_on_call=4)}
    plan = BenchmarkPlan(warmup=2, runs=6, time_cap_s=10, block=4)
    results, failures = measure_all(runners, {}, 4, plan, threads=2)
    assert set(results) == {"fast", "slow"} and str(failures["flaky"]) == "device lost"
    fast, slow = results["fast"], results["slow"]
    assert (fast.runs, fast.warmup_runs, fast.threads, fast.batch_size) == (6, 2, 2, 4)
    assert runners["fast"].calls == runners["slow"].calls == 2 + (1 + 4) + (1 + 2)  # warm-up, two blocks
    assert fast.p50_ms < slow.p50_ms <= slow.p95_ms <= slow.p99_ms
    assert slow.throughput_per_s == pytest.approx(4 / 0.004, rel=0.5)  # inferences, not batches


def test_time_cap_stops_after_the_minimum_rounds():
    runners = {"a": Sleeper(0.002), "b": Sleeper(0.002)}
    results, _ = measure_all(
        runners, {}, 1, BenchmarkPlan(warmup=0, runs=1000, time_cap_s=0.0, min_runs=3, block=3), threads=1
    )
    assert results["a"].runs == results["b"].runs == 3
