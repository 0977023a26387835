"""Triton's config.pbtxt for a published engine (pure).

Built as a dict, parsed into Triton's own ModelConfig protobuf (so a wrong field name or enum
fails here, not in a server) and printed in protobuf text format.

One renderer, production's: Triton's native backends, `tensorrt_plan`, `onnxruntime_onnx` or `openvino`
by the engine's compiler, as NGC's tritonserver image and TensorKiln's serving image (serving/Dockerfile,
which the local cluster runs) both have them. The python backend serves one engine only, the one no
native backend can: a SimulatedServiceTime engine, the SIMULATION that stands in for a GPU on the local
cluster (tensorkiln_serving.python_backend sleeps its service time per batch; `PYTHON_SERVED`).

Batching (model_configuration.md, Maximum Batch Size): max_batch_size > 0 only when both the spec
and the engine are batched, i.e. axis 0 of every tensor is the batch; dims then leave it out.
Otherwise max_batch_size is 0 and dims are the full shapes. An engine compiled unbatched stays
unbatched whatever serving.maxBatchSize says (it is served so while its replacement compiles).

Sequence batching (serving.sequenceBatching; model_configuration.md, Sequence Batcher, and
implicit_state_management.md): it replaces the dynamic batcher (ModelConfig's scheduling_choice is a
oneof). The control inputs the spec names are filled by Triton, so `input` leaves them out; with
implicit state (state kept by Triton) so it does the state inputs and outputs: clients neither send
nor get them. `sequence_batching.state` holds each pair, starting from zeros with every variable
dimension 1 (what Triton itself uses for a variable dimension of a starting request); only the onnxruntime
and TensorRT backends keep implicit state (compilejob.compilers_for).

Batcher and instances (`batcher`): each field spec.serving sets; the others as the compile chose them for
the engine on its node (manifest.servingTuning: tensorkiln_api.batching, a model of the dynamic batcher
fed the engine's measured latency per batch size), else the fixed defaults (preferred sizes 8 and 16,
2000 µs, one instance) for an engine compiled without that choice. A batcher setting spec.serving sets keeps
the batcher on whatever the compile chose, and where Triton still runs none (the spec turns it off, or the
engine was compiled unbatched) the status says it is unused (builders.batcher_fields). The instance count is
per GPU on a GPU class (spec.serving.instancesPerGPU), per pod on a CPU class (the compile's choice, else 1).

Runtime settings: the engine is served with the runtime settings its compile measured, those of the
selected candidate (the compiler's tuning stage may have picked a settings variant):
- OpenVINO: the candidate's OpenVINO `config` as the backend parameters it reads (PERFORMANCE_HINT,
  NUM_STREAMS, INFERENCE_NUM_THREADS; a bf16 precision as HINT_BF16; `openvino_parameters`), and,
  batched, ENABLE_BATCH_PADDING: the backend (r24.10) answers a batch smaller than max_batch_size with
  an error unless it pads it to max_batch_size, which costs a full batch's compute per execution;
- onnxruntime: `intra_op_thread_count` from intraOpNumThreads, and the graph optimisation level
  as `optimization { graph { level } }` (the onnxruntime backend's README: -1 basic, 1 extended, 0, the
  default, all; "default", the baseline's, sets none).
"""

from dataclasses import dataclass, field

from google.protobuf import json_format, text_format
from google.protobuf.json_format import ParseError
from tensorkiln_api.common import DEFAULT_CANDIDATE_SEQUENCES
from tensorkiln_api.inferencemodel import DEFAULT_MAX_QUEUE_DELAY_MICROSECONDS, default_preferred_batch_sizes
from tensorkiln_api.registry.manifest import EngineManifest

from tensorkiln.builders import batcher_fields
from tensorkiln.builders.tritonschema import model_config_pb2

