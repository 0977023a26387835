"""The whole compile through the CLI on tiny models: exit codes, termination message, what is published."""

import hashlib
import json

import numpy as np
import pytest
from tensorkiln.status.engine import engine_status
from tensorkiln_api.registry.manifest import EngineManifest
from tensorkiln_compiler.cli import NAMESPACE_ENV, SPEC_ENV, main

from .compiler_support import (
    compile_spec,
    conv_classifier,
    ml_only_model,
    picking_model,
    serve_registry,
    single_op_model,
    tokenizer_model,
    zipmap_classifier,
)

FAST = ["--warmup", "0", "--runs", "3"]


@pytest.fixture
def registry(tmp_path, monkeypatch):
    return serve_registry(tmp_path / "registry", monkeypatch)


@pytest.fixture
def compile(tmp_path, monkeypatch, registry):
    """Run tensorkiln-compile as the Job does (spec in the environment); return (exit code, message)."""

    def run(spec: dict) -> tuple[int, dict]:
        monkeypatch.setenv(SPEC_ENV, json.dumps(spec))
        log = tmp_path / "termination-log"
        code = main(["--termination-log", str(log), "--work-dir", str(tmp_path / "work"), *FAST])
        return code, json.loads(log.read_text())

    return run


def test_compiles_selects_and_publishes_only_the_winner(tmp_path, compile, registry, monkeypatch):
    monkeypatch.setenv(NAMESPACE_ENV, "team-a")  # the Job's downward API
    model = conv_classifier(tmp_path / "m.onnx", opset=11)
    spec = compile_spec(
        model, tmp_path / "registry", compilers=["OnnxRuntime", "OpenVINO"], precisions=["FP32", "INT8"]
    )
    code, message = compile(spec)
    assert code == 0, message
    assert set(message) == {"engine", "selected", "speedupVsBaseline", "accuracyPassed", "rejected"}
    (digest,) = registry.engines()
    assert message["engine"] == {"digest": digest, "uri": registry.engine_uri(digest)}
    manifest = registry.manifest(digest)
    assert manifest["key"]["modelDigest"] == hashlib.sha256(model.read_bytes()).hexdigest()
    assert manifest["key"]["compilerVersion"] == "0.1.0" and manifest["key"]["hardwareClass"] == "cpu-test"
    assert manifest["namespace"] == "team-a"
    ids = [c["id"] for c in manifest["candidates"]]
    engines = ["baseline", "onnxruntime-fp32", "onnxruntime-int8", "openvino-fp32", "openvino-int8"]
    assert ids[:5] == engines and all("+" in id for id in ids[5:])  # then the tuning stage's settings variants
    (selected,) = [c for c in manifest["candidates"] if c["status"] == "Selected"]
    assert selected["id"] == message["selected"] == manifest["selection"]["winner"]
    winner_files = {"OnnxRuntime": ["model.onnx"], "OpenVINO": ["model.bin", "model.xml"]}[selected["compiler"]]
    assert [a["path"] for a in manifest["artifacts"]] == winner_files
    engine_dir = registry.root / "engines" / digest
    for artifact in manifest["artifacts"]:
        assert hashlib.sha256((engine_dir / artifact["path"]).read_bytes()).hexdigest() == artifact["sha256"]
    assert manifest["calibration"]["syntheticData"] is True
    assert manifest["preprocessingSteps"][0].startswith("upgraded opset 11 -> 13")
    assert manifest["fingerprint"]["cpu"]["usableCpus"] >= 1
    assert manifest["profiles"]["inputs"]["x"] == {"min": [1, 3, 8, 8], "opt": [2, 3, 8, 8], "max": [4, 3, 8, 8]}
    baseline = manifest["candidates"][0]
    assert baseline["baseline"] and {b["batchSize"] for b in baseline["benchmarks"]} == {1, 2}

    code, again = compile(spec)  # a retry finds the engine instead of compiling twice
    assert code == 0 and again == {"engine": message["engine"], "cached": True}
    assert registry.engines() == [digest]


def test_accuracy_gate_rejects_int8_and_keeps_its_figures(tmp_path, compile, registry):
    model = conv_classifier(tmp_path / "m.onnx")
    tiny = {"maxAbsError": 1e-9, "maxRelError": 1e-9, "minCosineSimilarity": 0.999999}
    spec = compile_spec(model, tmp_path / "registry", precisions=["FP32", "INT8"], accuracy=tiny)
    code, message = compile(spec | {"compilerVersion": "0.1.0+dev.7"})  # a development build, as the operator names it
    assert code == 0 and message["rejected"] >= 1
    manifest = registry.manifest(message["engine"]["digest"])
    assert manifest["key"]["compilerVersion"] == "0.1.0+dev.7"  # so the release's engines are not this build's
    candidates = {c["id"]: c for c in manifest["candidates"]}
    int8 = candidates["onnxruntime-int8"]
    assert int8["status"] == "RejectedAccuracy" and int8["benchmarks"] == []
    assert int8["accuracy"]["maxAbsError"] > 1e-9 and "maxRelError 1e-09" in int8["reason"]
    assert message["selected"] != "onnxruntime-int8"


