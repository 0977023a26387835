import pytest
from tensorkiln_api import ModelIO, Shapes
from tensorkiln_compiler.errors import InvalidInput
from tensorkiln_compiler.inspection import inspect_model

from .compiler_support import conv_classifier, ml_only_model, single_op_model, zipmap_classifier

BATCH = {"min": 1, "opt": 2, "max": 4}


def shapes(**extra) -> Shapes:
    return Shapes.model_validate({"batch": BATCH, **extra})


def reason_and_message(path, spec_shapes, batch_size=2) -> tuple[str, str]:
    with pytest.raises(InvalidInput) as error:
        inspect_model(path, spec_shapes, batch_size)
    return error.value.reason, error.value.message


def test_resolves_profile_and_io(tmp_path):
    info = inspect_model(conv_classifier(tmp_path / "m.onnx", opset=11), shapes(), 2)
    assert info.opset == 11
    (x,) = info.inputs
    assert x.dims == (None, 3, 8, 8)
    assert x.profile == ((1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 8, 8))
    assert x.shape(4) == (4, 3, 8, 8)
    assert x.info().model_dump(by_alias=True) == {"name": "x", "dataType": "FP32", "dims": [-1, 3, 8, 8]}
    assert [t.name for t in info.outputs] == ["scores"]


@pytest.mark.parametrize("batch", [{"min": 1, "opt": 8, "max": 32}, {"min": 1, "opt": 1, "max": 1}])
def test_a_static_batch_axis_is_served_unbatched_only(tmp_path, batch):
    # Triton's onnxruntime backend refuses [1, 3, 8, 8] under max_batch_size 1 as well: "for the model to
    # support batching ... the first dimension must be -1".
    model = conv_classifier(tmp_path / "m.onnx", batch=1)
    reason, message = reason_and_message(model, Shapes.model_validate({"batch": batch}), 1)
    assert reason == "ShapeMismatch"
    assert message.startswith("spec.serving.maxBatchSize: input 'x' has a static batch dimension of 1 ([1, 3, 8, 8])")
    assert "set spec.serving.maxBatchSize: 0 to serve full shapes" in message
    unbatched = inspect_model(model, Shapes.model_validate({"batch": batch}), 1, batched=False)
    assert unbatched.inputs[0].profile[2] == (1, 3, 8, 8)


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"input": "x", "axis": 5, "min": 1, "opt": 1, "max": 1}, "spec.shapes.dynamicDims[0].axis: 5 is out of range"),
        (
            {"input": "y", "axis": 2, "min": 8, "opt": 8, "max": 8},
            "spec.shapes.dynamicDims[0].input: the model has no input 'y'",
        ),
        (
            {"input": "x", "axis": 0, "min": 1, "opt": 1, "max": 1},
            "spec.shapes.dynamicDims[0].axis: axis 0 is the batch axis",
        ),
        (
            {"input": "x", "axis": 2, "min": 4, "opt": 8, "max": 16},
            "spec.shapes.dynamicDims[0]: axis 2 of input 'x' is static (8)",
        ),
    ],
)
def test_dynamic_dims_entries_must_fit_the_model(tmp_path, entry, expected):
    reason, message = reason_and_message(conv_classifier(tmp_path / "m.onnx"), shapes(dynamicDims=[entry]))
    assert reason == "ShapeMismatch" and message.startswith(expected)


def test_dynamic_axis_without_entry(tmp_path):
    model = single_op_model(tmp_path / "m.onnx", "Relu")
    assert inspect_model(model, shapes(), 2).inputs[0].profile[1] == (2, 4)
    import onnx

    m = onnx.load(str(model))
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "features"
    onnx.save(m, str(model))
    reason, message = reason_and_message(model, shapes())
    assert message.startswith("spec.shapes.dynamicDims: axis 1 of input 'x' is dynamic")
    entry = {"input": "x", "axis": 1, "min": 2, "opt": 4, "max": 6}
    assert inspect_model(model, shapes(dynamicDims=[entry]), 2).inputs[0].profile == ((1, 2), (2, 4), (4, 6))


def test_objective_batch_outside_profile(tmp_path):
    reason, message = reason_and_message(conv_classifier(tmp_path / "m.onnx"), shapes(), batch_size=8)
    assert message.startswith("spec.objective.batchSize: 8 is outside spec.shapes.batch")