ENGINE_FILES = {
    "TensorRT": "model.plan",
    "OnnxRuntime": "model.onnx",
    "OpenVINO": "model.xml",
    "SimulatedServiceTime": "simulation.json",  # a SIMULATION: the python backend's runner sleeps
}
# The engines no native backend serves: the python backend runs them (tensorkiln_serving.python_backend).
PYTHON_SERVED = {"SimulatedServiceTime"}
NATIVE_PLATFORMS = {"TensorRT": {"platform": "tensorrt_plan"}, "OnnxRuntime": {"platform": "onnxruntime_onnx"},
                    "OpenVINO": {"backend": "openvino"}}  # fmt: skip


# The Triton control kinds of spec.serving.sequenceBatching.controlInputs, by field.
CONTROL_KINDS = {
    "start": "CONTROL_SEQUENCE_START",
    "end": "CONTROL_SEQUENCE_END",
    "ready": "CONTROL_SEQUENCE_READY",
    "correlationId": "CONTROL_SEQUENCE_CORRID",
}
_FALSE_TRUE = {"FP32": ("fp32FalseTrue", [0, 1]), "INT32": ("int32FalseTrue", [0, 1]),
               "BOOL": ("boolFalseTrue", [False, True])}  # fmt: skip


class UnservableScalar(ParseError):
    """Triton refuses a scalar tensor (its empty reshape) in a model it does not batch, and a native backend
    would give the model the [1] it takes instead."""


def _tensors(
    manifest: EngineManifest,
    tensors,
    batched: bool,
    hidden: set[str] = frozenset(),
    sequence: bool = False,
) -> list[dict]:
    """Triton tensor configs: dims without the batch dimension when Triton batches, else full shapes;
    `hidden`: tensors Triton fills or keeps (sequence controls, implicit state), left out. A model that
    is not `batched` (max_batch_size 0) or has the `sequence` batcher gets no empty reshape for a scalar:
    Triton refuses it there ("scalar tensors are not supported for non-batching model", "... for
    stateful"), and a native backend would feed the [1] clients send to the model, so it refuses."""
    reshaped = batched and not sequence
    profiles = manifest.profiles.get("inputs", {})
    rendered = []
    for tensor in tensors:
        if tensor.name in hidden:
            continue
        dims = list(tensor.dims)
        profile = profiles.get(tensor.name)
        if profile:
            # The engine was built for these ranges: a dimension fixed in its profile is fixed here.
            dims = [hi if lo == hi else -1 for lo, hi in zip(profile["min"], profile["max"])]
        if batched:
            dims = dims[1:]
        config = {"name": tensor.name, "dataType": f"TYPE_{tensor.data_type}", "dims": dims}
        if not dims and not reshaped:
            raise UnservableScalar(
                f"{tensor.name!r} is a scalar (rank 0): Triton refuses scalars in a model it does not batch "
                "(serving.maxBatchSize 0, or the sequence batcher) and its native backends would give the model [1]; "
                "export the model with that input of shape [1] (a Reshape to [] inside the graph), or fold its value "
                "into the graph"
            )
        if not dims:  # Triton refuses empty dims: clients see [1], the model its own shape (model_configuration.md)
            config |= {"dims": [1], "reshape": {"shape": []}} if reshaped else {"dims": [1]}
        rendered.append(config)
    return rendered


@dataclass(frozen=True)
class Batcher:
    """The dynamic batcher's settings and the instance count a target is served with (`batcher`)."""

    enabled: bool
    preferred_batch_sizes: list[int]
    max_queue_delay_microseconds: int
    instances: int
    # Where each came from, by spec.serving's field name: "spec", "compile" or "default".
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    # The batcher settings the spec sets that Triton leaves unused, and why (batcher_fields.unused); None: none.
    unused: str | None = field(default=None, compare=False)


SPEC, COMPILE, DEFAULT = "spec", "compile", "default"


