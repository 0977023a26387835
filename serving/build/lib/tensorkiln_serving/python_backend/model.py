"""The Triton Python-backend model of the one engine no native backend serves: a SIMULATION.

A SimulatedServiceTime engine (origin "simulation" in the registry, see
tensorkiln_local.cluster.engine_seeds) stands in for a GPU-bound engine so the local node can show
queueing, batching and scaling: this model sleeps the engine's fixed service time per batch and
answers zeros. It computes nothing. Every real engine (TensorRT plan, onnxruntime, OpenVINO) is
served by Triton's native backends, locally as on a production cluster
(tensorkiln.builders.tritonconfig, PYTHON_SERVED).

`tensorkiln-engine-fetch --python-backend` lays out the model:

    <model>/config.pbtxt            backend: "python"
    <model>/1/model.py              this file
    <model>/1/engine.json           the manifest fields read here (tensorkiln_serving.enginefetch)
    <model>/1/simulation.json       the simulation's parameters, for the record

config.pbtxt `parameters` (string values): `engine`, optional, the engine digest the config was
rendered for (the model fails to load when engine.json names another engine). `execute` gets all
requests the dynamic batcher gathered and sleeps once for them, as a batch costs a GPU about one
execution; with max_batch_size 0 each request is a batch of its own.
"""

import json
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

ENGINE_JSON = "engine.json"
SERVED = "SimulatedServiceTime"


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        parameters = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        engine = json.loads((Path(args["model_repository"]) / args["model_version"] / ENGINE_JSON).read_text())
        check_engine(engine, config, parameters.get("engine", ""))
        self.batching = config.get("max_batch_size", 0) > 0
        self.run = simulated_engine(engine, engine["settings"]["serviceMilliseconds"] / 1000, self.batching)
        self.inputs = [tensor["name"] for tensor in engine["inputs"]]

    def execute(self, requests):
        if not self.batching:  # no batch axis: each request is a batch of its own
            return [response for request in requests for response in self._execute([request])]
        return self._execute(requests)

    def _execute(self, requests):
        if not self.batching:  # one request, at its full shapes
            parts = {name: [array] for name, array in self.run(0).items()}
        else:
            sizes = [len(pb_utils.get_input_tensor_by_name(r, self.inputs[0]).as_numpy()) for r in requests]
            parts = {name: np.split(array, np.cumsum(sizes)[:-1]) for name, array in self.run(sum(sizes)).items()}
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor(name, split[i]) for name, split in parts.items()])
            for i in range(len(requests))
        ]


def check_engine(engine: dict, config: dict, expected_digest: str) -> None:
    """Refuse what this model cannot serve as configured, before anything is loaded."""
    if expected_digest and expected_digest != engine["digest"]:
        raise ValueError(f"config.pbtxt is for engine {expected_digest}, but {ENGINE_JSON} holds {engine['digest']}")
    if engine["compiler"] != SERVED:
        raise ValueError(
            f"engine {engine['digest']} is a {engine['compiler']} engine; this python-backend model serves only the "
            f"{SERVED} simulation. Triton's native backends serve {engine['compiler']} engines "
            "(tensorkiln.builders.tritonconfig)"
        )
    limit, wanted = engine.get("maxBatchSize"), config.get("max_batch_size", 0)
    if not engine["profiles"].get("batched", True) and wanted > 0:
        raise ValueError(f"engine {engine['digest']} takes full shapes (compiled unbatched): max_batch_size must be 0")
    if limit and wanted > limit:
        raise ValueError(f"max_batch_size {wanted} exceeds the engine's profile maximum batch of {limit}")


def simulated_engine(engine: dict, service_s: float, batching: bool):
    """SIMULATION: a function from a batch size to the outputs, zeros, after `service_s` whatever the size."""
    outputs = [
        (
            tensor["name"],
            [max(d, 1) for d in tensor["dims"][1 if batching else 0 :]],
            pb_utils.triton_string_to_numpy(f"TYPE_{tensor['dataType']}"),
        )
        for tensor in engine["outputs"]
    ]

    def run(batch_size: int) -> dict:  # batch_size: unused unbatched
        time.sleep(service_s)
        batch = [batch_size] if batching else []
        return {name: np.zeros([*batch, *dims], data_type) for name, dims, data_type in outputs}

    return run
