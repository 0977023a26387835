import pytest
from tensorkiln.api import Objective
from tensorkiln.registry.manifest import Benchmark, Candidate
from tensorkiln_compiler.errors import CompileError
from tensorkiln_compiler.selection import select


def candidate(id: str, p50: float, p95: float, throughput: float, status="Passed", batch=8) -> Candidate:
    bench = Benchmark(batch_size=batch, p50_ms=p50, p95_ms=p95, p99_ms=p95, throughput_per_s=throughput,
                      threads=2, warmup_runs=3, runs=20)  # fmt: skip
    return Candidate(id=id, compiler="OpenVINO" if id.startswith("openvino") else "OnnxRuntime", precision="FP32",
                     baseline=id == "baseline", status=status, benchmarks=[bench])  # fmt: skip


CANDIDATES = [
    candidate("baseline", p50=40, p95=50, throughput=200),
    candidate("onnxruntime-fp32", p50=20, p95=30, throughput=400),
    candidate("openvino-int8", p50=10, p95=35, throughput=800),
    candidate("openvino-bf16", p50=5, p95=6, throughput=1600, status="RejectedAccuracy"),
]


def test_latency_p95_picks_lowest_p95_and_reports_p50_speedup():
    selection = select(CANDIDATES, Objective(batch_size=8))
    assert selection.winner == "onnxruntime-fp32"
    assert selection.speedup_vs_baseline == 2.0
    assert selection.reason == "lowest p95 at batch 8: 30.00 ms"
    assert selection.objective == {"metric": "LatencyP95", "batchSize": 8}


def test_throughput_within_budget():
    objective = Objective(metric="Throughput", batch_size=8, latency_budget_milliseconds=40)
    selection = select(CANDIDATES, objective)
    assert selection.winner == "openvino-int8" and selection.speedup_vs_baseline == 4.0
    tight = select(CANDIDATES, objective.model_copy(update={"latency_budget_milliseconds": 32}))
    assert tight.winner == "onnxruntime-fp32"


def test_no_candidate_within_budget_takes_lowest_p95_and_says_so():
    objective = Objective(metric="Throughput", batch_size=8, latency_budget_milliseconds=1)
    selection = select(CANDIDATES, objective)
    assert selection.winner == "onnxruntime-fp32" and selection.reason.startswith(
        "no candidate meets the 1 ms p95 budget"
    )


def test_baseline_wins_when_nothing_beats_it():
    selection = select(
        [CANDIDATES[0], candidate("onnxruntime-int8", p50=60, p95=70, throughput=100)], Objective(batch_size=8)
    )
    assert selection.winner == "baseline" and selection.speedup_vs_baseline == 1.0
    assert "no candidate beat the baseline, so the unmodified ONNX is published" in selection.reason


def test_nothing_passed():
    with pytest.raises(CompileError) as error:
        select([CANDIDATES[3]], Objective(batch_size=8))
    assert error.value.reason == "NoCandidatePassed"
