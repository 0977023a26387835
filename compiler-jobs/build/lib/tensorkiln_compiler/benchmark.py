"""Benchmark step: latency percentiles and throughput of one loaded engine on this node.

Candidates are timed in interleaved rounds (short blocks, each after an untimed run), so load from
other pods on the node biases none of them. An engine is timed until its figures settle, in the
manner of Triton Model Navigator's stability rule: at least `runs` timings, and the medians of its
last `windows` blocks within ±`tolerance` of their mean. It stops at `max_runs` unsettled, or when
the time budget is spent (a compile node may have 2 cores: a slow candidate must not eat the Job's
deadline); the counts actually run, and whether they settled, are recorded.

`runs` defaults to 60 because both objectives judge a p95 (LatencyP95 minimises it, Throughput holds it
within the budget): of 20 timings the p95 is the slowest one or two, an interval too wide to tell
candidates apart, so selection kept the simpler engine for want of evidence. 60 put 3 timings beyond it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np
from tensorkiln_api.registry.manifest import Benchmark

from .candidates import Runner
from .data import Arrays


@dataclass(frozen=True)
class BenchmarkPlan:
    warmup: int = 3
    runs: int = 60  # timings per engine at least (unless the time budget ends it after min_runs): module docstring
    time_cap_s: float = 30.0  # per candidate and batch size, once min_runs rounds are done
    min_runs: int = 5
    block: int = 5  # timed runs of one engine per round: one stability window
    max_runs: int = 100  # an engine not settled by then is recorded as unstable
    windows: int = 3  # the last blocks whose medians must agree
    tolerance: float = 0.10  # ... within this fraction of their mean


def settled(times: list[float], plan: BenchmarkPlan) -> bool:
    """The medians of the last `plan.windows` blocks of `times` lie within ±`plan.tolerance` of
    their mean (pure)."""
    if len(times) < plan.windows * plan.block:
        return False
    ends = [len(times) - i * plan.block for i in range(plan.windows)]
    medians = [float(np.median(times[end - plan.block : end])) for end in ends]
    mean = sum(medians) / len(medians)
    return all(abs(m - mean) <= plan.tolerance * mean for m in medians)


def _finished(times: list[float], plan: BenchmarkPlan) -> bool:
    return len(times) >= max(plan.max_runs, plan.runs) or (len(times) >= plan.runs and settled(times, plan))


def measure_all(
    runners: dict[str, Runner], feeds: Arrays, batch_size: int, plan: BenchmarkPlan, threads: int
) -> tuple[dict[str, Benchmark], dict[str, Exception]]:
    """Round-robin in blocks: each round times every engine `block` times, so load from a noisy
    neighbour lands on all of them alike.

    Returns the benchmarks, and the error of each engine that failed (it leaves the rotation).
    """
    failures: dict[str, Exception] = {}
    times: dict[str, list[float]] = {}
    for id, runner in runners.items():
        try:
            for _ in range(plan.warmup):
                runner.run(feeds)
            times[id] = []
        except Exception as e:
            failures[id] = e
    deadline = time.perf_counter() + plan.time_cap_s * max(1, len(times))
    limit = max(plan.max_runs, plan.runs)
    while times and not all(_finished(t, plan) for t in times.values()):
        if min(len(t) for t in times.values()) >= plan.min_runs and time.perf_counter() > deadline:
            break
        for id in [id for id, t in times.items() if not _finished(t, plan)]:
            try:
                _block(runners[id], feeds, times[id], min(plan.block, limit - len(times[id])))
            except Exception as e:
                failures[id] = e
                del times[id]
    return {id: _summary(t, batch_size, plan, threads) for id, t in times.items()}, failures


def _block(runner: Runner, feeds: Arrays, times: list[float], count: int) -> None:
    # One untimed run first: the previous engine's worker threads may still be spinning.
    runner.run(feeds)
    for _ in range(count):
        start = time.perf_counter()
        runner.run(feeds)
        times.append(time.perf_counter() - start)


def measure_concurrent(runners: list[Runner], feeds: Arrays, batch_size: int, seconds: float) -> float:
    """Inferences per second of `runners` run at once, each from its own thread for about `seconds` after
    one untimed run: what that many model instances serve together on this node (the runtimes release the
    GIL while they compute). Each thread finishes the run in progress when the time is up."""
    for runner in runners:
        runner.run(feeds)
    start = threading.Barrier(len(runners))
    spans: list[tuple[float, float, int]] = []
    errors: list[Exception] = []

    def loop(runner: Runner) -> None:
        start.wait()
        began = now = time.perf_counter()
        count = 0
        try:
            while count == 0 or now - began < seconds:
                runner.run(feeds)
                count, now = count + 1, time.perf_counter()
        except Exception as e:
            errors.append(e)
        spans.append((began, now, count))

    threads = [threading.Thread(target=loop, args=(runner,), daemon=True) for runner in runners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    elapsed = max(end for _, end, _ in spans) - min(began for began, _, _ in spans)
    return batch_size * sum(count for _, _, count in spans) / elapsed


BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95


def intervals(times_ms: np.ndarray, batch_size: int, seed: int = 0) -> dict[str, tuple[float, float]]:
    """Percentile-bootstrap 95% confidence intervals of p50, p95, p99 (ms) and throughput (/s):
    the timings resampled with replacement, each figure recomputed per resample (pure; seeded,
    so a manifest is reproducible from its timings)."""
    rng = np.random.default_rng(seed)
    resampled = rng.choice(times_ms, size=(BOOTSTRAP_RESAMPLES, len(times_ms)), replace=True)
    tails = [(1 - CONFIDENCE) / 2 * 100, (1 + CONFIDENCE) / 2 * 100]
    figures = {
        "p50_interval_ms": np.percentile(resampled, 50, axis=1),
        "p95_interval_ms": np.percentile(resampled, 95, axis=1),
        "p99_interval_ms": np.percentile(resampled, 99, axis=1),
        "throughput_interval_per_s": batch_size * 1000.0 / resampled.mean(axis=1),
    }
    return {name: tuple(float(v) for v in np.percentile(values, tails)) for name, values in figures.items()}


def _summary(times: list[float], batch_size: int, plan: BenchmarkPlan, threads: int) -> Benchmark:
    times_ms = np.array(times) * 1000.0
    p50, p95, p99 = np.percentile(times_ms, [50, 95, 99])
    return Benchmark(
        batch_size=batch_size,
        p50_ms=float(p50),
        p95_ms=float(p95),
        p99_ms=float(p99),
        throughput_per_s=batch_size * len(times) / sum(times),
        threads=threads,
        warmup_runs=plan.warmup,
        runs=len(times),
        stable=settled(times, plan),
        **intervals(times_ms, batch_size),
    )