def batcher(serving: dict, manifest: EngineManifest | None, gpu: bool) -> Batcher:
    """For a GPU class (`gpu`) or a CPU class: each field spec.serving sets; for a field left unset, the
    compile's choice for the engine (manifest.servingTuning; None: not known yet), else the fixed defaults
    an engine compiled without that choice gets. The sequence batcher, when set, turns the dynamic batcher
    off (a model has one scheduler); else, with enabled unset, a batcher setting the spec sets turns it on
    (batcher_fields), the compile's choice notwithstanding. Tuned preferred sizes above serving.maxBatchSize
    (lowered since the compile) are not used: the defaults stand in."""
    batching, max_batch = serving["dynamicBatching"], serving["maxBatchSize"]
    tuned = manifest.serving_tuning.setting if manifest and manifest.serving_tuning else None
    sources: dict[str, str] = {}

    def pick(name: str, spec_value, tuned_value, default):
        if spec_value is not None:
            sources[name] = SPEC
            return spec_value
        sources[name] = COMPILE if tuned else DEFAULT
        return tuned_value if tuned else default  # a tuned_value of False or 0 is a choice too

    enabled = batching.get("enabled")
    if serving.get("sequenceBatching"):
        enabled = False
    elif enabled is None and batcher_fields.fields_set(serving):
        enabled = True
    enabled = pick("enabled", enabled, tuned and tuned.dynamic_batching, True)
    preferred = pick("preferredBatchSizes", batching.get("preferredBatchSizes"), tuned and tuned.preferred_batch_sizes,
                     default_preferred_batch_sizes(max_batch))  # fmt: skip
    if sources["preferredBatchSizes"] == COMPILE and any(size > max_batch for size in preferred):
        preferred, sources["preferredBatchSizes"] = default_preferred_batch_sizes(max_batch), DEFAULT
    delay = pick("maxQueueDelayMicroseconds", batching.get("maxQueueDelayMicroseconds"),
                 tuned and tuned.max_queue_delay_microseconds, DEFAULT_MAX_QUEUE_DELAY_MICROSECONDS)  # fmt: skip
    instances = instance_count(serving, manifest, gpu)
    chosen = COMPILE if tuned else DEFAULT
    sources["instances"] = SPEC if gpu and serving.get("instancesPerGPU") is not None else chosen
    unused = batcher_fields.unused(serving, manifest is None or manifest.batched)
    return Batcher(enabled, list(preferred), delay, instances, sources, unused and unused[1])


def instance_count(serving: dict, manifest: EngineManifest | None, gpu: bool) -> int:
    """Model instances per GPU (spec.serving.instancesPerGPU), or per pod on a CPU class; unset, as the
    compile chose them (manifest.servingTuning), else 1."""
    instances = serving.get("instancesPerGPU") if gpu else None  # a CPU class: per pod, not the GPU count
    if instances is not None:
        return instances
    return manifest.serving_tuning.setting.instances if manifest and manifest.serving_tuning else 1


def served_settings(config: dict, settings: Batcher, manifest: EngineManifest) -> dict:
    """A target's status.serving: what its model config (config_dict) sets for batching and instances,
    where each of those settings came from (`settings`, the batcher it was rendered with), why the
    compile chose those that are its (`manifest`'s servingTuning), and the batcher settings the spec sets
    that the config leaves unused."""
    entry = {"maxBatchSize": config["maxBatchSize"], "instances": config["instanceGroup"][0]["count"]}
    used = ["instances"]
    if "sequenceBatching" in config:
        entry["scheduler"] = "Sequence"
    elif dynamic := config.get("dynamicBatching"):
        entry |= {
            "scheduler": "Dynamic",
            "preferredBatchSizes": list(dynamic["preferredBatchSize"]),
            "maxQueueDelayMicroseconds": dynamic["maxQueueDelayMicroseconds"],
        }
        used = ["enabled", "preferredBatchSizes", "maxQueueDelayMicroseconds", "instances"]
    else:
        entry["scheduler"] = "None"
        if config["maxBatchSize"] > 0:  # the batcher is off by choice, not for want of a batch axis
            used = ["enabled", "instances"]
    by_source: dict[str, list[str]] = {}
    for name in used:
        by_source.setdefault(settings.sources[name], []).append(name)
    entry["chosenBy"] = "; ".join(f"{source}: {', '.join(names)}" for source, names in by_source.items())
    if COMPILE in by_source:
        entry["reason"] = manifest.serving_tuning.reason[:2048]
    if settings.unused:
        entry["unused"] = settings.unused[:1024]
    return entry


