"""The OpenVINO candidate converts with the profile's input shapes, so graphs whose ranks are only
known from their inputs' shapes (silero-vad's If/LSTM, skl2onnx's Softmax-9) still convert."""

import onnx
import openvino as ov
from onnx import TensorProto, helper
from tensorkiln.api import CompileJobSpec, Shapes
from tensorkiln_compiler import pipeline
from tensorkiln_compiler.benchmark import BenchmarkPlan
from tensorkiln_compiler.candidates import BuildContext
from tensorkiln_compiler.candidates.openvino import input_shapes
from tensorkiln_compiler.inspection import inspect_model

from .compiler_support import compile_spec, serve_registry, stateful_model

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


def test_converts_a_graph_whose_ranks_need_the_input_shapes(tmp_path, monkeypatch):
    registry = serve_registry(tmp_path / "registry", monkeypatch)
    model = squeeze_softmax(tmp_path / "m.onnx")
    body = compile_spec(
        model, tmp_path / "registry", compilers=["OpenVINO"], batched=False,
        shapes={"dynamicDims": ROWS_2_TO_4}, objective={"metric": "LatencyP95"},
    )  # fmt: skip
    outcome = pipeline.run(
        CompileJobSpec.model_validate(body), tmp_path / "work", pipeline.Options(BenchmarkPlan(warmup=0, runs=3))
    )
    statuses = {c.id: (c.status, c.reason) for c in outcome.manifest.candidates}
    assert statuses["openvino-fp32"][0] in ("Selected", "Passed"), statuses
    assert registry.engines() == [outcome.payload["engine"]["digest"]]


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
