"""Batch semantics in the compiler, on a streaming model whose batch is on axis 1 of its state and
which takes a scalar: batched (serving.maxBatchSize > 0) it is refused by name; unbatched
(serving.maxBatchSize 0, CompileJob spec.batched false) it compiles, validates and benchmarks at
full shapes."""

import re

import numpy as np
import pytest
from onnx import TensorProto
from tensorkiln_api import AccuracyTolerance, CompileJobSpec, ModelIO, Precision, SequenceBatching, Shapes
from tensorkiln_compiler import pipeline
from tensorkiln_compiler.accuracy import compare
from tensorkiln_compiler.benchmark import BenchmarkPlan
from tensorkiln_compiler.candidates import Skipped
from tensorkiln_compiler.candidates.tensorrt import plan_build
from tensorkiln_compiler.data import load_dataset, synthesize
from tensorkiln_compiler.errors import InvalidInput
from tensorkiln_compiler.fetch import fetch
from tensorkiln_compiler.inspection import Tensor, check_batch_axes, inspect_model

from .compiler_support import (
    batch_sum_model,
    compile_spec,
    conv_classifier,
    nms_model,
    serve_registry,
    stateful_model,
)

DYNAMIC = [
    {"input": "chunk", "axis": 0, "min": 1, "opt": 2, "max": 4},
    {"input": "state", "axis": 1, "min": 1, "opt": 2, "max": 4},
]
UNBATCHED = "set spec.serving.maxBatchSize: 0 to serve full shapes"


def unbatched(path, **extra):
    return inspect_model(path, Shapes.model_validate({"dynamicDims": DYNAMIC, **extra}), 1, batched=False)


def refusal(call) -> str:
    with pytest.raises(InvalidInput) as error:
        call()
    assert error.value.reason == "ShapeMismatch"
    return error.value.message


def test_batched_refuses_a_batch_on_another_axis_naming_the_input_and_the_alternative(tmp_path):
    model = stateful_model(tmp_path / "m.onnx")
    sequence = SequenceBatching.model_validate({"state": [{"input": "state", "output": "stateN"}]})
    # Sequence-batched, or its state pair is what is refused first (tests/unit/test_compiler_sequence.py).
    message = refusal(lambda: inspect_model(model, Shapes.model_validate({"dynamicDims": []}), 1, sequence=sequence))
    assert message == (
        "spec.serving.maxBatchSize: input 'state' has batch on axis 1 ([2, batch, 8]); axis 0 must be the batch "
        f"when serving.maxBatchSize > 0; {UNBATCHED}"
    )


def tensor(name: str, *axes: int | str) -> Tensor:
    """A tensor as the graph writes it: sizes and dim_params."""
    dims = tuple(a if isinstance(a, int) else None for a in axes)
    return Tensor(name, TensorProto.FLOAT, dims, symbols=tuple(a if isinstance(a, str) else "" for a in axes))


@pytest.mark.parametrize(
    ("inputs", "outputs", "expected"),
    [
        (
            [tensor("chunk", "batch", 16), tensor("sr")],
            [],
            "spec.serving.maxBatchSize: input 'sr' is a scalar (rank 0) and has no batch axis; axis 0 of every "
            f"input and output must be the batch when serving.maxBatchSize > 0; {UNBATCHED}",
        ),
        (
            [tensor("chunk", "batch", 16)],
            [tensor("stateN", 2, "batch", 8)],
            f"output 'stateN' has batch on axis 1 ([2, batch, 8]); axis 0 must be the batch when "
            f"serving.maxBatchSize > 0; {UNBATCHED}",
        ),
        (
            [tensor("chunk", "batch", 16), tensor("state", "layers", "batch", 8)],
            [],
            "input 'state' has batch on axis 1 ([layers, batch, 8]); axis 0 must be the batch",
        ),
        (
            [tensor("chunk", "batch", 16)],
            [tensor("count")],
            "output 'count' is a scalar (rank 0)",
        ),
    ],
)
def test_batch_axis_refusals_name_the_tensor(inputs, outputs, expected):
    assert expected in refusal(lambda: check_batch_axes(inputs, outputs))


def test_batch_axis_checks_pass_what_triton_can_batch():
    square = tensor("x", "n", "n")  # its axis 1 carries the batch symbol, and so does its axis 0
    unknown = Tensor("y", TensorProto.FLOAT, ())  # the graph gives no shape: nothing to hold against it
    check_batch_axes([square, tensor("ids", "batch", "seq")], [tensor("logits", "n", 4), unknown])


