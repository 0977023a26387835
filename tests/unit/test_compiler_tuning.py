"""Runtime settings as candidates: each compiler's variants, the tuning stage, selection among default
settings and variants, and the selected settings in Triton's config."""

from types import SimpleNamespace

import numpy as np
import pytest
from tensorkiln.builders.tritonconfig import config_dict, openvino_parameters, parse, render
from tensorkiln_api import CompileJobSpec, Compiler, Objective, Precision
from tensorkiln_api.registry.manifest import Benchmark, Candidate
from tensorkiln_compiler import pipeline
from tensorkiln_compiler.benchmark import BenchmarkPlan
from tensorkiln_compiler.candidates import Build, Skipped, openvino
from tensorkiln_compiler.candidates.openvino import stream_counts
from tensorkiln_compiler.selection import best_per_compiler, select

from .compiler_support import FakeClock, Sleeper, compile_spec, conv_classifier, serve_registry
from .test_compiler_selection import measured
from .test_serving_builders import manifest as serving_manifest
from .test_serving_builders import serving_spec_with


@pytest.mark.parametrize(
    ("auto", "default", "threads", "expected"),
    [
        (2, 1, 2, [2]),  # a 2-CPU compile pod: LATENCY runs 1 stream, THROUGHPUT 2
        (8, 1, 16, [2, 8]),  # what THROUGHPUT picks, and 2 beside it: two variants at most
        (1, 1, 1, []),  # one CPU: THROUGHPUT picks the default's single stream, nothing to vary
        (2, 2, 4, []),  # never the default's own stream count
    ],
)
def test_openvino_stream_counts(auto, default, threads, expected):
    assert stream_counts(auto, default, threads) == expected


# --- the tuning stage, with runners that take fixed times on a fake clock -------------------------------


def fake_build(clock, compiler, precision, seconds, variant="", variants=None, settings=None, baseline=False) -> Build:
    return Build(compiler, precision, files={}, settings=settings or {}, open=lambda: Sleeper(clock, seconds),
                 baseline=baseline, variant=variant, variants=variants)  # fmt: skip


def fake_validate(rejected=()):
    """The pipeline's _Validator's contract: (record, build, runner), the runner open only if it passed."""

    def validate(make, compiler, precision, baseline, variant=""):
        build = make()
        record = Candidate(id=build.id, compiler=compiler.value, precision=precision.value, baseline=baseline,
                           status="Passed", settings=build.settings)  # fmt: skip
        if build.id in rejected:
            return record.model_copy(update={"status": "RejectedAccuracy", "reason": "cosine 0.5"}), None, None
        return record, build, build.open()

    return validate


def fake_context(objective: Objective):
    return SimpleNamespace(
        spec=SimpleNamespace(objective=objective, shapes=SimpleNamespace(batch=SimpleNamespace(min=1))),
        model=SimpleNamespace(batched=True),
        dataset=SimpleNamespace(batches=lambda size: [{}]),
        threads=2,
        steps=[],
        record=lambda step: None,
    )


