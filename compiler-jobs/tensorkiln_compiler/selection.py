"""Select step: pick the winner among the candidates that passed, by spec.objective (pure).

LatencyP95: lowest p95 at objective.batchSize. Throughput: highest throughput whose p95 stays
within latencyBudgetMilliseconds (none within it: the lowest p95, and the reason says so).
The baseline competes like any candidate; when it wins, the reason says nothing beat it.
"""

from __future__ import annotations

from tensorkiln.api import Objective, OptimizationMetric
from tensorkiln.registry.manifest import Benchmark, Candidate, Selection

from .errors import CompileError


def select(candidates: list[Candidate], objective: Objective) -> Selection:
    passed = [c for c in candidates if c.status == "Passed"]
    if not passed:
        raise CompileError(
            "NoCandidatePassed", "no candidate, not even the baseline, passed validation and benchmarking"
        )
    size = objective.batch_size

    def at(candidate: Candidate) -> Benchmark:
        return next(b for b in candidate.benchmarks if b.batch_size == size)

    fastest = min(passed, key=lambda c: at(c).p95_ms)
    if objective.metric == OptimizationMetric.LATENCY_P95:
        winner, reason = fastest, f"lowest p95 at batch {size}: {at(fastest).p95_ms:.2f} ms"
    else:
        budget = objective.latency_budget_milliseconds
        within = [c for c in passed if at(c).p95_ms <= budget]
        if within:
            winner = max(within, key=lambda c: at(c).throughput_per_s)
            reason = (
                f"highest throughput at batch {size} within the {budget:g} ms p95 budget: "
                f"{at(winner).throughput_per_s:.1f}/s at p95 {at(winner).p95_ms:.2f} ms"
            )
        else:
            winner = fastest
            reason = (
                f"no candidate meets the {budget:g} ms p95 budget at batch {size};"
                f" lowest p95: {at(fastest).p95_ms:.2f} ms"
            )
    baseline = next((c for c in passed if c.baseline), None)
    if winner.baseline:
        reason += "; no candidate beat the baseline, so the unmodified ONNX is published"
    return Selection(
        objective=objective.model_dump(by_alias=True, mode="json", exclude_none=True),
        winner=winner.id,
        reason=reason,
        speedup_vs_baseline=at(baseline).p50_ms / at(winner).p50_ms if baseline else None,
    )