def test_unbatched_ranges_every_axis_from_dynamic_dims(tmp_path):
    info = unbatched(stateful_model(tmp_path / "m.onnx"), batch={"min": 3})  # shapes.batch is ignored
    assert not info.batched
    assert {t.name: t.profile for t in info.inputs} == {
        "chunk": ((1, 16), (2, 16), (4, 16)),
        "state": ((2, 1, 8), (2, 2, 8), (2, 4, 8)),
        "sr": ((), (), ()),
    }
    assert [t.info().dims for t in info.inputs] == [[-1, 16], [2, -1, 8], []]
    message = refusal(lambda: inspect_model(info.path, Shapes.model_validate({"dynamicDims": DYNAMIC[1:]}), 1,
                                            batched=False))  # fmt: skip
    assert message == (
        "spec.shapes.dynamicDims: axis 0 of input 'chunk' is dynamic in [batch, 16]; add an entry with its min/opt/max"
    )


def test_axis_0_entries_are_the_batch_axis_only_when_batched(tmp_path):
    model = conv_classifier(tmp_path / "m.onnx")  # x[N,3,8,8]
    shapes = Shapes.model_validate({"dynamicDims": [{"input": "x", "axis": 0, "min": 1, "opt": 1, "max": 2}]})
    message = refusal(lambda: inspect_model(model, shapes, 1))
    assert message == (
        "spec.shapes.dynamicDims[0].axis: axis 0 is the batch axis; set spec.shapes.batch, or, if input 'x' has no "
        f"batch axis, {UNBATCHED}"
    )
    assert inspect_model(model, shapes, 1, batched=False).inputs[0].profile[2] == (2, 3, 8, 8)


def test_declared_io_is_the_full_shape_when_unbatched(tmp_path):
    model = stateful_model(tmp_path / "m.onnx")
    full = {
        "inputs": [
            {"name": "chunk", "dataType": "FP32", "dims": [-1, 16]},
            {"name": "state", "dataType": "FP32", "dims": [2, -1, 8]},
            {"name": "sr", "dataType": "INT64", "dims": []},
        ],
        "outputs": [
            {"name": "out", "dataType": "FP32", "dims": [-1, 8]},
            {"name": "stateN", "dataType": "FP32", "dims": [2, -1, 8]},
        ],
    }
    shapes = Shapes.model_validate({"dynamicDims": DYNAMIC})
    inspect_model(model, shapes, 1, ModelIO.model_validate(full), batched=False)
    full["inputs"][0]["dims"] = [16]  # as a batched model would declare it
    with pytest.raises(InvalidInput) as error:
        inspect_model(model, shapes, 1, ModelIO.model_validate(full), batched=False)
    assert error.value.message == (
        "spec.io.inputs[0] ('chunk') declares FP32 [16]; the graph has FP32 [-1, 16] (full shape, -1 where open)"
    )


def test_unbatched_data_is_one_sample_per_feed_at_full_shapes(tmp_path):
    inputs = unbatched(stateful_model(tmp_path / "m.onnx")).inputs
    data = synthesize(inputs, batched=False)
    assert {n: a.shape for n, a in data.validation.items()} == {"chunk": (4, 2, 16), "state": (4, 2, 2, 8), "sr": (4,)}
    (feed, *_) = data.batches(1)
    assert len(data.batches(1)) == 4 and len(data.calibration_samples()) == 12
    assert {n: a.shape for n, a in feed.items()} == {"chunk": (2, 16), "state": (2, 2, 8), "sr": ()}
    assert isinstance(feed["sr"], np.ndarray)  # a 0-d array, which every runtime takes, not a numpy scalar

    def load(**arrays):
        np.savez(tmp_path / "d.npz", **arrays)
        fetched = fetch(f"file://{tmp_path}/d.npz", tmp_path, field="spec.calibration.datasetUri", what="Data")
        return load_dataset(fetched, inputs, 256, batched=False)

    sr = np.full(8, 16000, np.int64)
    loaded = load(chunk=np.zeros((8, 3, 16)), state=np.zeros((8, 2, 3, 8)), sr=sr)
    assert loaded.calibration["chunk"].dtype == np.float32 and loaded.batches(1)[0]["sr"].shape == ()
    with pytest.raises(InvalidInput) as error:
        load(chunk=np.zeros((8, 3, 16)), state=np.zeros((2, 3, 8)), sr=sr)  # no sample index
    assert "input 'state' needs rank 4, the sample index, then the input's full shape" in error.value.message
    with pytest.raises(InvalidInput) as error:
        load(chunk=np.zeros((8, 3, 16)), state=np.zeros((8, 2, 9, 8)), sr=sr)
    assert "axis 1 of input 'state' accepts 1..4" in error.value.message


def test_unbatched_outputs_are_stacked_per_sample_scalars_included():
    reference = [[np.array(1.0), np.array([0.1, 0.9])], [np.array(2.0), np.array([0.8, 0.2])]]
    candidate = [[np.array(1.0), np.array([0.2, 0.8])], [np.array(2.0), np.array([0.7, 0.3])]]
    tolerance = AccuracyTolerance(maxAbsError=0.2, minCosineSimilarity=0.95)
    accuracy, rejection = compare(reference, candidate, tolerance, samples=2, synthetic=True, batched=False)
    assert rejection is None and accuracy.top1_agreement == 1.0  # [classes] per sample: stacked to [2, 2]