def test_the_tuning_stage_varies_each_compilers_best_benchmarks_them_with_it_and_selection_takes_a_clear_win(
    monkeypatch,
):
    clock = FakeClock(monkeypatch)
    ORT, OV, FP32, INT8 = Compiler.ONNX_RUNTIME, Compiler.OPENVINO, Precision.FP32, Precision.INT8

    def never():
        raise AssertionError("only the best candidate of each compiler is varied")

    ort_variants = lambda: [  # noqa: E731
        fake_build(clock, ORT, FP32, 0.004, "1thread", settings={"intraOpNumThreads": 1}),  # as fast: not worth it
        fake_build(clock, ORT, FP32, 0.001, "extended"),  # faster, but fails the accuracy gate
    ]
    ov_variants = lambda: [fake_build(clock, OV, FP32, 0.001, "throughput-2streams")]  # noqa: E731
    builds = {
        b.id: b
        for b in [
            fake_build(clock, ORT, FP32, 0.015, baseline=True, variants=never),
            fake_build(clock, ORT, FP32, 0.004, variants=ort_variants),
            fake_build(clock, ORT, INT8, 0.012, variants=never),
            fake_build(clock, OV, FP32, 0.008, variants=ov_variants),
        ]
    }
    objective = Objective(batch_size=1)
    ctx = fake_context(objective)
    plan = BenchmarkPlan(warmup=0, runs=15, block=5, max_runs=15, time_cap_s=10)
    runners = {id: build.open() for id, build in builds.items()}
    records = [Candidate(id=id, compiler=b.compiler.value, precision=b.precision.value, baseline=b.baseline,
                         status="Passed") for id, b in builds.items()]  # fmt: skip
    first = pipeline._measured(records, *pipeline._benchmark(ctx, runners, plan))
    engines = list(builds)

    done = pipeline._tune(ctx, fake_validate({"onnxruntime-fp32+extended"}), first, builds, runners, plan)

    ids = [c.id for c in done]
    assert ids == engines + ["onnxruntime-fp32+1thread", "onnxruntime-fp32+extended", "openvino-fp32+throughput-2streams"]  # fmt: skip
    by_id = {c.id: c for c in done}
    assert by_id["onnxruntime-fp32+extended"].status == "RejectedAccuracy" and not by_id["onnxruntime-fp32+extended"].benchmarks  # fmt: skip
    assert by_id["onnxruntime-fp32+1thread"].settings == {"intraOpNumThreads": 1}
    for id in ("onnxruntime-fp32", "openvino-fp32"):  # re-measured with their variants
        assert by_id[id].benchmarks != next(c for c in first if c.id == id).benchmarks
    for id in ("baseline", "onnxruntime-int8"):  # not in the tuning round: the first round's figures
        assert by_id[id].benchmarks == next(c for c in first if c.id == id).benchmarks
    opened = {"onnxruntime-fp32+1thread", "openvino-fp32+throughput-2streams"}  # for the caller to close
    assert set(runners) == set(builds) == set(engines) | opened

    selection = select(done, objective)
    assert selection.winner == "openvino-fp32+throughput-2streams"


def test_without_variants_the_tuning_stage_measures_nothing_again(monkeypatch):
    clock = FakeClock(monkeypatch)
    build = fake_build(clock, Compiler.OPENVINO, Precision.FP32, 0.001, variants=lambda: [])
    ctx = fake_context(Objective(batch_size=1))
    bench = Benchmark(batch_size=1, p50_ms=1, p95_ms=1, p99_ms=1, throughput_per_s=1000, threads=2, warmup_runs=0,
                      runs=5)  # fmt: skip
    done = [Candidate(id=build.id, compiler="OpenVINO", precision="FP32", status="Passed", benchmarks=[bench])]
    assert (
        pipeline._tune(ctx, fake_validate(), done, {build.id: build}, {build.id: Sleeper(clock, 0)}, BenchmarkPlan())
        == done
    )


# --- selection among default settings and their variants -------------------------------------------------


def fixed(id: str, precision: str, p95: float, low: float, high: float) -> Candidate:
    bench = Benchmark(batch_size=1, p50_ms=p95, p95_ms=p95, p99_ms=p95, throughput_per_s=1000 / p95, threads=2,
                      warmup_runs=0, runs=20, p95_interval_ms=(low, high))  # fmt: skip
    return Candidate(id=id, compiler="OpenVINO", precision=precision, status="Passed", benchmarks=[bench])


def test_a_variant_within_the_noise_of_its_default_settings_is_not_selected():
    rng = np.random.default_rng(5)
    baseline = measured("baseline", "FP32", rng.normal(10.0, 0.2, 20), baseline=True)
    fp32 = measured("openvino-fp32", "FP32", rng.normal(5.0, 0.2, 20))
    close = measured("openvino-fp32+throughput-2streams", "FP32", rng.normal(4.9, 0.2, 20))
    selection = select([baseline, fp32, close], Objective(batch_size=1))
    assert selection.winner == "openvino-fp32"
    if close.benchmarks[0].p95_ms < fp32.benchmarks[0].p95_ms:
        assert "not significantly faster than the simpler openvino-fp32" in selection.reason
    clear = measured("openvino-fp32+throughput-2streams", "FP32", rng.normal(3.0, 0.1, 20))
    assert select([baseline, fp32, clear], Objective(batch_size=1)).winner == "openvino-fp32+throughput-2streams"


def test_a_variant_must_beat_its_own_default_settings_not_just_a_simpler_candidate():
    fp32 = fixed("openvino-fp32", "FP32", 5.0, 4.9, 5.1)
    bf16 = fixed("openvino-bf16", "BF16", 4.8, 4.6, 5.0)  # within FP32's noise
    tuned = fixed("openvino-bf16+throughput-2streams", "BF16", 4.5, 4.4, 4.7)  # beats FP32, not BF16's defaults
    assert best_per_compiler([fp32, bf16, tuned], Objective(batch_size=1)) == [tuned]
    selection = select([fp32, bf16, tuned], Objective(batch_size=1))
    assert selection.winner == "openvino-fp32"
    assert selection.reason.startswith("lowest p95 at batch 1: openvino-bf16+throughput-2streams (p95 4.50 ms")
    faster = fixed("openvino-bf16+throughput-2streams", "BF16", 4.2, 4.1, 4.4)
    assert select([fp32, bf16, faster], Objective(batch_size=1)).winner == faster.id


