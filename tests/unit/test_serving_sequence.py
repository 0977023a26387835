"""Sequence batching when serving: the Triton config, with Triton's implicit state or the client's state."""

import pytest
from tensorkiln.builders.tritonconfig import UnservableScalar, config_dict, parse, render

from .test_serving_builders import rank1_sr, serving_spec_with, unbatched_manifest

STATE = [{"input": "state", "output": "stateN"}]
SEQUENCE = {"state": STATE}
ZEROS = {"dataType": "TYPE_FP32", "dims": [2, 1, 8], "zeroData": True, "name": "state-zeros"}
STATE_PAIR = {"inputName": "state", "outputName": "stateN", "dataType": "TYPE_FP32", "dims": [2, -1, 8],
              "initialState": [ZEROS]}  # fmt: skip
CLIENT_TENSORS = (["chunk", "sr"], ["out"])  # what clients send and get: the state is Triton's


def rendered(tmp_path, **sequence) -> dict:
    serving = serving_spec_with(maxBatchSize=0, sequenceBatching={**SEQUENCE, **sequence})
    triton = config_dict("stateful", rank1_sr(unbatched_manifest(tmp_path)), serving)
    parse(render(triton))  # Triton's own ModelConfig takes it
    return triton


def names(triton) -> tuple[list[str], list[str]]:
    return [t["name"] for t in triton["input"]], [t["name"] for t in triton["output"]]


def test_config_is_triton_implicit_state_from_zeros_with_the_direct_strategy(tmp_path):
    triton = rendered(tmp_path, strategy="Direct")
    assert triton["sequenceBatching"] == {
        "maxSequenceIdleMicroseconds": 1000000,
        "controlInput": [],
        "direct": {"maxQueueDelayMicroseconds": 0},
        "state": [STATE_PAIR],
    }
    assert "dynamicBatching" not in triton and triton["maxBatchSize"] == 0
    assert names(triton) == CLIENT_TENSORS
    assert "sequence_state" not in triton.get("parameters", {})


def test_the_oldest_strategy_takes_its_candidate_sequences_and_the_idle_limit(tmp_path):
    triton = rendered(tmp_path, maxSequenceIdleMicroseconds=5000000)  # Oldest, 64 sequences at once
    assert triton["sequenceBatching"]["maxSequenceIdleMicroseconds"] == 5000000
    assert triton["sequenceBatching"]["oldest"] == {"maxQueueDelayMicroseconds": 0, "maxCandidateSequences": 64}


def test_a_scalar_input_is_refused_in_a_sequence_batched_model(tmp_path):
    """Real Triton refuses the scalar's empty reshape there ("scalar tensors are not supported for stateful")."""
    serving = serving_spec_with(maxBatchSize=0, sequenceBatching=SEQUENCE)
    with pytest.raises(UnservableScalar, match="'sr' is a scalar .* export the model with that input of shape \\[1\\]"):
        config_dict("stateful", unbatched_manifest(tmp_path), serving)


def test_state_kept_by_the_client_is_sent_and_returned_and_the_spec_controls_are_left_to_triton(tmp_path):
    manifest = rank1_sr(unbatched_manifest(tmp_path))
    manifest.inputs.append(manifest.inputs[0].model_copy(update={"name": "START", "data_type": "FP32", "dims": [1]}))
    serving = serving_spec_with(maxBatchSize=0, sequenceBatching={**SEQUENCE, "stateKeptBy": "Client",
                                                                  "controlInputs": {"start": "START"}})  # fmt: skip
    triton = config_dict("stateful", manifest, serving)
    parse(render(triton))
    assert triton["sequenceBatching"]["controlInput"] == [
        {"name": "START", "control": [{"kind": "CONTROL_SEQUENCE_START", "fp32FalseTrue": [0, 1]}]}
    ]
    assert "state" not in triton["sequenceBatching"]
    assert names(triton) == (["chunk", "state", "sr"], ["out", "stateN"])


def test_an_engine_without_the_named_state_is_served_without_the_sequence_batcher(tmp_path):
    serving = serving_spec_with(maxBatchSize=0, sequenceBatching={"state": [{"input": "h", "output": "hn"}]})
    triton = config_dict("stateful", rank1_sr(unbatched_manifest(tmp_path)), serving)
    assert "sequenceBatching" not in triton and "dynamicBatching" not in triton