def test_malformed_model(tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"definitely not protobuf \xff\xfe")
    reason, message = reason_and_message(tmp_path / "m.onnx", shapes())
    assert reason == "ModelMalformed" and message.startswith("spec.source.uri: m.onnx")


def test_unsupported_opset(tmp_path):
    reason, message = reason_and_message(single_op_model(tmp_path / "m.onnx", "Relu", opset=99), shapes())
    assert reason == "UnsupportedOpset" and "opset 99" in message


def test_a_model_importing_only_ai_onnx_ml_has_no_default_opset_and_is_accepted(tmp_path):
    info = inspect_model(ml_only_model(tmp_path / "m.onnx"), shapes(), 2)
    assert info.opset is None and [t.name for t in info.outputs] == ["y"]


def test_unknown_operator(tmp_path):
    reason, message = reason_and_message(single_op_model(tmp_path / "m.onnx", "FrobnicateTensor"), shapes())
    assert reason == "UnsupportedOperator" and "FrobnicateTensor" in message


def io(inputs, outputs=(("scores", "FP32", [5]),)) -> ModelIO:
    def tensors(entries):
        return [{"name": n, "dataType": t, "dims": d} for n, t, d in entries]

    return ModelIO.model_validate({"inputs": tensors(inputs), "outputs": tensors(outputs)})


def test_declared_io_that_matches_the_graph_passes(tmp_path):
    model = conv_classifier(tmp_path / "m.onnx")
    assert inspect_model(model, shapes(), 2, io([("x", "FP32", [3, 8, 8])])).inputs[0].name == "x"
    assert inspect_model(model, shapes(), 2, io([("x", "FP32", [3, -1, 8])])).inputs[0].name == "x"


@pytest.mark.parametrize(
    ("declared", "expected"),
    [
        (
            io([("images", "FP32", [3, 8, 8])]),
            "spec.io.inputs declares ['images']; the graph's inputs are ['x']",
        ),
        (
            io([("x", "FP16", [3, 8, 8])]),
            "spec.io.inputs[0] ('x') declares FP16 [3, 8, 8]; the graph has FP32 [3, 8, 8] "
            "(dims without the batch axis, -1 where open)",
        ),
        (
            io([("x", "FP32", [3, 224, 224])]),
            "spec.io.inputs[0] ('x') declares FP32 [3, 224, 224]; the graph has FP32 [3, 8, 8] "
            "(dims without the batch axis, -1 where open)",
        ),
        (
            io([("x", "FP32", [3, 8, 8])], [("scores", "FP32", [1000])]),
            "spec.io.outputs[0] ('scores') declares FP32 [1000]; the graph has FP32 [5] "
            "(dims without the batch axis, -1 where open)",
        ),
    ],
)
def test_declared_io_contradicting_the_graph_is_refused_naming_both(tmp_path, declared, expected):
    with pytest.raises(InvalidInput) as error:
        inspect_model(conv_classifier(tmp_path / "m.onnx"), shapes(), 2, declared)
    assert (error.value.reason, error.value.message) == ("IOMismatch", expected)


def test_non_tensor_output_is_refused_with_the_zipmap_hint(tmp_path):
    reason, message = reason_and_message(zipmap_classifier(tmp_path / "m.onnx"), shapes())
    assert reason == "UnsupportedTensorType"
    assert message == (
        "spec.source.uri: output 'output_probability' is a sequence of maps, not a tensor; Triton serves tensors "
        "only; export with zipmap=False (skl2onnx options={id(model): {'zipmap': False}})"
    )


def test_type_names_of_non_tensors():
    from onnx import TensorProto, helper
    from tensorkiln_compiler.inspection import _type_name

    tensor = helper.make_tensor_type_proto(TensorProto.FLOAT, None)
    assert _type_name(helper.make_sequence_type_proto(tensor)) == "a sequence of tensors"
    assert _type_name(helper.make_map_type_proto(TensorProto.STRING, tensor)) == "a map"
    nested = helper.make_sequence_type_proto(helper.make_sequence_type_proto(helper.make_optional_type_proto(tensor)))
    assert _type_name(nested) == "a sequence of sequences of optionals"
