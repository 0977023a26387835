"""A Triton Python-backend model that serves a TensorKiln engine with OpenVINO or onnxruntime.

Why it exists: the nvidia-pytriton wheel, which is where the local node's Triton comes from,
ships only the python backend. So on local-0 an OpenVINO engine (model.xml + model.bin) or an
onnxruntime engine (model.onnx) is served by this model, which runs the engine in-process. A
real cluster runs the NGC image `nvcr.io/nvidia/tritonserver`, whose native backends serve
the engine directly (`backend: "openvino"`, `platform: "onnxruntime_onnx"`,
`platform: "tensorrt_plan"`); there the operator renders that config and this file is unused.
TensorRT plans are refused here: they need the NGC image and a GPU.

`tensorkiln-engine-fetch --python-backend` lays out the model:

    <model>/config.pbtxt            backend: "python"
    <model>/1/model.py              this file
    <model>/1/engine.json           the manifest fields read here (tensorkiln.serving.enginefetch)
    <model>/1/model.xml, model.bin  or model.onnx

config.pbtxt `parameters` (string values; `default_model_filename` must stay unset or
"model.py": for the python backend it names this file):
    intra_op_threads  threads per model instance: onnxruntime's intra_op_num_threads, OpenVINO's
                      INFERENCE_NUM_THREADS (default 1; scale out with instance_group count)
    engine_file       the engine file in the version directory (default model.xml for OpenVINO,
                      model.onnx for onnxruntime)
    engine            optional: the engine digest the config was rendered for; the model fails
                      to load when engine.json names another engine

The engine runs with the settings its compile measured (the selected candidate's `settings`:
OpenVINO's `config` and `inferencePrecision`, onnxruntime's graph optimisation level).
`execute` gets all requests the dynamic batcher gathered: it concatenates them along the batch
axis, runs the engine once and splits the outputs, so batching pays off as it does natively.
With max_batch_size 0 there is no batch axis: each request runs alone, at its full shapes.

Sequence batching with the state kept by Triton (implicit state): the Python backend has no implicit
state of its own (implicit_state_management.md: only the onnxruntime, TensorRT and PyTorch backends),
so the config's `sequence_state` parameter lists the state pairs (Triton's State fields) and this model
keeps them per sequence, keyed by the CONTROL_SEQUENCE_CORRID control input: zeros (initial_state) on
the request whose CONTROL_SEQUENCE_START is true, the engine's state output fed back as its state input
on the next request, dropped after the request whose CONTROL_SEQUENCE_END is true or once the sequence
has been idle longer than max_sequence_idle_microseconds (Triton has ended it then). Each request of a
sequence runs alone; a request whose CONTROL_SEQUENCE_READY is false (a slot Triton filled) is skipped.
"""

import json
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

