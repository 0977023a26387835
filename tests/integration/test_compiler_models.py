"""Compile the real OCR models from the rapidocr-onnxruntime wheel on this CPU, end to end.

Both are real exports with the traps real exports have (opset 11/12, dynamic H/W that ORT's
symbolic shape inference chokes on). Inputs are rendered text images (tensorkiln_local.cluster.ocr_models). Run
counts are tiny: these tests check the pipeline, e2e/bench_compile.py measures speed.
"""

import json

import numpy as np
import onnxruntime as ort
import openvino as ov
import pytest
from tensorkiln_api.registry import open_registry
from tensorkiln_compiler.cli import SPEC_ENV, main
from tensorkiln_local.cluster.ocr_models import CLS, DET, write_dataset

pytestmark = pytest.mark.compiler
FAST = ["--warmup", "1", "--runs", "5"]
# A text-probability map: edge pixels flip under any precision change, so the map's cosine
# similarity is the gate rather than per-pixel limits.
HEATMAP_TOLERANCE = {"maxAbsError": 1.0, "maxRelError": 1.0, "minCosineSimilarity": 0.99}


@pytest.fixture
def registry(tmp_path):
    """The real filesystem registry the compiler publishes to (spec.registry.uri)."""
    return open_registry(f"file://{tmp_path}/registry")


def compile_ocr(tmp_path, monkeypatch, model, dataset, **overrides) -> tuple[int, dict]:
    spec = {
        "modelName": f"ocr-{model.name}",
        "source": {"uri": f"file://{model.path}"},
        "hardware": {"className": "cpu-local", "kind": "CPU", "nodeSelector": {}},
        "compilers": ["OnnxRuntime", "OpenVINO"],
        "precisions": ["FP32", "INT8"],
        "shapes": model.shapes(batch_max=8),
        "calibration": {"datasetUri": f"file://{dataset}", "samples": 16},
        "objective": {"metric": "LatencyP95", "batchSize": model.batch_size},
        "registry": {"uri": f"file://{tmp_path}/registry"},
        "optionsHash": f"test-{model.name}-0001",
        **overrides,
    }
    monkeypatch.setenv(SPEC_ENV, json.dumps(spec))
    log = tmp_path / "termination-log"
    code = main(["--termination-log", str(log), "--work-dir", str(tmp_path / "work"), *FAST])
    return code, json.loads(log.read_text())


def test_det_compiles_validates_selects_and_publishes(tmp_path, monkeypatch, registry):
    """ORT and OpenVINO, FP32 and INT8 on the 640x640 detector; published to the filesystem registry."""
    dataset = write_dataset(DET, tmp_path / "det.npz", 8)
    code, message = compile_ocr(tmp_path, monkeypatch, DET, dataset, accuracy=HEATMAP_TOLERANCE)
    assert code == 0, message
    engine = tmp_path / "engine"
    manifest = registry.fetch(message["engine"]["digest"], engine).to_json_dict()  # verifies every sha256
    steps = manifest["preprocessingSteps"]
    assert steps[0] == "upgraded opset 12 -> 13 with onnx.version_converter (per-channel Q/DQ needs opset >= 13)"
    assert "quant_pre_process with skip_symbolic_shape=True" in steps[1]
    statuses = {c["id"]: c["status"] for c in manifest["candidates"]}
    engines = {"baseline", "onnxruntime-fp32", "onnxruntime-int8", "openvino-fp32", "openvino-int8"}
    assert engines <= set(statuses)
    # and the tuning stage's runtime-settings variants of each compiler's best, named after it
    assert all(id.split("+")[0] in engines for id in set(statuses) - engines), statuses
    assert all(s in ("Selected", "Passed", "RejectedAccuracy") for s in statuses.values()), statuses
    assert manifest["calibration"] | {"sha256": None} == {
        "datasetUri": f"file://{dataset}", "sha256": None, "calibrationSamples": 6, "validationSamples": 2, "syntheticData": False,
    }  # fmt: skip
    assert manifest["inputs"] == [{"name": "x", "dataType": "FP32", "dims": [-1, 3, -1, -1]}]

    # The published engine is self-contained: run the fetched files and check them against the reference.
    x = DET.samples(1, seed=7)
    reference = ort.InferenceSession(str(DET.path)).run(None, {"x": x})[0]
    winner = next(c for c in manifest["candidates"] if c["status"] == "Selected")
    if winner["compiler"] == "OpenVINO":
        compiled = ov.Core().compile_model(str(engine / "model.xml"), "CPU", winner["settings"]["config"])
        output = compiled({"x": x})[0]
    else:
        output = ort.InferenceSession(str(engine / "model.onnx")).run(None, {"x": x})[0]
    cosine = float(np.dot(output.ravel(), reference.ravel()) / np.linalg.norm(output) / np.linalg.norm(reference))
    assert cosine > 0.98


def test_cls_accuracy_gate_rejects_int8_on_a_real_model(tmp_path, monkeypatch, registry):
    dataset = write_dataset(CLS, tmp_path / "cls.npz", 24)
    tiny = {"maxAbsError": 1e-6, "maxRelError": 1e-6, "minCosineSimilarity": 0.99, "minTop1Agreement": 1.0}
    code, message = compile_ocr(tmp_path, monkeypatch, CLS, dataset, accuracy=tiny)
    assert code == 0, message
    candidates = {c["id"]: c for c in registry.manifest(message["engine"]["digest"]).to_json_dict()["candidates"]}
    for name in ("onnxruntime-int8", "openvino-int8"):
        assert candidates[name]["status"] == "RejectedAccuracy", candidates[name]
        figures = candidates[name]["accuracy"]
        assert figures["maxAbsError"] > 1e-6 and figures["samples"] == 6 and figures["top1Agreement"] is not None
    assert message["rejected"] >= 2 and message["selected"] not in ("onnxruntime-int8", "openvino-int8")


def test_mis_shaped_calibration_for_a_real_model_exits_2(tmp_path, monkeypatch, registry):
    np.savez(tmp_path / "det.npz", x=np.zeros((4, 3, 320, 320), np.float32))
    code, message = compile_ocr(tmp_path, monkeypatch, DET, tmp_path / "det.npz")
    assert code == 2
    assert message["error"] == {
        "reason": "CalibrationDataInvalid",
        "message": "spec.calibration.datasetUri: det.npz: array 'x' has shape (4, 3, 320, 320); axis 2 of input 'x' accepts 640..640",
    }
    assert not (tmp_path / "registry" / "engines").exists()