def test_best_per_compiler_leaves_the_baseline_out_and_follows_the_objective():
    baseline = fixed("baseline", "FP32", 1.0, 0.9, 1.1).model_copy(update={"baseline": True, "compiler": "OnnxRuntime"})
    ort = fixed("onnxruntime-int8", "INT8", 3.0, 2.9, 3.1).model_copy(update={"compiler": "OnnxRuntime"})
    slow, fast = fixed("openvino-fp32", "FP32", 4.0, 3.9, 4.1), fixed("openvino-int8", "INT8", 2.0, 1.9, 2.1)
    assert best_per_compiler([baseline, ort, slow, fast], Objective(batch_size=1)) == [fast, ort]
    # Throughput within a 3.5 ms budget: the OpenVINO FP32 engine (p95 4.0) is out of it.
    assert best_per_compiler(
        [slow, ort], Objective(metric="Throughput", batch_size=1, latency_budget_milliseconds=3.5)
    ) == [ort]


# --- the selected settings in Triton's config ----------------------------------------------------------


def with_winner(tmp_path, compiler: str, id: str, settings: dict):
    base = serving_manifest(tmp_path, compiler, "CPU")
    winner = base.candidates[0].model_copy(update={"id": id, "settings": settings})
    return base.model_copy(
        update={"candidates": [winner], "selection": base.selection.model_copy(update={"winner": id})}
    )


THROUGHPUT = {
    "device": "CPU",
    "config": {"PERFORMANCE_HINT": "THROUGHPUT", "INFERENCE_NUM_THREADS": "2", "INFERENCE_PRECISION_HINT": "bf16",
               "NUM_STREAMS": "2"},
    "inferencePrecision": "bf16",
}  # fmt: skip
OPENVINO_THROUGHPUT_PARAMETERS = """parameters {
  key: "HINT_BF16"
  value {
    string_value: "YES"
  }
}
parameters {
  key: "INFERENCE_NUM_THREADS"
  value {
    string_value: "2"
  }
}
parameters {
  key: "NUM_STREAMS"
  value {
    string_value: "2"
  }
}
parameters {
  key: "PERFORMANCE_HINT"
  value {
    string_value: "THROUGHPUT"
  }
}
backend: "openvino"
"""


def test_a_throughput_streams_winner_is_served_with_its_hint_and_streams(tmp_path, golden):
    manifest = with_winner(tmp_path, "OpenVINO", "openvino-bf16+throughput-2streams", THROUGHPUT)
    text = render(config_dict("m", manifest, serving_spec_with()))
    golden("triton-config-openvino-throughput-2streams.pbtxt", text)
    assert OPENVINO_THROUGHPUT_PARAMETERS in text


def test_an_onnxruntime_variant_is_served_with_its_threads_and_graph_level(tmp_path, golden):
    settings = {"graphOptimizationLevel": "ORT_ENABLE_EXTENDED", "intraOpNumThreads": 1,
                "providers": ["CPUExecutionProvider"]}  # fmt: skip
    manifest = with_winner(tmp_path, "OnnxRuntime", "onnxruntime-fp32+extended", settings)
    text = render(config_dict("m", manifest, serving_spec_with()))
    golden("triton-config-onnxruntime-extended-1thread.pbtxt", text)
    assert "optimization {\n  graph {\n    level: 1\n  }\n}\n" in text
    assert 'parameters {\n  key: "intra_op_thread_count"\n  value {\n    string_value: "1"\n  }\n}\n' in text
    every = {**settings, "graphOptimizationLevel": "ORT_ENABLE_ALL", "intraOpNumThreads": 2}
    config = parse(render(config_dict("m", with_winner(tmp_path, "OnnxRuntime", "onnxruntime-fp32", every),
                                      serving_spec_with())))  # fmt: skip
    assert not config.HasField("optimization")  # level 0, ORT_ENABLE_ALL, is the backend's default
    assert config.parameters["intra_op_thread_count"].string_value == "2"


