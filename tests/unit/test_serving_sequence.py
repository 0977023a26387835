"""Sequence batching when serving: the Triton config (native: Triton's implicit state; python-backend: the
runner's), and the python-backend runner keeping two interleaved sequences' state apart, checked against
onnxruntime run step by step with the state carried by hand."""

import importlib.util
import json
import sys
import types

import numpy as np
import onnxruntime as ort
import pytest
from google.protobuf import json_format
from tensorkiln.builders.tritonconfig import NATIVE, PYTHON_BACKEND, UnservableScalar, config_dict, parse, render
from tensorkiln.serving import enginefetch

from . import test_serving_enginefetch as enginefetch_tests
from .test_serving_builders import serving_spec_with, unbatched_manifest
from .test_serving_enginefetch import Response, Tensor, publish_unbatched

config, fetch = enginefetch_tests.config, enginefetch_tests.fetch  # fixtures: an engine published and laid out

STATE = [{"input": "state", "output": "stateN"}]
SEQUENCE = {"state": STATE}
ZEROS = {"dataType": "TYPE_FP32", "dims": [2, 1, 8], "zeroData": True, "name": "state-zeros"}
STATE_PAIR = {"inputName": "state", "outputName": "stateN", "dataType": "TYPE_FP32", "dims": [2, -1, 8],
              "initialState": [ZEROS]}  # fmt: skip
CLIENT_TENSORS = (["chunk", "sr"], ["out"])  # what clients send and get: the state is Triton's


def rank1_sr(manifest):
    """The test model exported with `sr` as [1]: a scalar cannot be served natively with the sequence batcher."""
    manifest = manifest.model_copy(deep=True)  # the fixture's manifest is shared
    manifest.inputs[:] = [t.model_copy(update={"dims": [1]}) if t.name == "sr" else t for t in manifest.inputs]
    if "sr" in manifest.profiles.get("inputs", {}):
        manifest.profiles["inputs"]["sr"] = {"min": [1], "opt": [1], "max": [1]}
    return manifest


def rendered(tmp_path, runtime, **sequence) -> dict:
    serving = serving_spec_with(maxBatchSize=0, sequenceBatching={**SEQUENCE, **sequence})
    manifest = unbatched_manifest(tmp_path)
    triton = config_dict("stateful", rank1_sr(manifest) if runtime == NATIVE else manifest, serving, runtime)
    parse(render(triton))  # Triton's own ModelConfig takes it
    return triton


def names(triton) -> tuple[list[str], list[str]]:
    return [t["name"] for t in triton["input"]], [t["name"] for t in triton["output"]]


def test_native_config_is_triton_implicit_state_from_zeros_with_the_direct_strategy(tmp_path):
    triton = rendered(tmp_path, NATIVE, strategy="Direct")
    assert triton["sequenceBatching"] == {
        "maxSequenceIdleMicroseconds": 1000000,
        "controlInput": [],
        "direct": {"maxQueueDelayMicroseconds": 0},
        "state": [STATE_PAIR],
    }
    assert "dynamicBatching" not in triton and triton["maxBatchSize"] == 0
    assert names(triton) == CLIENT_TENSORS
    assert "sequence_state" not in triton.get("parameters", {})


def test_python_backend_config_gives_the_runner_the_state_and_every_control(tmp_path):
    triton = rendered(tmp_path, PYTHON_BACKEND, maxSequenceIdleMicroseconds=5000000)  # Oldest, 64 sequences at once
    assert triton["sequenceBatching"] == {
        "maxSequenceIdleMicroseconds": 5000000,
        "controlInput": [
            {"name": "TENSORKILN_SEQUENCE_START",
             "control": [{"kind": "CONTROL_SEQUENCE_START", "int32FalseTrue": [0, 1]}]},
            {"name": "TENSORKILN_SEQUENCE_END", "control": [{"kind": "CONTROL_SEQUENCE_END", "int32FalseTrue": [0, 1]}]},
            {"name": "TENSORKILN_SEQUENCE_READY",
             "control": [{"kind": "CONTROL_SEQUENCE_READY", "int32FalseTrue": [0, 1]}]},
            {"name": "TENSORKILN_SEQUENCE_CORRID",
             "control": [{"kind": "CONTROL_SEQUENCE_CORRID", "dataType": "TYPE_UINT64"}]},
        ],
        "oldest": {"maxQueueDelayMicroseconds": 0, "maxCandidateSequences": 64},
    }  # fmt: skip
    assert json.loads(triton["parameters"]["sequence_state"]["stringValue"]) == [STATE_PAIR]
    assert names(triton) == CLIENT_TENSORS


