import numpy as np
import pytest
from tensorkiln_api import Objective
from tensorkiln_api.registry.manifest import Benchmark, Candidate
from tensorkiln_compiler.benchmark import intervals
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
    assert selection.reason == "lowest p95 at batch 8: onnxruntime-fp32 p95 30.00 ms"
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
    assert "no candidate significantly beat the baseline, so the unmodified ONNX is published" in selection.reason


def test_nothing_passed():
    with pytest.raises(CompileError) as error:
        select([CANDIDATES[3]], Objective(batch_size=8))
    assert error.value.reason == "NoCandidatePassed"


def measured(id: str, precision: str, times_ms: np.ndarray, baseline=False) -> Candidate:
    """A candidate timed `times_ms` at batch 1, its intervals bootstrapped as the benchmark does."""
    p50, p95, p99 = np.percentile(times_ms, [50, 95, 99])
    bench = Benchmark(batch_size=1, p50_ms=p50, p95_ms=p95, p99_ms=p99, throughput_per_s=1000 / times_ms.mean(),
                      threads=2, warmup_runs=3, runs=len(times_ms), **intervals(times_ms, 1))  # fmt: skip
    compiler = "OnnxRuntime" if id.startswith(("baseline", "onnxruntime")) else "OpenVINO"
    return Candidate(id=id, compiler=compiler, precision=precision, baseline=baseline, status="Passed",
                     benchmarks=[bench])  # fmt: skip


def test_intervals_bracket_the_figures_and_narrow_with_more_runs():
    rng = np.random.default_rng(1)
    few, many = rng.normal(10, 1, 20), rng.normal(10, 1, 400)
    for times in (few, many):
        found = intervals(times, 1)
        low, high = found["p95_interval_ms"]
        assert low <= np.percentile(times, 95) <= high
        assert found["throughput_interval_per_s"][0] < 1000 / times.mean() < found["throughput_interval_per_s"][1]
    width = {n: intervals(t, 1)["p50_interval_ms"] for n, t in (("few", few), ("many", many))}
    assert width["many"][1] - width["many"][0] < width["few"][1] - width["few"][0]


def test_a_faster_candidate_with_a_noisier_p95_does_not_replace_the_baseline():
    """The OCR recogniser's case: OpenVINO's p50 far lower, its p95 within the baseline's noise."""
    rng = np.random.default_rng(7)
    baseline = measured("baseline", "FP32", rng.normal(10.5, 0.3, 20), baseline=True)
    noisy = measured("openvino-fp32", "FP32", np.concatenate([rng.normal(7.1, 0.2, 17), [10.2, 10.6, 11.0]]))
    assert noisy.benchmarks[0].p95_ms < baseline.benchmarks[0].p95_ms  # by the point figure alone it would win
    selection = select([baseline, noisy], Objective(batch_size=1))
    assert selection.winner == "baseline"
    assert "openvino-fp32 (p95 " in selection.reason and "but not significantly faster than the simpler baseline" in (
        selection.reason
    )


def test_a_significantly_faster_candidate_replaces_the_baseline_and_int8_must_beat_fp32_to_win():
    rng = np.random.default_rng(3)
    baseline = measured("baseline", "FP32", rng.normal(10.0, 0.2, 20), baseline=True)
    fp32 = measured("openvino-fp32", "FP32", rng.normal(5.0, 0.2, 20))
    int8 = measured("openvino-int8", "INT8", rng.normal(4.9, 0.2, 20))  # within FP32's noise
    selection = select([baseline, fp32, int8], Objective(batch_size=1))
    assert selection.winner == "openvino-fp32"
    faster = measured("openvino-int8", "INT8", rng.normal(2.5, 0.1, 20))
    assert select([baseline, fp32, faster], Objective(batch_size=1)).winner == "openvino-int8"
