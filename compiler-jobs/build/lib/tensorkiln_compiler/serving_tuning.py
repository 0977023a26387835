"""Serving settings tuned on the target, after selection (CompileJob spec.batcherTuning): the selected engine
is measured on this node at batch sizes up to serving.maxBatchSize and with a few instances running at once,
and batching.choose picks Triton's dynamic batcher and instance settings from those measurements.

The latency curve reuses the benchmark machinery and its stopping rule (benchmark.measure_all) at each
batch size selection has not measured already (objective.batchSize and shapes.batch.min are), with a
shorter time cap per size. Instances: the engine is opened again up to MAX_INSTANCES times and run from
as many threads at once, at batch 1 and at its most efficient batch size (the instance gain shrinks as
batches fill the device). The whole stage stops measuring at BUDGET_S (what it has by then is used) and
never fails the compile: without a choice, Triton is served with the fixed defaults.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

from tensorkiln_api import batching
from tensorkiln_api.registry.manifest import (
    Benchmark,
    Candidate,
    InstanceScaling,
    ServingTuning,
)

from .benchmark import BenchmarkPlan, measure_all, measure_concurrent
from .candidates import Build, BuildContext, Runner

log = logging.getLogger(__name__)

BUDGET_S = 60.0  # the whole stage, measurements only (the model takes well under a second)
SIZE_CAP_S = 5.0  # per batch size, once BenchmarkPlan.min_runs are done
PROBE_S = 1.0  # per instance count and batch size, and as long again for one instance alone beside it
MAX_INSTANCES = 4  # instance counts tried: 2 and 4, on a CPU class no more than its usable CPUs
MAX_PROBE_BYTES = 1 << 30  # the engine opened that many times must stay within this (memory of the pod)


def curve_sizes(low: int, high: int) -> list[int]:
    """`low`, the powers of 2 above it, and `high`: the batch sizes the latency curve is measured at."""
    sizes, size = {low, high}, 1
    while size < high:
        if size > low:
            sizes.add(size)
        size *= 2
    return sorted(sizes)


def instance_counts(ctx: BuildContext) -> list[int]:
    """The instance counts beyond one worth measuring: a CPU class's instances share its usable CPUs."""
    limit = MAX_INSTANCES if ctx.gpu_class else min(MAX_INSTANCES, ctx.threads)
    return [k for k in (2, 4) if k <= limit]


def tune(
    ctx: BuildContext,
    build: Build,
    record: Candidate,
    plan: BenchmarkPlan,
    clock: Callable[[], float] = time.perf_counter,
) -> ServingTuning | None:
    """The settings to serve the selected engine (`build`, measured as `record`) with, and the figures that chose
    them; None when the CompileJob asks for none, or the engine takes no batch of one (a request of one
    inference is what the model of the batcher serves)."""
    target = ctx.spec.batcher_tuning
    if target is None or not ctx.model.batched:
        return None
    if ctx.spec.shapes.batch.min > 1:
        log.info("batcher not tuned: the engine takes batches of %d and up", ctx.spec.shapes.batch.min)
        return None
    deadline = clock() + BUDGET_S
    runner = build.open()
    try:
        largest = min(target.max_batch_size, ctx.spec.shapes.batch.max)  # the engine's profile bounds both
        times = _service_times(ctx, runner, record, largest, plan, deadline, clock)
        scaling = _instance_scaling(ctx, build, runner, times, deadline, clock)
    finally:
        runner.close()
    tuning = batching.tuning_for(
        times, scaling, target.max_batch_size, target.slo_target_milliseconds, target.slo_percentile.value
    )
    log.info("batcher: %s", tuning.reason)
    return tuning


def _service_times(
    ctx: BuildContext,
    runner: Runner,
    record: Candidate,
    max_batch_size: int,
    plan: BenchmarkPlan,
    deadline: float,
    clock: Callable[[], float],
) -> list[Benchmark]:
    """The engine's benchmark at each of curve_sizes(1, max_batch_size): selection's where it measured one, the
    others measured now; the curve ends early at the deadline or at a batch size the engine fails to run."""
    known = {b.batch_size: b for b in record.benchmarks}
    short = replace(plan, time_cap_s=min(plan.time_cap_s, SIZE_CAP_S))
    times = []
    for size in curve_sizes(1, max_batch_size):
        if size in known:
            times.append(known[size])
            continue
        if clock() > deadline:
            log.info("batcher: latency curve cut at batch %d, the time budget is spent", size)
            break
        measured, errors = measure_all({record.id: runner}, ctx.dataset.batches(size)[0], size, short, ctx.threads)
        if errors:
            log.warning("batcher: latency curve cut at batch %d: %s", size, errors[record.id])
            break
        times.append(measured[record.id])
    return sorted(times, key=lambda t: t.batch_size)


def _instance_scaling(
    ctx: BuildContext,
    build: Build,
    runner: Runner,
    times: list[Benchmark],
    deadline: float,
    clock: Callable[[], float],
) -> list[InstanceScaling]:
    """The gain of each of instance_counts(ctx) instances run at once, at batch 1 and at the most efficient batch
    size measured; none when the engine opened that often would not fit MAX_PROBE_BYTES or time is up."""
    counts = instance_counts(ctx)
    size = sum(path.stat().st_size for path in build.files.values() if path.is_file())
    if not counts or size * counts[-1] > MAX_PROBE_BYTES:
        return []
    efficient = max(times, key=lambda t: t.batch_size / t.p50_ms).batch_size
    extra: list[Runner] = []
    scaling = []
    try:
        for count in counts:
            while len(extra) < count - 1:
                extra.append(build.open())
            for batch in sorted({1, efficient}):
                if clock() > deadline:
                    return scaling
                feeds = ctx.dataset.batches(batch)[0]
                alone = measure_concurrent([runner], feeds, batch, PROBE_S)
                together = measure_concurrent([runner, *extra[: count - 1]], feeds, batch, PROBE_S)
                scaling.append(InstanceScaling(instances=count, batch_size=batch, speedup=together / alone))
                log.info("batcher: %d instances serve %.2fx one at batch %d", count, together / alone, batch)
    except Exception as e:  # e.g. out of device memory: what was measured stands
        log.warning("batcher: measuring instances stopped: %s: %s", type(e).__name__, e)
    finally:
        for opened in extra:
            opened.close()
    return scaling
