"""Selection under timing noise, of the OCR recogniser's kind: the real benchmark on the real clock, then select.

The engines are SIMULATIONS: SimulatedServiceTime runners compute nothing and produce no outputs; each
run() sleeps for a service time drawn from a seeded distribution (numpy Generator). What is real is
everything after that: tensorkiln_compiler.benchmark.measure_all times them on this machine's clock in
interleaved rounds (warm-up, an untimed run before each block, the stopping rule judged), bootstraps
the intervals, and tensorkiln_compiler.selection.select decides. That is why this is an integration case
and not another synthetic-samples unit test (tests/unit/test_compiler_selection.py): sleep overshoot,
scheduler stalls and a loaded CI machine are in the figures, as they are on a shared 2-core compile node.

The case from the issue: a candidate whose p50 is clearly lower but whose p95 is noisier must not
replace the steady baseline on the strength of a point p95 that lies inside the noise; the reason
says "not significantly faster". And the rule must not block a real win.

Robustness on a loaded 2-core machine: there, a sleep now and then wakes late, by 0.1-2 ms mostly
but up to about 10 ms (seen here with two CPU burners running: several % of the runs of an engine).
So the service times are tens of milliseconds, and the gaps the assertions rely on are wider than
those stalls: a stall moves no run across them. The run counts are pinned (runs == max_runs), so the
seeded draws land on the same timed runs every time. The margins are given where they are used.
No cluster needed.
"""

import time
from collections.abc import Callable

import numpy as np
import pytest
from tensorkiln_api import Objective
from tensorkiln_api.registry.manifest import Benchmark, Candidate, Selection
from tensorkiln_compiler.benchmark import BenchmarkPlan, measure_all
from tensorkiln_compiler.candidates import Runner
from tensorkiln_compiler.selection import select

RUNS = 80  # timed runs per engine, pinned: runs == max_runs, so the stopping rule is judged but ends nothing
PLAN = BenchmarkPlan(warmup=3, runs=RUNS, max_runs=RUNS, min_runs=5, block=10, windows=3, tolerance=0.10, time_cap_s=30)
OBJECTIVE = Objective(batch_size=1)  # LatencyP95

BASELINE_MS = 30.0  # the steady baseline
FASTER_MS = 15.0  # the faster candidates' median service time
TAIL_PROBABILITY = 0.03
# With this seed, 3 of the noisy candidate's 80 timed runs fall in its tail (the draws include the
# warm-up and untimed runs, in measure_all's order). Three is what makes the case: fewer than 5% of
# the runs, so its point p95 stays in the body (about 17.5 ms; a stall of 8 ms makes 26, still below
# the baseline's 30); but a bootstrap resample that draws 5 or more of them (19% of the 2000
# resamples) has its p95 in the tail, so the interval's upper end is in the tail (45 ms and more),
# over the baseline's interval (30 ms, 40 if a tenth of its runs stalled by 10 ms).
NOISY_SEED = 0


def steady(median_ms: float) -> Callable[[np.random.Generator], float]:
    """A simulated service time with tiny jitter."""
    return lambda rng: median_ms + rng.normal(0.0, 0.05)


def faster_but_noisier(rng: np.random.Generator) -> float:
    """A simulated service time: about FASTER_MS with some spread, and now and then
    (TAIL_PROBABILITY) a heavy-tailed stall of 30 ms and more on top, Pareto-distributed."""
    body = FASTER_MS * rng.lognormal(0.0, 0.08)
    if rng.random() < TAIL_PROBABILITY:
        return body + 30.0 + 15.0 * rng.pareto(2.0)
    return body


class SimulatedServiceTime(Runner):
    """A SIMULATION of a loaded engine: run() computes nothing and returns no outputs; it sleeps for a
    service time drawn from `draw` with its own seeded Generator, so the benchmark has something
    to time on the real clock."""

    def __init__(self, draw: Callable[[np.random.Generator], float], seed: int):
        self.draw, self.rng = draw, np.random.default_rng(seed)

    def run(self, feeds):
        time.sleep(max(0.0, self.draw(self.rng)) / 1000.0)
        return []  # a simulation has no outputs


def candidate(id: str, bench: Benchmark, baseline: bool = False) -> Candidate:
    """A passed candidate of the simulated compiler, with the benchmark measure_all recorded for it."""
    return Candidate(
        id=id,
        compiler="SimulatedServiceTime",
        precision="FP32",
        baseline=baseline,
        status="Passed",
        settings={"simulation": True},
        benchmarks=[bench],
    )