def test_a_scalar_input_is_sent_as_1_locally_and_refused_natively_in_a_sequence_batched_model(tmp_path):
    """Real Triton refuses the scalar's empty reshape there ("scalar tensors are not supported for stateful")."""
    local = rendered(tmp_path, PYTHON_BACKEND)
    assert next(t for t in local["input"] if t["name"] == "sr") == {"name": "sr", "dataType": "TYPE_INT64", "dims": [1]}
    serving = serving_spec_with(maxBatchSize=0, sequenceBatching=SEQUENCE)
    with pytest.raises(UnservableScalar, match="'sr' is a scalar .* export the model with that input of shape \\[1\\]"):
        config_dict("stateful", unbatched_manifest(tmp_path), serving, NATIVE)


def test_state_kept_by_the_client_is_sent_and_returned_and_the_spec_controls_are_left_to_triton(tmp_path):
    manifest = rank1_sr(unbatched_manifest(tmp_path))
    manifest.inputs.append(manifest.inputs[0].model_copy(update={"name": "START", "data_type": "FP32", "dims": [1]}))
    serving = serving_spec_with(maxBatchSize=0, sequenceBatching={**SEQUENCE, "stateKeptBy": "Client",
                                                                  "controlInputs": {"start": "START"}})  # fmt: skip
    triton = config_dict("stateful", manifest, serving, NATIVE)
    parse(render(triton))
    assert triton["sequenceBatching"]["controlInput"] == [
        {"name": "START", "control": [{"kind": "CONTROL_SEQUENCE_START", "fp32FalseTrue": [0, 1]}]}
    ]
    assert "state" not in triton["sequenceBatching"]
    assert names(triton) == (["chunk", "state", "sr"], ["out", "stateN"])


def test_an_engine_without_the_named_state_is_served_without_the_sequence_batcher(tmp_path):
    serving = serving_spec_with(maxBatchSize=0, sequenceBatching={"state": [{"input": "h", "output": "hn"}]})
    triton = config_dict("stateful", unbatched_manifest(tmp_path), serving, PYTHON_BACKEND)
    assert "sequenceBatching" not in triton and "dynamicBatching" not in triton


# -- the python-backend runner, as Triton's stub drives it ----------------------------------------------


