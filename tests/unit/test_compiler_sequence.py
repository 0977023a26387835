"""The compiler's side of serving.sequenceBatching: the state pairs and controls it names are in the graph,
and a state pair in a model served batched without it is refused by name, with the fix."""

import pytest
from onnx import TensorProto
from tensorkiln_api import SequenceBatching, Shapes
from tensorkiln_compiler.errors import InvalidInput
from tensorkiln_compiler.inspection import Tensor, check_sequence_tensors, inspect_model, state_pairs

from .compiler_support import conv_classifier, stateful_model
from .test_compiler_batching import DYNAMIC, tensor

FULL = Shapes.model_validate({"dynamicDims": DYNAMIC})


def sequence(**fields) -> SequenceBatching:
    return SequenceBatching.model_validate({"state": [{"input": "state", "output": "stateN"}], **fields})


def refused(call) -> InvalidInput:
    with pytest.raises(InvalidInput) as error:
        call()
    return error.value


def test_the_stateful_model_compiles_its_graph_with_the_state_named(tmp_path):
    model = stateful_model(tmp_path / "m.onnx")
    info = inspect_model(model, FULL, 1, batched=False, sequence=sequence())
    assert [t.name for t in info.inputs] == ["chunk", "state", "sr"]


def test_a_state_batched_model_without_sequence_batching_is_refused_naming_the_pair_and_the_fix(tmp_path):
    error = refused(lambda: inspect_model(stateful_model(tmp_path / "m.onnx"), Shapes(), 1))
    assert error.reason == "ShapeMismatch"
    assert error.message == (
        "spec.serving.sequenceBatching: input 'state' and output 'stateN' look like a recurrent state ([2, batch, "
        "8]), but the model is served batched without sequence batching: the dynamic batcher would mix one "
        "stream's requests with others' and not keep them in order. Set spec.serving.sequenceBatching.state: "
        "[{input: state, output: stateN}] (Triton keeps the state per sequence), or, if each request carries its "
        "own state, set spec.serving.maxBatchSize: 0 to serve full shapes"
    )
    inspect_model(stateful_model(tmp_path / "m.onnx"), FULL, 1, batched=False)  # unbatched: the client's state


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {"state": [{"input": "hidden", "output": "stateN"}]},
            "spec.serving.sequenceBatching.state[0].input: the model has no input 'hidden' (inputs: chunk, state, "
            "sr); a sequence-batched model takes its state as an input and gives the next as an output",
        ),
        (
            {"state": [{"input": "state", "output": "hiddenN"}]},
            "spec.serving.sequenceBatching.state[0].output: the model has no output 'hiddenN' (outputs: out, stateN)",
        ),
        (
            {"state": [{"input": "chunk", "output": "out"}]},
            "spec.serving.sequenceBatching.state[0]: output 'out' is FP32 [batch, 8], but input 'chunk' is FP32 "
            "[batch, 16]; the state output of one request is the state input of the next",
        ),
        (
            {"controlInputs": {"start": "START"}},
            "spec.serving.sequenceBatching.controlInputs.start: the model has no input 'START' (inputs: chunk, "
            "state, sr)",
        ),
        (
            {"controlInputs": {"end": "sr"}},
            "spec.serving.sequenceBatching.controlInputs.end: input 'sr' is INT64; Triton fills this control in "
            "FP32, INT32, BOOL only",
        ),
    ],
)
def test_a_sequence_batched_spec_the_graph_does_not_fit_is_refused_by_field(tmp_path, fields, expected):
    model = stateful_model(tmp_path / "m.onnx")
    error = refused(lambda: inspect_model(model, FULL, 1, batched=False, sequence=sequence(**fields)))
    assert (error.reason, error.message) == ("IOMismatch", expected)


def test_a_model_without_state_is_refused_sequence_batching(tmp_path):
    error = refused(lambda: inspect_model(conv_classifier(tmp_path / "m.onnx"), Shapes(), 1, sequence=sequence()))
    assert error.message.startswith("spec.serving.sequenceBatching.state[0].input: the model has no input 'state'")


def test_state_pairs_are_alike_in_type_and_shape_and_named_so():
    h0, hn = tensor("h0", "layers", "batch", 64), tensor("hn", "layers", "batch", 64)
    past, present = tensor("past_key", "batch", 8, "seq", 64), tensor("present_key", "batch", 8, "seq", 64)
    assert [(i.name, o.name) for i, o in state_pairs([h0, past], [hn, present])] == [
        ("h0", "hn"), ("past_key", "present_key"),
    ]  # fmt: skip
    # A classifier's input and output are not alike; nor are names that say nothing of state, nor types.
    assert state_pairs([tensor("x", "n", 4)], [tensor("y", "n", 4), tensor("logits", "n", 4)]) == []
    int_hn = Tensor("hn", TensorProto.INT64, hn.dims, symbols=hn.symbols)
    assert state_pairs([h0], [int_hn]) == []
    check_sequence_tensors(SequenceBatching.model_validate({"state": [{"input": "h0", "output": "hn"}]}), [h0], [hn])
