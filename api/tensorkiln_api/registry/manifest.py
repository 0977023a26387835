"""The engine manifest: what a registry entry is, and the key the cache looks it up by.

An engine is content-addressed: its digest is the SHA-256 of the manifest's canonical JSON,
and the manifest lists every artifact file with its own SHA-256. The manifest is the last
thing written, so a reader that finds one finds a complete engine.
"""

import hashlib
import json
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

SCHEMA_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class CacheKey(_Model):
    """Same model, same options, same hardware class, same compiler = same engine: no compile."""

    model_digest: str = Field(pattern=r"^[a-f0-9]{64}$", description="SHA-256 of the ONNX file")
    options_hash: str = Field(min_length=8, description="CompileJob spec.optionsHash")
    hardware_class: str = Field(min_length=1)
    compiler_version: str = Field(min_length=1, description="version of tensorkiln_compiler that built it")

    def id(self) -> str:
        return hashlib.sha256(canonical_json(self.model_dump(by_alias=True)).encode()).hexdigest()


class Artifact(_Model):
    path: str = Field(description="relative path inside the engine, '/'-separated, no '..'")
    sha256: str = Field(pattern=r"^[a-f0-9]{64}$")
    size: int = Field(ge=0)


class SourceArtifact(_Model):
    """The OCI manifest an oci:// source was pulled from, as an image-spec descriptor: what the engine's
    own OCI artifact names as its `subject`."""

    media_type: str
    digest: str = Field(pattern=r"^sha256:[a-f0-9]{64}$")
    size: int = Field(ge=0)


class TensorInfo(_Model):
    name: str
    data_type: str = Field(description="Triton data type: FP32, FP16, INT64, ...")
    dims: list[int] = Field(description="-1 for a dynamic dimension; the batch dimension included")


class PaddingIgnored(_Model):
    """A text encoder's padded positions, left out of the accuracy comparison: where its attention mask is 0,
    per-token outputs hold values nothing reads, in which a lower precision legitimately differs."""

    mask: str = Field(description="the input whose 0s mark padding, such as attention_mask")
    outputs: list[str] = Field(description="outputs compared only where the mask is 1: their leading axes are its")
    compared_elements: int = Field(description="output elements compared: every output, every validation feed")
    ignored_elements: int = Field(description="padded elements left out")


class Accuracy(_Model):
    max_abs_error: float
    max_rel_error: float
    cosine_similarity: float
    top1_agreement: float | None = None
    samples: int
    synthetic_data: bool = Field(description="True when no dataset was given and inputs were synthesised")
    # Absent rather than null when unset: a manifest written before it existed keeps its digest.
    padding_ignored: PaddingIgnored | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="the figures above leave out these padded positions; None: every element compared",
    )


Interval = tuple[float, float]


class Benchmark(_Model):
    batch_size: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    throughput_per_s: float = Field(description="inferences (not batches) per second")
    threads: int
    warmup_runs: int
    runs: int
    # 95% bootstrap confidence intervals (low, high) of the figures above; None in manifests
    # written before they were measured, and for simulations, which have no spread.
    p50_interval_ms: Interval | None = None
    p95_interval_ms: Interval | None = None
    p99_interval_ms: Interval | None = None
    throughput_interval_per_s: Interval | None = None
    # Whether the timings settled (the compiler's stopping rule: the last windows' medians within
    # a tolerance of each other) before the run cap or the time budget stopped them; None: not judged.
    stable: bool | None = None


class Candidate(_Model):
    id: str = Field(description="e.g. onnxruntime-int8, openvino-fp32, baseline")
    compiler: Literal["OnnxRuntime", "OpenVINO", "TensorRT", "SimulatedServiceTime"]
    precision: Literal["FP32", "FP16", "BF16", "INT8"]
    baseline: bool = Field(False, description="the unmodified ONNX on onnxruntime, default options")
    status: Literal["Selected", "Passed", "RejectedAccuracy", "Failed"]
    reason: str = ""
    settings: dict = Field(default_factory=dict, description="compiler options actually used")
    accuracy: Accuracy | None = None
    benchmarks: list[Benchmark] = Field(default_factory=list)


class Selection(_Model):
    objective: dict = Field(description="the CompileJob's spec.objective")
    winner: str = Field(description="id of the selected candidate")
    reason: str
    speedup_vs_baseline: float | None = None


