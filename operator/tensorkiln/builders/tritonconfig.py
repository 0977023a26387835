"""Triton's config.pbtxt for a published engine (pure).

Built as a dict, parsed into Triton's own ModelConfig protobuf (so a wrong field name or enum
fails here, not in a server) and printed in protobuf text format.

Two runtimes:
- native: what the NGC tritonserver image serves: `tensorrt_plan`, `onnxruntime_onnx`, or the
  `openvino` backend, by the engine's compiler.
- python-backend: the local cluster's Triton (the nvidia-pytriton wheel) has only the Python
  backend, so there a Python model (tensorkiln.serving.python_backend) runs the same engine
  file with onnxruntime or OpenVINO.

Batching (model_configuration.md, Maximum Batch Size): max_batch_size > 0 only when both the spec
and the engine are batched, i.e. axis 0 of every tensor is the batch; dims then leave it out.
Otherwise max_batch_size is 0 and dims are the full shapes. An engine compiled unbatched stays
unbatched whatever serving.maxBatchSize says (it is served so while its replacement compiles).
"""

from google.protobuf import json_format, text_format

from tensorkiln.builders.tritonschema import model_config_pb2
from tensorkiln.registry.manifest import EngineManifest

NATIVE = "native"
PYTHON_BACKEND = "python-backend"

ENGINE_FILES = {
    "TensorRT": "model.plan",
    "OnnxRuntime": "model.onnx",
    "OpenVINO": "model.xml",
    "SimulatedServiceTime": "simulation.json",  # a simulation: the python-backend runner sleeps
}
NATIVE_PLATFORMS = {"TensorRT": {"platform": "tensorrt_plan"}, "OnnxRuntime": {"platform": "onnxruntime_onnx"},
                    "OpenVINO": {"backend": "openvino"}}  # fmt: skip


def _tensors(manifest: EngineManifest, tensors, batched: bool) -> list[dict]:
    """Triton tensor configs: dims without the batch dimension when Triton batches, else full shapes."""
    profiles = manifest.profiles.get("inputs", {})
    rendered = []
    for tensor in tensors:
        dims = list(tensor.dims)
        profile = profiles.get(tensor.name)
        if profile:
            # The engine was built for these ranges: a dimension fixed in its profile is fixed here.
            dims = [hi if lo == hi else -1 for lo, hi in zip(profile["min"], profile["max"])]
        if batched:
            dims = dims[1:]
        config = {"name": tensor.name, "dataType": f"TYPE_{tensor.data_type}", "dims": dims}
        if not dims:  # Triton refuses empty dims: clients see [1], the model its own shape (model_configuration.md)
            config |= {"dims": [1], "reshape": {"shape": []}}
        rendered.append(config)
    return rendered


def _dynamic_batching(serving: dict, batched: bool) -> dict | None:
    batching = serving["dynamicBatching"]
    if not batching["enabled"] or not batched:
        return None
    policy = batching["queuePolicy"]
    return {
        "preferredBatchSize": batching["preferredBatchSizes"],
        "maxQueueDelayMicroseconds": batching["maxQueueDelayMicroseconds"],
        "defaultQueuePolicy": {
            "timeoutAction": policy["timeoutAction"],
            "defaultTimeoutMicroseconds": policy["timeoutMicroseconds"],
            "maxQueueSize": policy["maxQueueSize"],
        },
    }


def _parameters(values: dict[str, str]) -> dict:
    return {key: {"stringValue": str(value)} for key, value in values.items()}


def config_dict(name: str, manifest: EngineManifest, serving: dict, runtime: str, cpu_threads: int = 1) -> dict:
    """The ModelConfig as a protobuf-JSON dict. `serving` is the InferenceModel's spec.serving."""
    batched = manifest.batched and serving["maxBatchSize"] > 0
    gpu = manifest.hardware_kind == "GPU"
    config = {
        "name": name,
        "maxBatchSize": serving["maxBatchSize"] if batched else 0,
        "input": _tensors(manifest, manifest.inputs, batched),
        "output": _tensors(manifest, manifest.outputs, batched),
        "instanceGroup": [
            {"kind": "KIND_GPU" if gpu else "KIND_CPU", "count": serving["instancesPerGPU"] if gpu else 1}
        ],
    }
    if runtime == PYTHON_BACKEND:
        # The Python backend's model file is model.py; the runner finds the engine by parameter.
        config["backend"] = "python"
        config["parameters"] = _parameters(
            {"engine_file": ENGINE_FILES[manifest.compiler], "intra_op_threads": cpu_threads}
        )
    else:
        if manifest.compiler not in NATIVE_PLATFORMS:
            raise ValueError(f"a {manifest.compiler} engine is served only by the python-backend runtime")
        config |= NATIVE_PLATFORMS[manifest.compiler] | {"defaultModelFilename": ENGINE_FILES[manifest.compiler]}
        if manifest.compiler == "OpenVINO":
            winner = next(c for c in manifest.candidates if c.id == manifest.selection.winner)
            config["parameters"] = _parameters(winner.settings.get("config", {}))
    batching = _dynamic_batching(serving, batched)
    if batching:
        config["dynamicBatching"] = batching
    return config


def render(config: dict) -> str:
    """config.pbtxt text; raises json_format.ParseError on anything Triton's schema lacks."""
    message = json_format.ParseDict(config, model_config_pb2.ModelConfig())
    return text_format.MessageToString(message)


def parse(text: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())