def _dynamic_batching(serving: dict, settings: Batcher, batched: bool) -> dict | None:
    if not settings.enabled or not batched:
        return None
    policy = serving["dynamicBatching"]["queuePolicy"]
    return {
        "preferredBatchSize": settings.preferred_batch_sizes,
        "maxQueueDelayMicroseconds": settings.max_queue_delay_microseconds,
        "defaultQueuePolicy": {
            "timeoutAction": policy["timeoutAction"],
            "defaultTimeoutMicroseconds": policy["timeoutMicroseconds"],
            "maxQueueSize": policy["maxQueueSize"],
        },
    }


def _control(kind: str, name: str, data_type: str) -> dict:
    if kind == "CONTROL_SEQUENCE_CORRID":
        control = {"kind": kind, "dataType": f"TYPE_{data_type}"}
    else:
        field, values = _FALSE_TRUE[data_type]
        control = {"kind": kind, field: values}
    return {"name": name, "control": [control]}


def sequence_batching(manifest: EngineManifest, serving: dict, batched: bool) -> dict | None:
    """{"config": the sequenceBatching message, "hidden": tensors left out of input and output}; None when the
    spec has no sequence batcher, or the engine lacks a tensor it names (an engine compiled for another spec)."""
    spec = serving.get("sequenceBatching")
    if not spec:
        return None
    inputs = {t.name: t for t in manifest.inputs}
    outputs = {t.name: t for t in manifest.outputs}
    named = spec.get("controlInputs", {})
    if any(p["input"] not in inputs or p["output"] not in outputs for p in spec["state"]) or any(
        name not in inputs for name in named.values()
    ):
        return None
    implicit = spec["stateKeptBy"] == "Triton"
    controls = [_control(CONTROL_KINDS[field], name, inputs[name].data_type) for field, name in named.items()]
    strategy = {"maxQueueDelayMicroseconds": spec["maxQueueDelayMicroseconds"]}
    config = {"maxSequenceIdleMicroseconds": spec["maxSequenceIdleMicroseconds"], "controlInput": controls}
    if spec["strategy"] == "Oldest":
        candidates = spec.get("maxCandidateSequences", DEFAULT_CANDIDATE_SEQUENCES)
        config["oldest"] = strategy | {"maxCandidateSequences": candidates}
    else:
        config["direct"] = strategy
    hidden = set(named.values())
    if implicit:
        pairs = []
        dims = {t["name"]: t["dims"] for t in _tensors(manifest, [inputs[p["input"]] for p in spec["state"]], batched)}
        for pair in spec["state"]:
            data_type = inputs[pair["input"]].data_type
            initial = [1 if d == -1 else d for d in dims[pair["input"]]]
            pairs.append({"inputName": pair["input"], "outputName": pair["output"], "dataType": f"TYPE_{data_type}",
                          "dims": dims[pair["input"]],
                          "initialState": [{"dataType": f"TYPE_{data_type}", "dims": initial, "zeroData": True,
                                            "name": f"{pair['input']}-zeros"}]})  # fmt: skip
            hidden |= {pair["input"], pair["output"]}
        config["state"] = pairs
    return {"config": config, "hidden": hidden}


def _parameters(values: dict[str, str]) -> dict:
    return {key: {"stringValue": str(value)} for key, value in values.items()}


# onnxruntime's graph optimisation levels as the onnxruntime backend's optimization.graph.level.
ORT_GRAPH_LEVELS = {"ORT_ENABLE_BASIC": -1, "ORT_ENABLE_EXTENDED": 1, "ORT_ENABLE_ALL": 0}


def selected_settings(manifest: EngineManifest) -> dict:
    """The runtime settings of the selected candidate (empty when the manifest does not list it)."""
    winner = next((c for c in manifest.candidates if c.id == manifest.selection.winner), None)
    return winner.settings if winner else {}


