"""Select step: pick the winner among the candidates that passed, by spec.objective (pure).

LatencyP95: lowest p95 at objective.batchSize. Throughput: highest throughput whose p95 stays
within latencyBudgetMilliseconds (none within it: the lowest p95, and the reason says so).

Measurements are noisy (a compile node may have 2 shared cores), so a candidate replaces the
baseline, or a simpler candidate, only when it is better beyond the overlap of the two 95%
confidence intervals (benchmark.intervals). Otherwise the incumbent is kept and the reason says
"not significantly faster". Simpler: the unmodified baseline first, then by precision (FP32,
then 16-bit, then INT8), and an engine's default runtime settings before its settings variants
(`<id>+<variant>`, the pipeline's tuning stage). A variant is compared with its default settings first,
both measured in the same rounds: it stays in the running only if it beats them beyond the overlap of
their intervals. Without intervals (older manifests, simulations) the point figures decide.
"""

from __future__ import annotations

from tensorkiln_api import Objective, OptimizationMetric
from tensorkiln_api.registry.manifest import Benchmark, Candidate, Selection

from .errors import CompileError

SIMPLICITY = {"FP32": 0, "FP16": 1, "BF16": 1, "INT8": 2}


VARIANT_SEPARATOR = "+"  # candidates.VARIANT_SEPARATOR (this module stays free of the runtimes)


def _defaults_of(candidate: Candidate) -> str:
    """The id of the candidate whose runtime settings `candidate` varies; its own id when it varies none."""
    return candidate.id.split(VARIANT_SEPARATOR, 1)[0]


def _simplicity(candidate: Candidate) -> tuple[int, int, int]:
    variant = 1 if _defaults_of(candidate) != candidate.id else 0
    return (0 if candidate.baseline else 1, SIMPLICITY[candidate.precision], variant)


def _pool(passed: list[Candidate], objective: Objective) -> tuple[list[Candidate], OptimizationMetric, str]:
    """The candidates the objective lets compete at objective.batchSize, the metric they compete by, and why."""
    size, metric = objective.batch_size, objective.metric
    if metric == OptimizationMetric.LATENCY_P95:
        return passed, metric, f"lowest p95 at batch {size}"
    budget = objective.latency_budget_milliseconds
    pool = [c for c in passed if _at(c, size).p95_ms <= budget]
    if not pool:  # nothing meets the budget: the lowest p95 is the best there is
        why = f"no candidate meets the {budget:g} ms p95 budget at batch {size}; lowest p95"
        return passed, OptimizationMetric.LATENCY_P95, why
    return pool, metric, f"highest throughput at batch {size} within the {budget:g} ms p95 budget"


def _at(candidate: Candidate, size: int) -> Benchmark:
    return next(b for b in candidate.benchmarks if b.batch_size == size)


def best_per_compiler(candidates: list[Candidate], objective: Objective) -> list[Candidate]:
    """The best passed candidate of each compiler by the objective's point figure, the baseline aside
    (it stays the unmodified ONNX with default options): the ones the tuning stage varies (pure)."""
    passed = [c for c in candidates if c.status == "Passed" and not c.baseline]
    if not passed:
        return []
    pool, metric, _ = _pool(passed, objective)
    best: dict[str, Candidate] = {}
    for candidate in sorted(pool, key=lambda c: -_score(_at(c, objective.batch_size), metric)):
        best.setdefault(candidate.compiler, candidate)
    return list(best.values())


def _interval(bench: Benchmark, metric: OptimizationMetric) -> tuple[float, float]:
    if metric == OptimizationMetric.LATENCY_P95:
        return bench.p95_interval_ms or (bench.p95_ms, bench.p95_ms)
    return bench.throughput_interval_per_s or (bench.throughput_per_s, bench.throughput_per_s)


def _describe(bench: Benchmark, metric: OptimizationMetric) -> str:
    """The figure the objective compares, with its interval where measured."""
    if metric == OptimizationMetric.LATENCY_P95:
        interval = bench.p95_interval_ms
        return f"p95 {bench.p95_ms:.2f} ms" + (f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else "")
    interval = bench.throughput_interval_per_s
    return f"{bench.throughput_per_s:.1f}/s" + (f" [{interval[0]:.1f}, {interval[1]:.1f}]" if interval else "")


def select(candidates: list[Candidate], objective: Objective) -> Selection:
    passed = [c for c in candidates if c.status == "Passed"]
    if not passed:
        raise CompileError(
            "NoCandidatePassed", "no candidate, not even the baseline, passed validation and benchmarking"
        )
    size = objective.batch_size

    def at(candidate: Candidate) -> Benchmark:
        return _at(candidate, size)

    pool, metric, why = _pool(passed, objective)

    def better(a: Candidate, b: Candidate) -> bool:
        """`a` beats `b` beyond the overlap of their intervals."""
        (a_low, a_high), (b_low, b_high) = _interval(at(a), metric), _interval(at(b), metric)
        return a_high < b_low if metric == OptimizationMetric.LATENCY_P95 else a_low > b_high

    best = max(pool, key=lambda c: _score(at(c), metric))
    # A settings variant competes only if it significantly beats its own default settings.
    by_id = {c.id: c for c in pool}
    pool = [c for c in pool if (d := by_id.get(_defaults_of(c), c)) is c or better(c, d)]

    # From the simplest up (the best first within one level): a candidate takes over only from
    # the one it significantly beats.
    ordered = sorted(pool, key=lambda c: (_simplicity(c), -_score(at(c), metric)))
    winner = ordered[0]
    for challenger in ordered[1:]:
        if better(challenger, winner):
            winner = challenger
    if best is winner:
        reason = f"{why}: {winner.id} {_describe(at(winner), metric)}"
    else:
        reason = (
            f"{why}: {best.id} ({_describe(at(best), metric)}) but not significantly faster than the simpler "
            f"{winner.id} ({_describe(at(winner), metric)}), which is kept"
        )
    if winner.baseline:
        reason += "; no candidate significantly beat the baseline, so the unmodified ONNX is published"
    baseline = next((c for c in passed if c.baseline), None)
    return Selection(
        objective=objective.model_dump(by_alias=True, mode="json", exclude_none=True),
        winner=winner.id,
        reason=reason,
        speedup_vs_baseline=at(baseline).p50_ms / at(winner).p50_ms if baseline else None,
    )


def _score(bench: Benchmark, metric: OptimizationMetric) -> float:
    """Higher is better."""
    return -bench.p95_ms if metric == OptimizationMetric.LATENCY_P95 else bench.throughput_per_s
