"""InferenceModel + hardware class -> CompileJob (pure)."""

from tensorkiln_api import API_VERSION
from tensorkiln_api.registry.manifest import CacheKey

from tensorkiln.builders import labels, resources
from tensorkiln.builders.naming import bounded_name, digest, target_name
from tensorkiln.builders.resources import GPU_RESOURCE
from tensorkiln.hardware.classes import HardwareClass
from tensorkiln.settings import Settings

# spec.compile.resources unset. CPU: small enough for a 2-core node; the compiler's threads, and so
# the timings the engine is chosen by, follow the CPU limit.
DEFAULT_RESOURCES = {
    "GPU": {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {GPU_RESOURCE: "1"}},
    "CPU": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "2", "memory": "6Gi"}},
}


def compile_job_name(model_name: str, hardware_class: str) -> str:
    """builders.naming's per-hardware name; its Job adds "-" and 8 hex and stays a label value."""
    return target_name(model_name, hardware_class)


def compilers_for(spec: dict, kind: str) -> list[str]:
    """The spec's compilers for the kind. Served with implicit state (sequenceBatching, state kept by
    Triton), a CPU class compiles with OnnxRuntime only: Triton's OpenVINO backend has no implicit state
    (implicit_state_management.md: onnxruntime, TensorRT and PyTorch backends only)."""
    compilers = spec["compile"]["compilers"]
    if kind == "GPU":
        return [compilers["gpu"]]
    sequence = spec["serving"].get("sequenceBatching")
    if sequence and sequence["stateKeptBy"] == "Triton":
        return ["OnnxRuntime"]
    return list(compilers["cpu"])


def options_hash(compile_spec: dict) -> str:
    """Hash of everything that changes the engine; the registry cache key uses it."""
    keys = ("source", "modelDigest", "compilers", "precisions", "shapes", "calibration", "accuracy", "objective")
    hardware = compile_spec["hardware"]
    hashed = {k: compile_spec.get(k) for k in keys} | {"hardwareClass": hardware["className"], "kind": hardware["kind"]}
    # How the source is read does not change the engine (a rotated Secret is no new compile).
    hashed["source"] = {k: v for k, v in compile_spec["source"].items() if k != "credentials"}
    if "io" in compile_spec:  # only when declared, so that every existing key stays what it was
        hashed["io"] = compile_spec["io"]  # a cache hit must not skip the compiler's check of it
    if not compile_spec.get("batched", True):  # likewise only when unbatched: a batched engine's key stays
        hashed["batched"] = False
    if "sequenceBatching" in compile_spec:  # likewise: the compile checks the state pairs against the graph
        hashed["sequenceBatching"] = compile_spec["sequenceBatching"]
    if "syntheticInputs" in compile_spec:  # likewise: the data every candidate is checked on
        hashed["syntheticInputs"] = compile_spec["syntheticInputs"]
    if "servingTarget" in compile_spec:  # likewise: the runtime versions the engine is built with
        hashed["servingTarget"] = compile_spec["servingTarget"]
    if "OpenVINO" in compile_spec["compilers"] and "batcherTuning" in compile_spec:
        # OpenVINO candidates are timed padded to Triton's max_batch_size, as its backend serves them, so
        # that size can change which engine wins (tensorkiln_compiler.candidates.openvino).
        hashed["openvinoPaddedToBatch"] = compile_spec["batcherTuning"]["maxBatchSize"]
    return digest(hashed, 16)


def batcher_tuning(spec: dict) -> dict | None:
    """The CompileJob's batcherTuning: what the compile tunes Triton's dynamic batcher for; None when Triton
    does not batch (maxBatchSize 0; the sequence batcher, whose settings the spec gives, replaces it)."""
    if spec["serving"]["maxBatchSize"] == 0 or spec["serving"].get("sequenceBatching"):
        return None
    tuning = {"maxBatchSize": spec["serving"]["maxBatchSize"]}
    if slo := spec.get("slo"):
        tuning |= {"sloTargetMilliseconds": slo["targetMilliseconds"], "sloPercentile": slo["percentile"]}
    return tuning


def build_compile_job(model: dict, spec: dict, target: HardwareClass, settings: Settings) -> dict:
    """The CompileJob that builds `model`'s engine for `target`.

    `spec` is the InferenceModel spec as camelCase JSON with defaults applied.
    """
    name = compile_job_name(model["metadata"]["name"], target.name)
    compile_options = spec["compile"]
    hardware = {
        "className": target.name,
        "kind": target.kind,
        "product": target.product,
        "nodeSelector": dict(target.node_selector),
        "tolerations": list(target.tolerations),
        "resources": resources.for_class(compile_options.get("resources"), DEFAULT_RESOURCES, target),
        "simulated": target.simulated,
    }
    if target.node_affinity():
        hardware["nodeAffinity"] = target.node_affinity()
    job_spec = {
        "modelName": model["metadata"]["name"],
        "source": spec["source"],
        "hardware": hardware,
        "compilers": compilers_for(spec, target.kind),
        "shapes": spec["shapes"],
        "accuracy": compile_options["accuracy"],
        "objective": compile_options["objective"],
        "registry": {"uri": settings.registry_uri},
        "image": settings.compiler_gpu_image if target.kind == "GPU" else settings.compiler_image,  # TensorRT on GPUs
        "compilerVersion": settings.compiler_version,
        "deadlineSeconds": compile_options["deadlineSeconds"],
        "retries": compile_options["retries"],
    }
    if settings.serving_target:
        job_spec["servingTarget"] = settings.serving_target
    if "precisions" in compile_options:  # else the compiler takes what its node runs natively
        job_spec["precisions"] = compile_options["precisions"]
    if "sha256" in spec["source"]:
        job_spec["modelDigest"] = spec["source"]["sha256"]
    if "calibration" in compile_options:
        job_spec["calibration"] = compile_options["calibration"]
    if "syntheticInputs" in compile_options:
        job_spec["syntheticInputs"] = compile_options["syntheticInputs"]
    if "io" in spec:
        job_spec["io"] = spec["io"]
    if spec["serving"]["maxBatchSize"] == 0:  # only then: every batched CompileJob stays as it was
        job_spec["batched"] = False
    if spec["serving"].get("sequenceBatching"):
        job_spec["sequenceBatching"] = spec["serving"]["sequenceBatching"]
    elif tuning := batcher_tuning(spec):
        job_spec["batcherTuning"] = tuning
    job_spec["optionsHash"] = options_hash(job_spec)  # batcherTuning aside, but for OpenVINO's padded batch
    return {
        "apiVersion": API_VERSION,
        "kind": "CompileJob",
        "metadata": {
            "name": name,
            "namespace": model["metadata"]["namespace"],
            "labels": {
                labels.MODEL: bounded_name(model["metadata"]["name"], max_length=63),
                labels.HARDWARE_CLASS: target.name,
                **labels.MANAGED_BY,
            },
            "ownerReferences": [labels.owner_reference(model, "InferenceModel")],
        },
        "spec": job_spec,
    }


def cache_key(compile_job: dict, settings: Settings) -> CacheKey | None:
    """The registry key of this compile; None when the model digest is only known after fetching it."""
    spec = compile_job["spec"]
    if not spec.get("modelDigest"):
        return None
    return CacheKey(
        model_digest=spec["modelDigest"],
        options_hash=spec["optionsHash"],
        hardware_class=spec["hardware"]["className"],
        compiler_version=spec.get("compilerVersion") or settings.compiler_version,  # as the compiler keys it
    )