def benchmark_and_select(runners: dict[str, Runner], baseline: str) -> tuple[dict[str, Benchmark], Selection]:
    benches, failures = measure_all(runners, {}, OBJECTIVE.batch_size, PLAN, threads=1)
    assert not failures
    assert all(b.runs == RUNS and b.p95_interval_ms for b in benches.values())  # pinned counts, intervals measured
    selection = select([candidate(id, b, baseline=id == baseline) for id, b in benches.items()], OBJECTIVE)
    return benches, selection


def describe(id: str, b: Benchmark) -> str:
    (p50_low, p50_high), (p95_low, p95_high) = b.p50_interval_ms, b.p95_interval_ms
    return (
        f"{id}: p50 {b.p50_ms:.2f} ms [{p50_low:.2f}, {p50_high:.2f}], "
        f"p95 {b.p95_ms:.2f} ms [{p95_low:.2f}, {p95_high:.2f}], {b.runs} runs, stable={b.stable}"
    )


def width(interval: tuple[float, float]) -> float:
    return interval[1] - interval[0]


def test_a_faster_candidate_whose_p95_is_noisier_does_not_replace_the_steady_baseline(measured):
    started = time.perf_counter()
    runners = {
        "simulated-baseline": SimulatedServiceTime(steady(BASELINE_MS), seed=1),
        "simulated-faster-noisier": SimulatedServiceTime(faster_but_noisier, seed=NOISY_SEED),
    }
    benches, selection = benchmark_and_select(runners, baseline="simulated-baseline")
    base, noisy = benches["simulated-baseline"], benches["simulated-faster-noisier"]
    measured("selection under noise, faster but noisier candidate:")
    for id, b in benches.items():
        measured(f"  {describe(id, b)}")
    measured(f"  winner {selection.winner}: {selection.reason} ({time.perf_counter() - started:.1f} s)")

    # The "faster" part holds as measured: its p50 is clearly lower (15 ms against 30, by design).
    assert noisy.p50_ms < 0.75 * base.p50_ms
    # Its p95 is the noisier one: the interval spans body to tail (about 17 to 45+ ms); the baseline's
    # is a fraction of a millisecond wide, up to the size of a stall (~8 ms) if stalls hit several runs.
    assert width(noisy.p95_interval_ms) > width(base.p95_interval_ms)
    # The intervals overlap: nothing says the candidate's p95 is better beyond the noise ...
    assert noisy.p95_interval_ms[1] >= base.p95_interval_ms[0]
    # ... although its point p95 is lower, so by the point figure alone it would have won.
    assert noisy.p95_ms < base.p95_ms
    assert selection.winner == "simulated-baseline"
    assert selection.speedup_vs_baseline == 1.0
    assert (
        "simulated-faster-noisier (p95 " in selection.reason
        and "but not significantly faster than the simpler simulated-baseline" in selection.reason
    ), selection.reason
    # select's wording for a kept baseline (here the simulated one: nothing is published by this test)
    assert "no candidate significantly beat the baseline, so the unmodified ONNX is published" in selection.reason


def test_a_candidate_faster_beyond_the_overlap_replaces_the_baseline(measured):
    """The rule does not block a real win: a steady candidate at half the baseline's service time."""
    started = time.perf_counter()
    runners = {
        "simulated-baseline": SimulatedServiceTime(steady(BASELINE_MS), seed=1),
        "simulated-faster-steady": SimulatedServiceTime(steady(FASTER_MS), seed=2),
    }
    benches, selection = benchmark_and_select(runners, baseline="simulated-baseline")
    base, fast = benches["simulated-baseline"], benches["simulated-faster-steady"]
    measured("selection under noise, candidate faster beyond the overlap:")
    for id, b in benches.items():
        measured(f"  {describe(id, b)}")
    measured(
        f"  winner {selection.winner}: {selection.reason}; speedup {selection.speedup_vs_baseline:.2f} "
        f"({time.perf_counter() - started:.1f} s)"
    )

    # Beyond the overlap: the candidate's p95 interval ends some 15 ms below the baseline's start
    # (ends below 24 ms even if a few % of its runs stall by 8 ms; the baseline's starts at 30 or more).
    assert fast.p95_interval_ms[1] < base.p95_interval_ms[0]
    assert selection.winner == "simulated-faster-steady"
    assert selection.reason.startswith("lowest p95 at batch 1: simulated-faster-steady p95 "), selection.reason
    assert "not significantly" not in selection.reason and "no candidate significantly" not in selection.reason
    # The speedup is the measured p50 ratio, about 30/15 (sleep overshoot shaves a little off it).
    assert selection.speedup_vs_baseline == pytest.approx(base.p50_ms / fast.p50_ms)
    assert 1.8 < selection.speedup_vs_baseline < 2.1
