"""Real Triton on local-0 serving a stateful model with the sequence batcher, through the operator: the
state kept per sequence by Triton's native onnxruntime backend (implicit state), two interleaved
sequences checked against onnxruntime run step by step with the state carried by hand. The model's
rate input is [1], not a scalar: Triton feeds no scalar to a model it does not batch."""

import uuid

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
from kubernetes import client
from tensorkiln_api import GROUP, VERSION
from tensorkiln_client.triton import service_address, until_routed
from tensorkiln_local.cluster import paths
from unit.compiler_support import stateful_model

from .helpers import wait_for

pytestmark = pytest.mark.cluster
NAME = "stateful"
STEPS = 4  # START, step, step, END


def spec(uri: str) -> dict:
    return {
        "source": {"uri": uri},
        # Unbatched (the state's batch is on axis 1): every dynamic dimension from dynamicDims. Triton's
        # zero state has its variable dimension 1, so a sequence's chunks are [1, 16].
        "shapes": {"dynamicDims": [
            {"input": "chunk", "axis": 0, "min": 1, "opt": 1, "max": 4},
            {"input": "state", "axis": 1, "min": 1, "opt": 1, "max": 4},
        ]},
        "hardware": {"mode": "Auto", "includeCPU": True, "exclude": ["*"]},  # the real CPU pool only
        "compile": {"precisions": ["FP32"], "compilers": {"cpu": ["OnnxRuntime"]},
                    "objective": {"metric": "LatencyP95"}},
        "serving": {
            "maxBatchSize": 0,
            "sequenceBatching": {"state": [{"input": "state", "output": "stateN"}],
                                 "maxSequenceIdleMicroseconds": 60_000_000},
        },
    }  # fmt: skip


@pytest.fixture
def staged_model():
    """The unit tests' stateful model, where local-0's compile pods read model files."""
    path = paths.SAMPLE_MODELS / "tests" / f"stateful-{uuid.uuid4().hex[:8]}.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    stateful_model(path, rate_shape=(1,))
    yield path
    path.unlink(missing_ok=True)


def ready(api, namespace):
    model = client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels",
                                                                      NAME)  # fmt: skip
    conditions = {c["type"]: c["status"] for c in model.get("status", {}).get("conditions", [])}
    return model if conditions.get("Ready") == "True" else None


def step(triton, corrid: int, index: int, chunk: np.ndarray, rate: int) -> np.ndarray:
    inputs = [grpcclient.InferInput("chunk", list(chunk.shape), "FP32"), grpcclient.InferInput("sr", [1], "INT64")]
    inputs[0].set_data_from_numpy(chunk)
    inputs[1].set_data_from_numpy(np.array([rate], np.int64))
    result = triton.infer(NAME, inputs, sequence_id=corrid, sequence_start=index == 0,
                          sequence_end=index == STEPS - 1, client_timeout=30)  # fmt: skip
    assert {o.name for o in result.get_response().outputs} == {"out"}  # the state stays in the server
    return result.as_numpy("out")


def test_two_interleaved_sequences_keep_their_own_state(api, operator, namespace, staged_model):
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceModel",
            "metadata": {"name": NAME, "namespace": namespace}, "spec": spec(f"file://{staged_model}")}  # fmt: skip
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", body)
    wait_for(lambda: ready(api, namespace), timeout=600, interval=3, what="compile, rollout and readiness")

    rng = np.random.default_rng(3)
    rates = {101: 8, 202: 16}
    chunks = {corrid: rng.standard_normal((STEPS, 1, 16)).astype(np.float32) for corrid in rates}
    reference = ort.InferenceSession(str(staged_model))
    expected = {}
    for corrid, sequence in chunks.items():
        state, outs = np.zeros((2, 1, 8), np.float32), []
        for chunk in sequence:
            out, state = reference.run(None, {"chunk": chunk, "state": state, "sr": np.array([rates[corrid]])})
            outs.append(out)
        expected[corrid] = outs

    address = service_address(api, namespace, NAME)
    triton = grpcclient.InferenceServerClient(address)
    until_routed(lambda: triton.is_model_ready(NAME))
    for index in range(STEPS):  # A0 B0 A1 B1 A2 B2 A3 B3
        for corrid in rates:
            served = step(triton, corrid, index, chunks[corrid][index], rates[corrid])
            np.testing.assert_allclose(served, expected[corrid][index], atol=1e-4, err_msg=f"{corrid}@{index}")

    # Ended, sequence 101 cannot go on without a new start: Triton refuses.
    with pytest.raises(Exception, match="START"):
        inputs = [grpcclient.InferInput("chunk", [1, 16], "FP32"), grpcclient.InferInput("sr", [1], "INT64")]
        inputs[0].set_data_from_numpy(chunks[101][1])
        inputs[1].set_data_from_numpy(np.array([8], np.int64))
        triton.infer(NAME, inputs, sequence_id=101, client_timeout=30)