ENGINE_JSON = "engine.json"
# What this model serves. SimulatedServiceTime is a SIMULATION (origin "simulation" in the
# registry, see tensorkiln_local.cluster.engine_seeds): it sleeps a fixed time per batch and
# answers zeros, standing in for a GPU-bound engine so the local node can show scaling.
ENGINE_FILES = {"OpenVINO": "model.xml", "OnnxRuntime": "model.onnx", "SimulatedServiceTime": "simulation.json"}


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        parameters = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        version_dir = Path(args["model_repository"]) / args["model_version"]
        engine = json.loads((version_dir / ENGINE_JSON).read_text())
        check_engine(engine, config, parameters.get("engine", ""))
        self.states = json.loads(parameters.get("sequence_state", "[]"))
        kept = {state["inputName"] for state in self.states}
        self.inputs = [tensor["name"] for tensor in engine["inputs"] if tensor["name"] not in kept]
        # The scalars of a model Triton does not batch (max_batch_size 0, or the sequence batcher) come as [1]:
        # Triton refuses their empty reshape there (builders.tritonconfig).
        self.scalars = {tensor["name"] for tensor in engine["inputs"] if not tensor["dims"]}
        self.outputs = {tensor["name"] for tensor in config["output"]} if "output" in config else None
        self.batching = config.get("max_batch_size", 0) > 0
        engine_file = version_dir / parameters.get("engine_file", ENGINE_FILES[engine["compiler"]])
        self.run = open_engine(engine, engine_file, int(parameters.get("intra_op_threads", "1")), self.batching)
        self.sequences = Sequences(config.get("sequence_batching", {}), self.states) if self.states else None

    def execute(self, requests):
        if self.sequences is not None:  # implicit state: each request runs alone, with its sequence's state
            return [self._execute_in_sequence(request) for request in requests]
        if not self.batching:  # full shapes, no batch axis to join requests along: each runs alone
            return [response for request in requests for response in self._execute([request])]
        return self._execute(requests)

    def _execute_in_sequence(self, request):
        try:
            control = self.sequences.controls(request)
            if not control["ready"]:
                return pb_utils.InferenceResponse([])
            state = self.sequences.state(control)
            feeds = {name: pb_utils.get_input_tensor_by_name(request, name).as_numpy() for name in self.inputs}
            feeds |= {name: feeds[name].reshape(()) for name in self.scalars if name in feeds}
            outputs = self.run({**feeds, **state})
            self.sequences.update(control, outputs)
        except Exception as error:
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(f"{type(error).__name__}: {error}"))
        return pb_utils.InferenceResponse([pb_utils.Tensor(name, array) for name, array in self._served(outputs)])

    def _served(self, outputs: dict):
        return [(name, array) for name, array in outputs.items() if self.outputs is None or name in self.outputs]

    def _execute(self, requests):
        try:
            feeds = {
                name: [pb_utils.get_input_tensor_by_name(request, name).as_numpy() for request in requests]
                for name in self.inputs
            }
            if self.batching:
                ends = np.cumsum([len(array) for array in feeds[self.inputs[0]]])[:-1]
                outputs = self.run({name: np.concatenate(arrays) for name, arrays in feeds.items()})
                parts = {name: np.split(array, ends) for name, array in outputs.items()}
            else:  # one request, at its full shapes
                alone = {
                    name: arrays[0].reshape(()) if name in self.scalars else arrays[0] for name, arrays in feeds.items()
                }
                parts = {name: [array] for name, array in self.run(alone).items()}
        except Exception as error:  # the whole batch failed: every request gets the reason
            message = pb_utils.TritonError(f"{type(error).__name__}: {error}")
            return [pb_utils.InferenceResponse(error=message) for _ in requests]
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor(name, split[i]) for name, split in self._served(parts)])
            for i in range(len(requests))
        ]


CONTROL_FIELDS = {
    "CONTROL_SEQUENCE_START": "start",
    "CONTROL_SEQUENCE_END": "end",
    "CONTROL_SEQUENCE_READY": "ready",
    "CONTROL_SEQUENCE_CORRID": "correlation_id",
}


class Sequences:
    """The implicit state of every live sequence, by correlation id (see the module docstring)."""

    def __init__(self, sequence_batching: dict, states: list[dict], clock=time.monotonic):
        self.pairs = [(s["inputName"], s["outputName"]) for s in states]
        self.initial = {
            s["inputName"]: np.zeros(s["initialState"][0]["dims"], pb_utils.triton_string_to_numpy(s["dataType"]))
            for s in states
        }
        self.idle_s = int(sequence_batching.get("max_sequence_idle_microseconds", 1_000_000)) / 1e6
        self.clock, self.live = clock, {}  # correlation id -> (last request time, {state input: array})
        self.inputs = {}  # control field -> (input name, true value or None for the correlation id)
        for control_input in sequence_batching.get("control_input", []):
            for control in control_input["control"]:
                field = CONTROL_FIELDS[control.get("kind", "CONTROL_SEQUENCE_START")]  # START is proto3's 0
                values = next((control[k] for k in ("int32_false_true", "fp32_false_true", "bool_false_true")
                               if control.get(k)), None)  # fmt: skip
                self.inputs[field] = (control_input["name"], None if values is None else values[1])
        missing = [f for f in ("start", "end", "correlation_id") if f not in self.inputs]
        if missing:
            raise ValueError(f"sequence_state needs the {', '.join(missing)} control inputs in sequence_batching")

    def controls(self, request) -> dict:
        found = {}
        for field, (name, true) in self.inputs.items():
            value = pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0]
            found[field] = value.item() if true is None else bool(value == true)
        found.setdefault("ready", True)
        return found

    def state(self, control: dict) -> dict:
        """The sequence's state inputs: zeros when it starts, else what its last request left."""
        now, key = self.clock(), control["correlation_id"]
        for stale in [k for k, (seen, _) in self.live.items() if now - seen > self.idle_s]:
            del self.live[stale]  # Triton has ended it (max_sequence_idle_microseconds)
        if control["start"]:
            self.live[key] = (now, {name: array.copy() for name, array in self.initial.items()})
        elif key not in self.live:
            raise ValueError(
                f"sequence {key} has no state: it was never started (sequence_start), ended, or idle longer than "
                f"{self.idle_s:g} s"
            )
        return self.live[key][1]

    def update(self, control: dict, outputs: dict) -> None:
        key = control["correlation_id"]
        if control["end"]:
            self.live.pop(key, None)
        else:
            self.live[key] = (self.clock(), {name: outputs[output] for name, output in self.pairs})