def measured_threads(settings: dict) -> int | None:
    """The CPU threads the selected candidate was measured with: onnxruntime's intraOpNumThreads,
    OpenVINO's INFERENCE_NUM_THREADS; None when it names none."""
    threads = settings.get("intraOpNumThreads", settings.get("config", {}).get("INFERENCE_NUM_THREADS"))
    return int(threads) if threads is not None else None


# The CPU properties Triton's openvino backend reads from a model's parameters (r24.10's
# ModelState::ParseParameters); it ignores any other key.
OPENVINO_BACKEND_KEYS = ("PERFORMANCE_HINT", "NUM_STREAMS", "INFERENCE_NUM_THREADS", "COMPILATION_NUM_THREADS")


def openvino_parameters(config: dict) -> dict:
    """The openvino backend's parameters for a candidate's OpenVINO `config` (pure). Precision: bf16 is the
    backend's HINT_BF16=YES; f32 is written as nothing, the serving image's CPU plugin default
    (serving/triton_backends/build.py), since the backend has no key for it."""
    parameters = {key: config[key] for key in OPENVINO_BACKEND_KEYS if key in config}
    if config.get("INFERENCE_PRECISION_HINT") == "bf16":
        parameters["HINT_BF16"] = "YES"
    return parameters


def _onnxruntime_native(settings: dict) -> dict:
    """The native onnxruntime backend's share of the config for these settings (module docstring)."""
    config = {}
    threads = settings.get("intraOpNumThreads")
    if threads is not None and "CUDAExecutionProvider" not in settings.get("providers", []):
        config["parameters"] = _parameters({"intra_op_thread_count": threads})
    level = ORT_GRAPH_LEVELS.get(settings.get("graphOptimizationLevel", ""))
    if level:  # 0 (all) is the backend's default, and protobuf's: nothing to write
        config["optimization"] = {"graph": {"level": level}}
    return config


def config_dict(name: str, manifest: EngineManifest, serving: dict) -> dict:
    """The ModelConfig as a protobuf-JSON dict, the same for every cluster. `serving` is the InferenceModel's
    spec.serving."""
    batched = manifest.batched and serving["maxBatchSize"] > 0
    gpu = manifest.hardware_kind == "GPU"
    sequence = sequence_batching(manifest, serving, batched)
    hidden = sequence["hidden"] if sequence else set()
    settings = batcher(serving, manifest, gpu)
    config = {
        "name": name,
        "maxBatchSize": serving["maxBatchSize"] if batched else 0,
        "input": _tensors(manifest, manifest.inputs, batched, hidden, sequence=bool(sequence)),
        "output": _tensors(manifest, manifest.outputs, batched, hidden, sequence=bool(sequence)),
        "instanceGroup": [{"kind": "KIND_GPU" if gpu else "KIND_CPU", "count": settings.instances}],
    }
    if manifest.compiler in PYTHON_SERVED:
        # The Python backend's model file is model.py; the runner finds the engine by parameter.
        config |= {"backend": "python", "parameters": _parameters({"engine_file": ENGINE_FILES[manifest.compiler]})}
    else:
        config |= NATIVE_PLATFORMS[manifest.compiler] | {"defaultModelFilename": ENGINE_FILES[manifest.compiler]}
        if manifest.compiler == "OpenVINO":
            parameters = openvino_parameters(selected_settings(manifest).get("config", {}))
            if batched:  # the openvino backend refuses a batch smaller than max_batch_size unless it pads it
                parameters = {**parameters, "ENABLE_BATCH_PADDING": "YES"}
            config["parameters"] = _parameters(parameters)
        elif manifest.compiler == "OnnxRuntime":
            config |= _onnxruntime_native(selected_settings(manifest))
    if sequence:  # the one scheduler: ModelConfig's scheduling_choice is a oneof
        config["sequenceBatching"] = sequence["config"]
    elif batching := _dynamic_batching(serving, settings, batched):
        config["dynamicBatching"] = batching
    return config


def render(config: dict) -> str:
    """config.pbtxt text; raises json_format.ParseError on anything Triton's schema lacks."""
    message = json_format.ParseDict(config, model_config_pb2.ModelConfig())
    return text_format.MessageToString(message)


def parse(text: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())