@pytest.fixture
def runner(monkeypatch):
    utils = types.SimpleNamespace(
        Tensor=Tensor, InferenceResponse=Response, TritonError=str,
        get_input_tensor_by_name=lambda request, name: request[name],
        triton_string_to_numpy=lambda t: {"TYPE_FP32": np.float32, "TYPE_INT64": np.int64}[t],
    )  # fmt: skip
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", utils)
    spec = importlib.util.spec_from_file_location("tensorkiln_runner", enginefetch.RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_sequence_runner(runner, tmp_path, fetch, sequence: bool = True):
    digest, onnx_path = publish_unbatched(tmp_path)
    assert fetch(digest, "--python-backend")[0] == 0
    if sequence:
        triton = rendered(tmp_path, PYTHON_BACKEND)
    else:  # the client keeps the state
        plain = serving_spec_with(maxBatchSize=0)
        triton = config_dict("stateful", unbatched_manifest(tmp_path), plain, PYTHON_BACKEND)
    # What Triton hands the Python backend: the ModelConfig as JSON with the protobuf field names.
    as_triton = json_format.MessageToDict(parse(render(triton)), preserving_proto_field_name=True)
    model = runner.TritonPythonModel()
    model.initialize({"model_config": json.dumps(as_triton), "model_repository": str(tmp_path / "models" / "tiny"),
                      "model_version": "1"})  # fmt: skip
    return model, onnx_path


def request(corrid: int, start: bool, end: bool, chunk, sr: int) -> dict:
    """A request of sequence `corrid` as Triton passes it on: the client's inputs, and the controls it fills."""
    feeds = {
        "chunk": chunk,
        "sr": np.array(sr, np.int64),
        "TENSORKILN_SEQUENCE_START": np.array([int(start)], np.int32),
        "TENSORKILN_SEQUENCE_END": np.array([int(end)], np.int32),
        "TENSORKILN_SEQUENCE_READY": np.array([1], np.int32),
        "TENSORKILN_SEQUENCE_CORRID": np.array([corrid], np.uint64),
    }
    return {name: Tensor(name, array) for name, array in feeds.items()}


def test_runner_keeps_two_interleaved_sequences_apart(tmp_path, fetch, runner):
    model, onnx_path = load_sequence_runner(runner, tmp_path, fetch)
    rng = np.random.default_rng(7)
    steps = 4  # START, step, step, END
    chunks = {corrid: rng.standard_normal((steps, 1, 16)).astype(np.float32) for corrid in (11, 2**40 + 3)}
    rates = {11: 8, 2**40 + 3: 16}

    # By hand: onnxruntime, each sequence from zeros, its state output fed back.
    reference = ort.InferenceSession(str(onnx_path))
    expected = {}
    for corrid, sequence in chunks.items():
        state, outs = np.zeros((2, 1, 8), np.float32), []
        for chunk in sequence:
            out, state = reference.run(None, {"chunk": chunk, "state": state, "sr": np.array(rates[corrid], np.int64)})
            outs.append(out)
        expected[corrid] = outs

    # Interleaved: A0 B0 A1 B1 A2 B2 A3 B3, one request per execute, and then both in one execute.
    got = {corrid: [] for corrid in chunks}
    order = [(corrid, step) for step in range(steps) for corrid in chunks]
    for corrid, step in order[:6]:
        (response,) = model.execute([request(corrid, step == 0, step == steps - 1, chunks[corrid][step],
                                             rates[corrid])])  # fmt: skip
        assert response.error is None, response.error
        assert set(response.outputs) == {"out"}  # the state stays in the server
        got[corrid].append(response.outputs["out"])
    last = [request(corrid, False, True, chunks[corrid][steps - 1], rates[corrid]) for corrid in chunks]
    for corrid, response in zip(chunks, model.execute(last)):
        assert response.error is None, response.error
        got[corrid].append(response.outputs["out"])

    for corrid in chunks:
        assert len(got[corrid]) == steps
        for step in range(steps):
            np.testing.assert_allclose(got[corrid][step], expected[corrid][step], atol=1e-5, err_msg=f"{corrid}@{step}")
    assert model.sequences.live == {}  # both ended: their state is dropped

    # Ended, a sequence has no state to continue from; restarted, it begins from zeros again.
    (response,) = model.execute([request(11, False, False, chunks[11][1], 8)])
    assert "sequence 11 has no state: it was never started (sequence_start)" in response.error
    (response,) = model.execute([request(11, True, False, chunks[11][0], 8)])
    np.testing.assert_allclose(response.outputs["out"], expected[11][0], atol=1e-5)


def test_runner_drops_a_sequence_idle_past_the_limit_and_skips_requests_not_ready(tmp_path, fetch, runner):
    model, _ = load_sequence_runner(runner, tmp_path, fetch)
    now = [0.0]
    model.sequences.clock = lambda: now[0]
    chunk = np.ones((1, 16), np.float32)
    assert model.execute([request(5, True, False, chunk, 8)])[0].error is None
    not_ready = request(5, False, False, chunk, 8)
    not_ready["TENSORKILN_SEQUENCE_READY"] = Tensor("r", np.array([0], np.int32))
    assert model.execute([not_ready])[0].outputs == {}
    now[0] = 1.5  # past max_sequence_idle_microseconds (1 s): Triton has ended the sequence
    assert "sequence 5 has no state" in model.execute([request(5, False, False, chunk, 8)])[0].error


def test_runner_gives_an_unbatched_engine_its_scalar_sent_as_1(tmp_path, fetch, runner):
    """Triton refuses a scalar's empty reshape with max_batch_size 0, so `sr` arrives as [1] (make matrix,
    silero-vad): the runner hands the engine its scalar, and the answer is onnxruntime's."""
    model, onnx_path = load_sequence_runner(runner, tmp_path, fetch, sequence=False)
    chunk, state = np.ones((1, 16), np.float32), np.zeros((2, 1, 8), np.float32)
    sent = {"chunk": chunk, "state": state, "sr": np.array([16], np.int64)}
    shapes, engine_run = [], model.run
    model.run = lambda feeds: shapes.append(feeds["sr"].shape) or engine_run(feeds)
    (response,) = model.execute([{name: Tensor(name, array) for name, array in sent.items()}])
    assert response.error is None, response.error
    assert shapes == [()]  # onnxruntime takes [1] for a scalar, OpenVINO need not
    out, state_n = ort.InferenceSession(str(onnx_path)).run(None, {**sent, "sr": np.array(16, np.int64)})
    np.testing.assert_allclose(response.outputs["out"], out, atol=1e-5)
    np.testing.assert_allclose(response.outputs["stateN"], state_n, atol=1e-5)