# --- one real compile ------------------------------------------------------------------------------------


def two_cpus(monkeypatch):
    """The compile node as a 2-CPU pod, whatever runs the test: the variants depend on the CPU count."""
    real = pipeline.fingerprint

    def fingerprint():
        node = real()
        return {**node, "cpu": {**node["cpu"], "usableCpus": 2}}

    monkeypatch.setattr(pipeline, "fingerprint", fingerprint)


def test_a_real_compile_records_each_variant_with_its_settings_and_figures(tmp_path, monkeypatch):
    registry = serve_registry(tmp_path / "registry", monkeypatch)
    two_cpus(monkeypatch)
    model = conv_classifier(tmp_path / "m.onnx")
    body = compile_spec(model, tmp_path / "registry", compilers=["OnnxRuntime", "OpenVINO"], precisions=["FP32"])
    outcome = pipeline.run(
        CompileJobSpec.model_validate(body), tmp_path / "work", pipeline.Options(BenchmarkPlan(warmup=0, runs=3))
    )
    candidates = {c.id: c for c in outcome.manifest.candidates}
    assert list(candidates) == [
        "baseline", "onnxruntime-fp32", "openvino-fp32",
        "onnxruntime-fp32+1thread", "onnxruntime-fp32+extended", "openvino-fp32+throughput-2streams",
    ]  # fmt: skip
    for id in ("onnxruntime-fp32+1thread", "onnxruntime-fp32+extended", "openvino-fp32+throughput-2streams"):
        assert candidates[id].status in ("Passed", "Selected") and candidates[id].accuracy is not None
        assert {b.batch_size for b in candidates[id].benchmarks} == {1, 2}
    assert candidates["onnxruntime-fp32"].settings["graphOptimizationLevel"] == "ORT_ENABLE_ALL"
    assert candidates["onnxruntime-fp32+1thread"].settings["intraOpNumThreads"] == 1
    assert candidates["onnxruntime-fp32+extended"].settings["graphOptimizationLevel"] == "ORT_ENABLE_EXTENDED"
    assert candidates["openvino-fp32"].settings["config"]["PERFORMANCE_HINT"] == "LATENCY"
    tuned = candidates["openvino-fp32+throughput-2streams"].settings["config"]
    assert (tuned["PERFORMANCE_HINT"], tuned["NUM_STREAMS"], tuned["INFERENCE_NUM_THREADS"]) == ("THROUGHPUT", "2", "2")
    # The winner's files are what is published: +extended has its own optimised model.
    extended = tmp_path / "work" / "candidates" / "onnxruntime-fp32+extended" / "model.onnx"
    assert (
        extended.exists()
        and extended.read_bytes() != (tmp_path / "work" / "candidates" / "onnxruntime-fp32" / "model.onnx").read_bytes()
    )
    assert registry.engines() == [outcome.payload["engine"]["digest"]]


def test_the_tuning_stage_can_be_switched_off(tmp_path, monkeypatch):
    serve_registry(tmp_path / "registry", monkeypatch)
    two_cpus(monkeypatch)
    body = compile_spec(conv_classifier(tmp_path / "m.onnx"), tmp_path / "registry", compilers=["OnnxRuntime"])
    options = pipeline.Options(BenchmarkPlan(warmup=0, runs=3), tune_runtime_settings=False)
    outcome = pipeline.run(CompileJobSpec.model_validate(body), tmp_path / "work", options)
    assert [c.id for c in outcome.manifest.candidates] == ["baseline", "onnxruntime-fp32"]


@pytest.mark.parametrize(
    ("config", "parameters"),
    [
        # f32 has no backend key: the serving image's CPU plugin defaults to it (serving/triton_backends)
        ({"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": "2", "INFERENCE_PRECISION_HINT": "f32"},
         {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": "2"}),
        ({"INFERENCE_PRECISION_HINT": "bf16", "NUM_STREAMS": "2"}, {"NUM_STREAMS": "2", "HINT_BF16": "YES"}),
        ({"ENABLE_CPU_PINNING": "YES"}, {}),  # a key the backend would ignore is not written
    ],
)  # fmt: skip
def test_openvino_config_becomes_the_parameters_the_backend_reads(config, parameters):
    assert openvino_parameters(config) == parameters


def test_no_openvino_fp16_candidate_since_the_backend_cannot_serve_it_in_fp16():
    with pytest.raises(Skipped, match="HINT_BF16"):
        openvino.build(SimpleNamespace(gpu_class=None), Precision.FP16)
