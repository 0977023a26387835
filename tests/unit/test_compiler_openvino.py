"""The OpenVINO candidate converts with the profile's input shapes, so graphs whose ranks are only
known from their inputs' shapes (silero-vad's If/LSTM, skl2onnx's Softmax-9) still convert; and its IR
and the config rendered for it have the shapes Triton's openvino backend accepts."""

from pathlib import Path

import numpy as np
import onnx
import openvino as ov
import pytest
from onnx import TensorProto, helper
from tensorkiln.builders.tritonconfig import config_dict
from tensorkiln.controllers.inferencemodel import normalised_spec
from tensorkiln_api import CompileJobSpec, Shapes
from tensorkiln_api.registry.manifest import TensorInfo
from tensorkiln_compiler import pipeline
from tensorkiln_compiler.benchmark import BenchmarkPlan
from tensorkiln_compiler.candidates import BuildContext
from tensorkiln_compiler.candidates.openvino import OvRunner, input_shapes
from tensorkiln_compiler.inspection import inspect_model

from .compiler_support import compile_spec, conv_classifier, serve_registry, stateful_model

ROWS_2_TO_4 = [{"input": "x", "axis": 0, "min": 2, "opt": 2, "max": 4}]


def squeeze_softmax(path):
    """x[N,4] -> Squeeze (no axes) -> Softmax-11 -> y[N,4]. Squeeze's output rank depends on whether N is 1,
        so converted without shapes the rank is unknown and Softmax-11 fails; with N in 2..4 it is 2. (Served
    unbatched, so that N's range can exclude 1: batched, the compiler also benchmarks at batch 1.)"""
    graph = helper.make_graph(
        [helper.make_node("Squeeze", ["x"], ["s"]), helper.make_node("Softmax", ["s"], ["y"], axis=1)],
        "squeeze-softmax",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 6
    onnx.save(model, str(path))
    return path


def test_a_graph_whose_ranks_need_bounded_sizes_converts_but_is_not_built_for_triton(tmp_path, monkeypatch):
    # It converts with the profile's shapes (else the reason would be the converter's "rank has to be known"),
    # but Triton's openvino backend takes an open size only unbounded, and unbounded, Squeeze's rank is unknown.
    serve_registry(tmp_path / "registry", monkeypatch)
    model = squeeze_softmax(tmp_path / "m.onnx")
    body = compile_spec(
        model, tmp_path / "registry", compilers=["OpenVINO"], batched=False,
        shapes={"dynamicDims": ROWS_2_TO_4}, objective={"metric": "LatencyP95"},
    )  # fmt: skip
    outcome = pipeline.run(
        CompileJobSpec.model_validate(body), tmp_path / "work", pipeline.Options(BenchmarkPlan(warmup=0, runs=3))
    )
    statuses = {c.id: (c.status, c.reason) for c in outcome.manifest.candidates}
    assert statuses["openvino-fp32"] == (
        "Failed",
        "skipped: Triton's openvino backend serves an open size only unbounded, and unbounded, the rank of output "
        "'y' depends on the open sizes",
    ), statuses


def test_input_shapes_are_the_profile_ranges_scalars_included(tmp_path):
    dynamic = [
        {"input": "chunk", "axis": 0, "min": 1, "opt": 2, "max": 4},
        {"input": "state", "axis": 1, "min": 1, "opt": 2, "max": 4},
    ]
    info = inspect_model(
        stateful_model(tmp_path / "m.onnx"), Shapes.model_validate({"dynamicDims": dynamic}), 1, batched=False
    )
    ctx = BuildContext(spec=None, model=info, dataset=None, fingerprint={}, threads=1, work_dir=tmp_path)
    shapes = input_shapes(ctx)
    assert shapes == {
        "chunk": ov.PartialShape([ov.Dimension(1, 4), 16]),
        "state": ov.PartialShape([2, ov.Dimension(1, 4), 8]),
        "sr": ov.PartialShape([]),
    }
    converted = ov.convert_model(str(info.path), input=shapes)
    assert {p.get_any_name(): p.get_partial_shape() for p in converted.inputs} == shapes


def image_map(path):
    """x[N,3,H,W] -> Relu -> y[N,3,H,W]: an output whose sizes the ONNX leaves open, as a detector's heat map."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "image-map",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, "H", "W"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _sizes(height: tuple[int, int], width: tuple[int, int]) -> list[dict]:
    return [
        {"input": "x", "axis": 2, "min": height[0], "opt": height[0], "max": height[1]},
        {"input": "x", "axis": 3, "min": width[0], "opt": width[0], "max": width[1]},
    ]


@pytest.mark.parametrize(
    ("height", "width", "served_dims"),
    [
        ((8, 8), (16, 16), [3, 8, 16]),  # fixed sizes: the IR's output is static, and the config must say so
        ((8, 16), (16, 16), [3, -1, 16]),  # a range: unbounded in the IR, -1 in the config
    ],
)
def test_the_served_config_gives_the_openvino_engine_its_own_output_shapes(
    tmp_path, monkeypatch, height, width, served_dims
):
    # Triton's openvino backend (r24.10) compares output dims exactly: a -1 where the IR is static, or any
    # dim against a bounded one, fails the model's load (PP-OCR det's [1, -1, -1] heat map did).
    registry = serve_registry(tmp_path / "registry", monkeypatch)
    body = compile_spec(
        image_map(tmp_path / "m.onnx"), tmp_path / "registry", compilers=["OpenVINO"],
        shapes={"batch": {"min": 1, "opt": 1, "max": 2}, "dynamicDims": _sizes(height, width)},
        objective={"metric": "LatencyP95", "batchSize": 1},
    )  # fmt: skip
    # On a model this small onnxruntime's baseline may be faster: OpenVINO's engine is the one published here.
    chosen = pipeline.select
    monkeypatch.setattr(pipeline, "select", lambda c, o: chosen(c, o).model_copy(update={"winner": "openvino-fp32"}))
    outcome = pipeline.run(
        CompileJobSpec.model_validate(body), tmp_path / "work", pipeline.Options(BenchmarkPlan(warmup=0, runs=3))
    )
    engine = Path(registry.engine_uri(outcome.payload["engine"]["digest"]).removeprefix("file://"))
    ir = ov.Core().read_model(str(engine / "model.xml"))
    # Every open size unbounded but the batch's, which the backend sets to max_batch_size itself.
    assert ir.input("x").get_partial_shape() == ov.PartialShape([ov.Dimension(1, 2), 3, *served_dims[1:]])
    spec = {"source": {"uri": "file:///m.onnx"}, "shapes": body["shapes"], "serving": {"maxBatchSize": 2}}
    config = config_dict("m", outcome.manifest, normalised_spec({"spec": spec})["serving"])
    assert [(t["name"], t["dims"]) for t in config["input"]] == [("x", served_dims)]
    assert [(t["name"], t["dims"]) for t in config["output"]] == [("y", served_dims)]


def test_engine_outputs_take_the_engines_own_dims_where_it_records_them():
    outputs = [
        TensorInfo(name="y", data_type="FP32", dims=[-1, 1, -1, -1]),
        TensorInfo(name="z", data_type="INT64", dims=[-1]),
    ]
    assert pipeline.engine_outputs(outputs, None) == outputs
    assert [o.dims for o in pipeline.engine_outputs(outputs, {"y": [-1, 1, 480, 480]})] == [[-1, 1, 480, 480], [-1]]


def test_a_batched_candidate_is_timed_padded_to_tritons_max_batch_size_and_answers_the_rows_it_was_given(tmp_path):
    """Triton's openvino backend pads every batch to max_batch_size; so does the runner that is benchmarked."""
    compiled = ov.Core().compile_model(ov.convert_model(str(conv_classifier(tmp_path / "m.onnx"))), "CPU")
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    plain, padded = OvRunner(compiled, ["scores"]), OvRunner(compiled, ["scores"], padded_batch=8)
    (expected,), (answer,) = plain.run({"x": x}), padded.run({"x": x})
    assert answer.shape == (2, 5) and np.allclose(answer, expected, atol=1e-6)
    assert list(padded.request.get_input_tensor(0).shape) == [8, 3, 8, 8]  # the compute of a full batch
    assert list(plain.request.get_input_tensor(0).shape) == [2, 3, 8, 8]


@pytest.mark.parametrize(("tuning", "padded_to"), [({"maxBatchSize": 4}, 4), (None, None)])
def test_the_compile_records_the_batch_openvino_was_timed_at(tmp_path, monkeypatch, tuning, padded_to):
    serve_registry(tmp_path / "registry", monkeypatch)
    body = compile_spec(conv_classifier(tmp_path / "m.onnx"), tmp_path / "registry", compilers=["OpenVINO"],
                        objective={"metric": "LatencyP95", "batchSize": 1}, batcherTuning=tuning)  # fmt: skip
    outcome = pipeline.run(
        CompileJobSpec.model_validate(body), tmp_path / "work", pipeline.Options(BenchmarkPlan(warmup=0, runs=3))
    )
    settings = {c.id: c.settings for c in outcome.manifest.candidates}
    assert settings["openvino-fp32"].get("paddedToBatch") == padded_to