class BatcherSetting(_Model):
    """What Triton's config.pbtxt sets for the dynamic batcher and the instance count."""

    dynamic_batching: bool
    preferred_batch_sizes: list[int] = Field(default_factory=list, description="empty: none")
    max_queue_delay_microseconds: int = 0
    instances: int = Field(1, description="per GPU; per pod on a CPU class")

    def describe(self) -> str:
        count = f"{self.instances} instance{'s' if self.instances > 1 else ''}"
        if not self.dynamic_batching:
            return f"no dynamic batching, {count}"
        preferred, delay = self.preferred_batch_sizes or "none", self.max_queue_delay_microseconds
        return f"dynamic batching (preferred {preferred}, max_queue_delay {delay} µs), {count}"


class SimulatedLoad(_Model):
    """A model of Triton's batcher serving the engine to `clients` closed-loop clients."""

    clients: int
    throughput_per_s: float = Field(description="inferences (not batches) per second")
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    mean_batch: float = Field(description="inferences per batch the batcher formed, on average")


class InstanceScaling(_Model):
    instances: int
    batch_size: int
    speedup: float = Field(description="inferences per second of `instances` run at once over one run alone")


class ServingTuning(_Model):
    """The batcher and instance settings the compile chose for the engine on its node (tensorkiln_api.batching):
    the measurements the model of the batcher was fed, the choice, and the figures the model gives it."""

    setting: BatcherSetting
    reason: str
    max_batch_size: int = Field(description="the serving.maxBatchSize it was chosen for")
    slo_target_ms: float | None = Field(None, description="the SLO it was chosen for; None: the lone-client rule")
    slo_percentile: str = "p95"
    service_times: list[Benchmark] = Field(description="the engine at each batch size, one instance running alone")
    instance_scaling: list[InstanceScaling] = Field(default_factory=list)
    simulated: list[SimulatedLoad] = Field(description="the chosen setting at each load simulated")
    unbatched: list[SimulatedLoad] = Field(description="no batching, one instance, at the same loads")
    throughput_bound_per_s: float = Field(description="what the engine's batch efficiency allows (batching.py)")
    seed: int = 0


class EngineManifest(_Model):
    schema_version: int = SCHEMA_VERSION
    origin: Literal["compiled", "test-seed", "simulation"] = Field(
        "compiled",
        description="test-seed: a placeholder for a kwok-simulated pool; simulation: a fixed-service-time "
        "stand-in for a GPU-bound engine that computes nothing (tensorkiln_local engine_seeds); no compiler ran",
    )
    key: CacheKey
    model_name: str
    source_uri: str
    hardware_kind: Literal["GPU", "CPU"]
    fingerprint: dict = Field(description="what the compiler measured the node to be (GPU/CPU model, ISA, versions)")
    compiler: str = Field(description="compiler of the winner")
    runtime_versions: dict[str, str] = Field(description="e.g. onnxruntime, openvino, tensorrt, cuda")
    precision: str
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    profiles: dict = Field(
        description="batch min/opt/max and dynamic dims the engine was built for, and each input's min/opt/max "
        "shape; `batched: false` (no batch range) when built for full shapes"
    )
    calibration: dict = Field(default_factory=dict, description="dataset uri and sha256, samples, synthetic flag")
    preprocessing_steps: list[str] = Field(default_factory=list, description="opset upgrades, fallbacks, ...")
    candidates: list[Candidate]
    selection: Selection
    artifacts: list[Artifact]
    created_at: datetime
    # Absent rather than null when unset: a manifest written before it existed keeps its digest.
    serving_tuning: ServingTuning | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="Triton's batcher and instance settings the compile chose; None: not tuned (fixed defaults)",
    )

    source_artifact: SourceArtifact | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="an oci:// source's manifest, which an OCI engine registry links the engine to (subject)",
    )
    namespace: str | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="the namespace whose compile published it; a CompileJob of another namespace reuses it only "
        "after its own compile pod fetched the source and checked its digest (unless engines are shared "
        "cluster-wide). None: published before it was recorded, or by the local cluster's tools",
    )

    @property
    def batched(self) -> bool:
        """Axis 0 of every tensor is the batch axis. Kept in `profiles`, not a field of its own: a new
        field would change the digest of every manifest already published."""
        return self.profiles.get("batched", True)

    def digest(self) -> str:
        return hashlib.sha256(canonical_json(self.to_json_dict()).encode()).hexdigest()

    def to_json_dict(self) -> dict:
        return self.model_dump(by_alias=True, mode="json")


def canonical_json(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