def test_a_model_of_ai_onnx_ml_operators_only_compiles_and_int8_is_skipped(tmp_path, compile, registry):
    model = ml_only_model(tmp_path / "m.onnx")  # imports ai.onnx.ml only: no default-domain opset
    code, message = compile(compile_spec(model, tmp_path / "registry", precisions=["FP32", "INT8"]))
    assert code == 0, message
    candidates = {c["id"]: c for c in registry.manifest(message["engine"]["digest"])["candidates"]}
    assert candidates["onnxruntime-fp32"]["status"] in ("Selected", "Passed")
    int8 = candidates["onnxruntime-int8"]
    assert int8["status"] == "Failed" and int8["reason"].startswith(
        "skipped: the model imports no default-domain opset"
    )


def write_calibration(tmp_path, **arrays) -> dict:
    np.savez(tmp_path / "calib.npz", **arrays)
    return {"datasetUri": f"file://{tmp_path}/calib.npz", "samples": 8}


BAD_INPUTS = {
    "wrong-sha256": (lambda tmp, spec: spec["source"].update(sha256="0" * 64), "DigestMismatch", "spec.source.sha256: expected sha256 0000"),
    "unreachable": (lambda tmp, spec: spec["source"].update(uri=f"file://{tmp}/missing.onnx"), "ModelUnreachable", "spec.source.uri: file://"),
    "malformed": (lambda tmp, spec: (tmp / "m.onnx").write_bytes(b"\x08\x07garbage\xff"), "ModelMalformed", "spec.source.uri: m.onnx"),
    "opset": (lambda tmp, spec: single_op_model(tmp / "m.onnx", "Relu", opset=99), "UnsupportedOpset", "uses opset 99"),
    "operator": (lambda tmp, spec: single_op_model(tmp / "m.onnx", "Frob", domain="com.acme"), "UnsupportedOperator", "custom operator(s) com.acme::Frob: onnxruntime here registers no such domain"),
    "custom-domain": (lambda tmp, spec: tokenizer_model(tmp / "m.onnx"), "UnsupportedOperator", "custom operator(s) ai.onnx.contrib::SentencepieceTokenizer: onnxruntime"),
    "shapes": (lambda tmp, spec: conv_classifier(tmp / "m.onnx", batch=1), "ShapeMismatch", "spec.serving.maxBatchSize: input 'x' has a static batch dimension of 1"),
    "zipmap": (lambda tmp, spec: zipmap_classifier(tmp / "m.onnx"), "UnsupportedTensorType", "output 'output_probability' is a sequence of maps"),
    "empty-calibration": (
        lambda tmp, spec: spec.update(calibration=write_calibration(tmp, x=np.zeros((0, 3, 8, 8), np.float32))),
        "CalibrationDataInvalid", "array 'x' is empty",
    ),
    "mis-shaped-calibration": (
        lambda tmp, spec: spec.update(calibration=write_calibration(tmp, x=np.zeros((4, 3, 9, 8), np.float32))),
        "CalibrationDataInvalid", "axis 2 of input 'x' accepts 8..8",
    ),
    "spec": (lambda tmp, spec: spec.update(compilers=[]), "InvalidSpec", "spec.compilers"),
    # This venv has constraints.txt's onnxruntime, which no Triton release serves with.
    "runtime-mismatch": (lambda tmp, spec: spec.update(servingTarget="24.10"), "RuntimeMismatch",
                         "but Triton 24.10 (server 2.51.0) serves OnnxRuntime engines with onnxruntime 1.19.2"),
    "compiler-version": (lambda tmp, spec: spec.update(compilerVersion="0.2.0+abc"), "CompilerVersionMismatch",
                         "spec.compilerVersion 0.2.0+abc names another release than this compiler's 0.1.0"),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_exits_2_with_a_clear_message_and_publishes_nothing(tmp_path, compile, registry, case):
    mutate, reason, needle = BAD_INPUTS[case]
    spec = compile_spec(conv_classifier(tmp_path / "m.onnx"), tmp_path / "registry")
    mutate(tmp_path, spec)
    code, message = compile(spec)
    assert code == 2
    assert message["error"]["reason"] == reason and needle in message["error"]["message"], message
    assert registry.engines() == []


def test_spec_from_file_and_not_json(tmp_path, monkeypatch):
    monkeypatch.delenv(SPEC_ENV, raising=False)
    (tmp_path / "spec.json").write_text("{not json")
    log = tmp_path / "log"
    assert (
        main(["--spec", str(tmp_path / "spec.json"), "--work-dir", str(tmp_path), "--termination-log", str(log)]) == 2
    )
    assert json.loads(log.read_text())["error"]["reason"] == "InvalidSpec"
    assert main(["--work-dir", str(tmp_path), "--termination-log", str(log)]) == 2
    assert "set $TENSORKILN_COMPILE_SPEC" in json.loads(log.read_text())["error"]["message"]


def test_registry_failure_exits_1_and_names_the_registry(tmp_path, compile, monkeypatch):
    class RegistryUnavailable(Exception):
        pass

    def unavailable(uri):
        raise RegistryUnavailable("connection refused")

    monkeypatch.setattr("tensorkiln_api.registry.open_registry", unavailable, raising=False)
    code, message = compile(compile_spec(conv_classifier(tmp_path / "m.onnx"), tmp_path / "registry"))
    assert code == 1
    assert message["error"]["reason"] == "RegistryUnavailable"
    assert message["error"]["message"].startswith(f"spec.registry.uri file://{tmp_path}/registry: connection refused")


def test_gpu_class_without_tensorrt_fails_and_publishes_nothing(tmp_path, compile, registry, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "tensorrt", None)
    spec = compile_spec(conv_classifier(tmp_path / "m.onnx"), tmp_path / "registry", compilers=["TensorRT"],
                        hardware={"className": "nvidia-h100", "kind": "GPU", "nodeSelector": {}})  # fmt: skip
    code, message = compile(spec)
    assert code == 1 and message["error"]["reason"] == "TensorRTUnavailable"
    assert "spec.compilers lists TensorRT" in message["error"]["message"]
    assert registry.engines() == []


def test_a_model_that_refuses_the_synthesised_inputs_fails_naming_them_and_the_field_to_set(
    tmp_path, compile, registry
):
    spec = compile_spec(picking_model(tmp_path / "m.onnx"), tmp_path / "registry")
    code, message = compile(spec)
    assert code == 2 and registry.engines() == []
    error = message["error"]
    assert error["reason"] == "SyntheticInputRefused", error
    text = error["message"]
    assert text.startswith("spec.compile.syntheticInputs: the model refused the inputs the compiler synthesised")
    assert "GatherElements op: Out of range value in index tensor" in text  # onnxruntime's words, its first line
    assert "gather_elements.cc" not in text and "core_impl" not in text  # not its source location
    assert "\x1b" not in text and "Traceback" not in text and "\n" not in text
    # The integer input first: it is the one a draw cannot know the meaning of.
    assert "Synthesised: k (int64 [None, 1]): integers 0 to 15; x (float32 [None, 4]): standard normal." in text
    assert "e.g. k: {value: ...}" in text


def test_given_values_for_an_input_make_the_same_model_compile_and_the_engine_says_how(tmp_path, compile, registry):
    spec = compile_spec(picking_model(tmp_path / "m.onnx"), tmp_path / "registry")
    spec["syntheticInputs"] = {"k": {"min": 0, "max": 3}}
    code, message = compile(spec)
    assert code == 0, message
    (digest,) = registry.engines()
    drawn = {"x": "standard normal", "k": "integers 0 to 3 (spec.compile.syntheticInputs.k)"}
    assert registry.manifest(digest)["calibration"]["syntheticInputs"] == drawn
    fields, _ = engine_status(EngineManifest.model_validate(registry.manifest(digest)), digest, "file:///r", False)
    assert fields["selection"]["syntheticData"] is True and fields["selection"]["syntheticInputs"] == drawn


@pytest.mark.parametrize(
    ("given", "needle"),
    [
        ({"rate": {"value": 16000}}, "spec.compile.syntheticInputs: the model has no input 'rate' (its inputs: k, x)"),
        (
            {"k": {"value": 1.5}},
            "spec.compile.syntheticInputs.k.value: input 'k' is int64: give a whole number, not 1.5",
        ),
        (
            {"k": {"min": 0.2, "max": 0.8}},
            "spec.compile.syntheticInputs.k: input 'k' is int64: no whole number lies in",
        ),
    ],
)
def test_synthetic_values_the_model_cannot_take_are_refused_naming_the_field(
    tmp_path, compile, registry, given, needle
):
    spec = compile_spec(picking_model(tmp_path / "m.onnx"), tmp_path / "registry")
    spec["syntheticInputs"] = given
    code, message = compile(spec)
    assert code == 2 and message["error"]["reason"] == "InvalidSyntheticInput" and needle in message["error"]["message"]


def test_another_namespaces_compile_pod_fetches_checks_and_reports_the_engine_without_compiling(
    tmp_path, compile, registry, monkeypatch
):
    """What the operator runs when a cached engine was published by another namespace: this namespace's pod
    fetches the source with its own credentials and checks its digest (bad input otherwise), then finds
    the engine and reports it; nothing is compiled or published again."""
    model = single_op_model(tmp_path / "m.onnx", "Relu")
    spec = compile_spec(model, tmp_path / "registry", compilers=["OnnxRuntime"], precisions=["FP32"])
    spec["source"]["sha256"] = hashlib.sha256(model.read_bytes()).hexdigest()
    monkeypatch.setenv(NAMESPACE_ENV, "team-a")
    code, first = compile(spec)
    assert code == 0, first
    monkeypatch.setenv(NAMESPACE_ENV, "team-b")
    code, again = compile(spec)
    assert (code, again) == (0, {"engine": first["engine"], "cached": True})
    (digest,) = registry.engines()
    assert registry.manifest(digest)["namespace"] == "team-a"

    wrong = {**spec, "source": {**spec["source"], "sha256": "0" * 64}}
    code, refused = compile(wrong)
    assert code == 2 and "spec.source.sha256" in refused["error"]["message"], refused