def test_tensorrt_profile_is_the_full_shapes(tmp_path):
    model = unbatched(stateful_model(tmp_path / "m.onnx"))
    plan = plan_build(model, Precision.FP32, "10.9.0")
    assert plan.profile == {
        "chunk": ((1, 16), (2, 16), (4, 16)),
        "state": ((2, 1, 8), (2, 2, 8), (2, 4, 8)),
        "sr": ((), (), ()),
    }
    with pytest.raises(Skipped):
        plan_build(model, Precision.BF16, "11.0.0")


def test_unbatched_compile_validates_and_benchmarks_full_shapes(tmp_path, monkeypatch):
    registry = serve_registry(tmp_path / "registry", monkeypatch)
    model = stateful_model(tmp_path / "m.onnx")
    body = compile_spec(
        model, tmp_path / "registry", compilers=["OnnxRuntime", "OpenVINO"], batched=False,
        shapes={"batch": {"min": 4}, "dynamicDims": DYNAMIC}, objective={"metric": "LatencyP95"},
    )  # fmt: skip
    spec = CompileJobSpec.model_validate(body)
    outcome = pipeline.run(spec, tmp_path / "work", pipeline.Options(BenchmarkPlan(warmup=0, runs=3)))

    manifest = outcome.manifest
    assert registry.engines() == [outcome.payload["engine"]["digest"]]
    assert not manifest.batched
    assert manifest.profiles == {
        "batched": False,
        "dynamicDims": DYNAMIC,
        "inputs": {
            "chunk": {"min": [1, 16], "opt": [2, 16], "max": [4, 16]},
            "state": {"min": [2, 1, 8], "opt": [2, 2, 8], "max": [2, 4, 8]},
            "sr": {"min": [], "opt": [], "max": []},
        },
    }
    assert [(t.name, t.dims) for t in manifest.outputs] == [("out", [-1, 8]), ("stateN", [2, -1, 8])]
    for candidate in manifest.candidates:
        assert candidate.status in ("Selected", "Passed"), (candidate.id, candidate.reason)
        assert candidate.accuracy.cosine_similarity > 0.9999 and candidate.accuracy.samples == 4
        assert [b.batch_size for b in candidate.benchmarks] == [1]  # one request, full shapes


@pytest.mark.parametrize(
    ("make", "objective", "expected"),
    [
        (  # rows per detection: caught at objective.batchSize already
            nms_model, 2,
            r"output 'selected_indices' \(\[detections, 3\]\) has size \d+ on axis 0 \(shape \[\d+, 3\]\) for a batch of 2 on",
        ),
        (  # one row whatever the batch: right at batch 1, caught at the profile's other end
            batch_sum_model, 1, r"output 'total' \(\[1, 4\]\) has size 1 on axis 0 \(shape \[1, 4\]\) for a batch of 4 on",
        ),
    ],
)  # fmt: skip
def test_batched_refuses_an_output_whose_axis_0_is_not_the_batch(tmp_path, monkeypatch, make, objective, expected):
    registry = serve_registry(tmp_path / "registry", monkeypatch)
    body = compile_spec(
        make(tmp_path / "m.onnx"), tmp_path / "registry", objective={"metric": "LatencyP95", "batchSize": objective}
    )
    message = refusal(lambda: pipeline.run(CompileJobSpec.model_validate(body), tmp_path / "work"))
    assert re.match(f"spec.serving.maxBatchSize: {expected} the reference run: its axis 0 is not the batch;", message)
    assert message.endswith(UNBATCHED) and registry.engines() == []


def test_unbatched_detector_compiles_though_its_detections_vary_per_sample(tmp_path, monkeypatch):
    registry = serve_registry(tmp_path / "registry", monkeypatch)
    one_image = [{"input": name, "axis": 0, "min": 1, "opt": 1, "max": 1} for name in ("boxes", "scores")]
    body = compile_spec(
        nms_model(tmp_path / "m.onnx"), tmp_path / "registry", batched=False,
        shapes={"dynamicDims": one_image}, objective={"metric": "LatencyP95"},
    )  # fmt: skip
    spec = CompileJobSpec.model_validate(body)
    outcome = pipeline.run(spec, tmp_path / "work", pipeline.Options(BenchmarkPlan(warmup=0, runs=3)))
    assert registry.engines() == [outcome.payload["engine"]["digest"]]
    for candidate in outcome.manifest.candidates:
        assert candidate.status in ("Selected", "Passed"), (candidate.id, candidate.reason)
        assert candidate.accuracy.max_abs_error == 0