def check_engine(engine: dict, config: dict, expected_digest: str) -> None:
    """Refuse what this model cannot serve as configured, before anything is loaded."""
    if expected_digest and expected_digest != engine["digest"]:
        raise ValueError(f"config.pbtxt is for engine {expected_digest}, but {ENGINE_JSON} holds {engine['digest']}")
    if engine["compiler"] not in ENGINE_FILES:
        raise ValueError(
            f"engine {engine['digest']} is a {engine['compiler']} engine; this python-backend model serves "
            f"{' and '.join(ENGINE_FILES)} engines only. Serve TensorRT plans with the NGC tritonserver image "
            '(platform: "tensorrt_plan") on the GPU they were built for'
        )
    limit, wanted = engine.get("maxBatchSize"), config.get("max_batch_size", 0)
    if not engine["profiles"].get("batched", True) and wanted > 0:
        raise ValueError(f"engine {engine['digest']} takes full shapes (compiled unbatched): max_batch_size must be 0")
    if limit and wanted > limit:
        raise ValueError(f"max_batch_size {wanted} exceeds the engine's profile maximum batch of {limit}")


def open_engine(engine: dict, engine_file: Path, threads: int, batching: bool):
    """A function from {input name: array} to {output name: array}: batches, or unbatched full shapes."""
    settings, outputs = engine["settings"], [tensor["name"] for tensor in engine["outputs"]]
    if engine["compiler"] == "SimulatedServiceTime":
        return simulated_engine(engine, settings["serviceMilliseconds"] / 1000, batching)
    if engine["compiler"] == "OpenVINO":
        import openvino as ov

        config = {**settings.get("config", {}), "INFERENCE_NUM_THREADS": str(threads)}
        if "inferencePrecision" in settings:  # pin what the compile measured, not this CPU's default
            config.setdefault("INFERENCE_PRECISION_HINT", settings["inferencePrecision"])
        compiled = ov.Core().compile_model(str(engine_file), settings.get("device", "CPU"), config)
        request, ports = compiled.create_infer_request(), {name: compiled.output(name) for name in outputs}

        def run(feeds):
            results = request.infer(feeds)
            return {name: np.array(results[port]) for name, port in ports.items()}  # copies: buffers are reused

        return run

    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    level = getattr(ort.GraphOptimizationLevel, settings.get("graphOptimizationLevel", ""), None)
    if level is not None:  # "default" (the baseline) leaves onnxruntime's default
        options.graph_optimization_level = level
    available = ort.get_available_providers()
    providers = [p for p in settings.get("providers", []) if p in available] or ["CPUExecutionProvider"]
    session = ort.InferenceSession(str(engine_file), options, providers=providers)
    return lambda feeds: dict(zip(outputs, session.run(outputs, feeds)))


def simulated_engine(engine: dict, service_s: float, batching: bool):
    """SIMULATION: a batch (or unbatched, a request) takes `service_s` whatever its size; the outputs are zeros."""
    outputs = [
        (
            tensor["name"],
            [max(d, 1) for d in tensor["dims"][1 if batching else 0 :]],
            pb_utils.triton_string_to_numpy(f"TYPE_{tensor['dataType']}"),
        )
        for tensor in engine["outputs"]
    ]

    def run(feeds):
        batch = [len(next(iter(feeds.values())))] if batching else []
        time.sleep(service_s)
        return {name: np.zeros([*batch, *dims], data_type) for name, dims, data_type in outputs}

    return run
