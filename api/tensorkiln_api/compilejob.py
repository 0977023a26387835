"""CompileJob: one engine build for one hardware class.

Written by the operator, read by the compiler pod.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, WithJsonSchema, model_validator

from .common import (
    AGE_COLUMN,
    DNS_LABEL_PATTERN,
    LIST_SET,
    OCI_HOST,
    OCI_REPOSITORY,
    SHA256_PATTERN,
    SYNTHETIC_INPUTS_DESCRIPTION,
    URI_CHAR,
    AccuracyTolerance,
    Calibration,
    CompileJobPhase,
    Compiler,
    Condition,
    CustomResource,
    EngineRef,
    HardwareKind,
    KubeModel,
    ModelIO,
    ModelSource,
    Objective,
    Precision,
    PrinterColumn,
    ResourceRequirements,
    Rule,
    SequenceBatching,
    Shapes,
    SpecModel,
    SyntheticInput,
    Toleration,
    derive_unset_batch_sizes,
    list_map,
)
from .inferencemodel import MAX_BATCH_SIZE, Percentile

# The releases of serving_targets.SERVING_TARGETS (a unit test keeps them equal).
ServingTargetRelease = Literal["24.10", "25.10", "26.06"]

# The operator's TENSORKILN_REGISTRY_URI: file:// (local), pvc:// (the Helm chart's default), s3://, or
# oci://host[:port]/repository (an OCI registry, one artifact per engine).
REGISTRY_URI_PATTERN = (
    rf"^(file:///{URI_CHAR}+|pvc://[a-z0-9]([-a-z0-9]*[a-z0-9])?(/{URI_CHAR}*)?"
    rf"|s3://[a-z0-9][a-z0-9.-]{{1,61}}[a-z0-9](/{URI_CHAR}*)?"
    rf"|oci://{OCI_HOST}/{OCI_REPOSITORY})$"
)

# A core/v1 NodeAffinity, passed through to the compiler pod untouched.
NodeAffinity = Annotated[
    dict[str, Any], WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True})
]


class RegistryDestination(SpecModel):
    """Where compiled engines are stored."""

    uri: str = Field(
        max_length=2048,
        pattern=REGISTRY_URI_PATTERN,
        description=(
            "Root of the engine registry: file:///var/lib/tensorkiln/registry (a host path), "
            "pvc://claim/path (a directory in that PersistentVolumeClaim of the CompileJob's namespace), "
            "s3://bucket/prefix or oci://host[:port]/repository (an OCI registry: one artifact per engine)."
        ),
    )


class HardwareTarget(SpecModel):
    """The hardware class to compile for, and how to place the compiler pod on it."""

    class_name: str = Field(max_length=63, pattern=DNS_LABEL_PATTERN, description="Name of the hardware class.")
    kind: HardwareKind = Field(description="Accelerator the class provides.")
    product: str | None = Field(None, description="GPU product label (nvidia.com/gpu.product) or a CPU description.")
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Node labels the compiler pod is scheduled by."
    )
    node_affinity: NodeAffinity | None = Field(
        None,
        description=(
            "A core/v1 NodeAffinity for the compiler pod, e.g. to exclude GPU products; passed through as is."
        ),
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, max_length=32, description="Tolerations of the compiler pod."
    )
    resources: ResourceRequirements | None = Field(
        None, description="Compiler container resources. GPU classes always get nvidia.com/gpu: 1."
    )
    simulated: bool = Field(
        False,
        description=(
            "The class's nodes are simulated (kwok): nothing really runs on them, so the "
            "compile is emulated instead of executed there."
        ),
    )


class BatcherTuning(SpecModel):
    """What the compile tunes Triton's dynamic batcher and instance count for, once it has selected the engine:
    the InferenceModel's serving.maxBatchSize and spec.slo."""

    max_batch_size: int = Field(
        ge=1,
        le=MAX_BATCH_SIZE,
        description="The InferenceModel's serving.maxBatchSize: the largest batch Triton forms.",
    )
    slo_target_milliseconds: float | None = Field(
        None,
        gt=0,
        description=(
            "The InferenceModel's slo.targetMilliseconds: the settings that serve the most within it are chosen. "
            "Unset: the most throughput at high load whose p95 for a lone client stays within 1.2x of serving "
            "without batching."
        ),
    )
    slo_percentile: Percentile = Field(
        Percentile.P95, description="The InferenceModel's slo.percentile: the percentile the target applies to."
    )


class CompileJobSpec(SpecModel):
    """Desired state of a CompileJob: everything the compiler pod needs to build one engine."""

    cel_rules = (
        Rule(
            "objective.batchSize",
            "self.batched || !has(self.objective.batchSize) || self.objective.batchSize == 1",
            "must be 1 when batched is false (a request is then one inference of full shapes)",
            lambda s: s.batched or s.objective.batch_size in (None, 1),
        ),
    )

    model_name: str = Field(min_length=1, max_length=253, description="Name of the owning InferenceModel.")
    source: ModelSource = Field(description="Where the model is fetched from.")
    model_digest: str | None = Field(
        None,
        pattern=SHA256_PATTERN,
        description="SHA-256 of the model file, 64 lowercase hex digits, when already known.",
    )
    hardware: HardwareTarget = Field(description="Hardware class to compile for.")
    compilers: list[Compiler] = Field(
        min_length=1,
        max_length=3,
        json_schema_extra=LIST_SET,
        description="Compilers to build candidate engines with.",
    )
    precisions: list[Precision] | None = Field(
        None,
        min_length=1,
        max_length=4,
        json_schema_extra=LIST_SET,
        description=(
            "Precisions to build candidate engines in. Unset: the compiler takes what its node's hardware "
            "runs natively (CPU flags, GPU compute capability) and records them with the candidates."
        ),
    )
    batched: bool = Field(
        True,
        description=(
            "Whether axis 0 of every input and output is the batch axis (the InferenceModel's "
            "serving.maxBatchSize > 0); the compile refuses a model where it is not, naming the tensor. False: the "
            "engine takes full shapes, every dynamic dimension takes its range from shapes.dynamicDims, "
            "shapes.batch is ignored and objective.batchSize is 1."
        ),
    )
    sequence_batching: SequenceBatching | None = Field(
        None,
        description=(
            "The InferenceModel's serving.sequenceBatching: the compile refuses a model without the state inputs, "
            "outputs and control inputs named there. Unset and batched: it refuses a model whose graph has a state "
            "pair (an input and an output alike in name, type and shape), naming it."
        ),
    )
    shapes: Shapes = Field(default_factory=Shapes, description="Input shapes the engine must accept.")
    io: ModelIO | None = Field(
        None, description="The InferenceModel's declared inputs and outputs: the graph must have exactly these."
    )
    batcher_tuning: BatcherTuning | None = Field(
        None,
        description=(
            "Tune Triton's dynamic batcher and instance count for the selected engine on the node: its latency is "
            "measured at batch sizes up to maxBatchSize and a model of the batcher picks the settings (CompileJob "
            "status.servingTuning). Not part of optionsHash: the settings are chosen when the engine is compiled, "
            "and an engine found in the registry keeps those it was compiled with. Unset: none are chosen, and "
            "Triton is served with the fixed defaults."
        ),
    )
    calibration: Calibration | None = Field(None, description="Calibration data for INT8 candidates.")
    synthetic_inputs: dict[str, SyntheticInput] | None = Field(
        None, max_length=64, description="The InferenceModel's compile.syntheticInputs. " + SYNTHETIC_INPUTS_DESCRIPTION
    )
    serving_target: ServingTargetRelease | None = Field(
        None,
        description=(
            "The Triton release that serves the engine (the operator's servingTarget): the compiler builds and times "
            "candidates only with the onnxruntime, OpenVINO or TensorRT version that release runs, and fails with "
            "reason RuntimeMismatch, naming both versions, in a compiler image with others. Unset: no check."
        ),
    )
    accuracy: AccuracyTolerance = Field(
        default_factory=AccuracyTolerance,
        description="How far candidate outputs may drift from the ONNX reference.",
    )
    objective: Objective = Field(default_factory=Objective, description="What the best candidate is chosen by.")
    registry: RegistryDestination = Field(description="Where the engine is stored.")
    image: str = Field(
        "ghcr.io/tensorkiln/compiler:0.1.0",
        min_length=1,
        max_length=512,
        description="Compiler container image.",
    )
    compiler_version: str | None = Field(
        None,
        max_length=128,
        pattern=r"^[0-9A-Za-z][0-9A-Za-z.+_-]*$",
        description=(
            "The compiler build the engine's cache key names (the operator's compilerVersion): the release version, "
            "or `<release>+<build>` for a development build, so that engines of another build are not reused. The "
            "compiler refuses a version of another release than its own (reason CompilerVersionMismatch). Unset: "
            "the compiler's release version."
        ),
    )
    deadline_seconds: int = Field(3600, ge=60, description="Wall-clock limit, in seconds, of one compile attempt.")
    retries: int = Field(2, ge=0, le=10, description="Retries of a failed compile attempt.")
    options_hash: str = Field(
        min_length=1,
        max_length=128,
        description=(
            "Hash of the compile options (source digest, class, compilers, precisions, batching, shapes, "
            "calibration, accuracy, objective); the engine cache key."
        ),
    )

    @model_validator(mode="after")
    def _derive_unset(self) -> CompileJobSpec:
        # The operator writes every batch size; one written by hand may leave some to derive.
        derive_unset_batch_sizes(self.shapes, self.objective, (), batched=self.batched)
        return self


class CandidateSummary(KubeModel):
    """One candidate engine: how it was built, whether it kept accuracy, how fast it ran."""

    id: str = Field(max_length=128, description="Candidate identifier, such as openvino-int8 or baseline.")
    compiler: str = Field(max_length=64, description="Compiler that built it: OnnxRuntime, OpenVINO or TensorRT.")
    precision: str = Field(max_length=16, description="Precision it runs in: FP32, FP16, BF16 or INT8.")
    status: str = Field(
        max_length=32, description="Selected, Passed (kept accuracy, slower), RejectedAccuracy or Failed."
    )
    reason: str | None = Field(None, max_length=1024, description="Why it was rejected or failed, if it was.")
    p50_ms: float | None = Field(None, description="Median latency at the objective's batch size, milliseconds.")
    p95_ms: float | None = Field(
        None, description="95th-percentile latency at the objective's batch size, milliseconds."
    )
    throughput_per_second: float | None = Field(None, description="Inferences per second at that batch size.")
    p95_interval_ms: list[float] | None = Field(
        None,
        min_length=2,
        max_length=2,
        description=(
            "95% bootstrap confidence interval [low, high] of p95Ms: a candidate replaces a simpler one only "
            "when better beyond the overlap of their intervals."
        ),
    )
    timings_settled: bool | None = Field(
        None,
        description=(
            "Whether its timings settled before the benchmark's run cap or time budget: the medians of the last "
            "windows of runs within 10% of each other. False: the figures are noisier than usual (a busy node)."
        ),
    )
    timed_runs: int | None = Field(
        None,
        description=(
            "Timed runs behind these figures: at least 60, so that 3 lie beyond the p95, unless the benchmark's "
            "time budget ended them sooner (a slow engine); up to 100 while the timings do not settle."
        ),
    )
    max_abs_error: float | None = Field(None, description="Largest absolute output difference from the fp32 reference.")
    cosine_similarity: float | None = Field(None, description="Cosine similarity of outputs to the fp32 reference.")


class ServingTuningSummary(KubeModel):
    """The Triton settings the compile chose for the engine on its node (spec.batcherTuning), and the figures a
    model of Triton's batcher gives them; the InferenceModel's spec.serving fields that are set override them."""

    dynamic_batching: bool = Field(description="Whether Triton batches concurrent requests.")
    preferred_batch_sizes: list[int] = Field(
        default_factory=list, max_length=16, description="The batcher's preferred batch sizes; empty: none."
    )
    max_queue_delay_microseconds: int = Field(
        0, ge=0, description="How long a request may wait for a preferred batch to fill, in microseconds."
    )
    instances: int = Field(1, ge=1, description="Model instances per GPU, or per pod on a CPU class.")
    clients: int = Field(ge=1, description="The high load the throughputs below are simulated at: concurrent clients.")
    throughput_per_second: float = Field(description="Simulated inferences per second with these settings.")
    unbatched_throughput_per_second: float = Field(
        description="Simulated inferences per second without batching, one instance, at the same load."
    )
    throughput_bound_per_second: float = Field(
        description=(
            "The throughput the engine's own batch efficiency allows on the node: the best measured batch size "
            "over its latency, times the best measured instance gain."
        )
    )
    lone_client_p95_ms: float = Field(description="Simulated p95 latency of a lone client, milliseconds.")
    reason: str = Field(max_length=1024, description="Why these settings: the rule and the figures it compared.")


class SelectionSummary(KubeModel):
    """The candidate published as the engine, and why."""

    candidate: str = Field(max_length=128, description="Id of the selected candidate.")
    reason: str = Field(max_length=1024, description="Why it won, or why the baseline was kept.")
    speedup_vs_baseline: float | None = Field(
        None, description="Baseline p50 latency divided by the selected engine's p50 latency (same node, same run)."
    )
    synthetic_data: bool = Field(
        False, description="Accuracy was checked on synthesised inputs only, as no dataset was given."
    )
    synthetic_inputs: dict[str, str] | None = Field(
        None,
        max_length=64,
        description=(
            "With syntheticData: how each input's samples were made, by input name: the compiler's own draw (such "
            "as standard normal), or the value or range spec.compile.syntheticInputs gave."
        ),
    )


class CompileJobStatus(KubeModel):
    """Observed state of a CompileJob."""

    observed_generation: int | None = Field(None, ge=0, description="metadata.generation the status was computed from.")
    phase: CompileJobPhase | None = Field(None, description="Lifecycle phase of the compile.")
    job_name: str | None = Field(None, description="Name of the batch/v1 Job running the compiler.")
    node_name: str | None = Field(None, description="Node the compiler pod ran on.")
    simulated_node: bool | None = Field(
        None,
        description="Whether that node is simulated (kwok): no compiler runs there, so the compile never finishes.",
    )
    cache_hit: bool = Field(
        False,
        description="The engine came from the registry cache (same model, options, hardware, compiler): no Job ran.",
    )
    start_time: datetime | None = Field(None, description="When the first attempt started (RFC 3339).")
    completion_time: datetime | None = Field(
        None, description="When the compile succeeded or finally failed (RFC 3339)."
    )
    engine: EngineRef | None = Field(None, description="The engine built, once Succeeded.")
    selection: SelectionSummary | None = Field(None, description="Which candidate won and why, once Succeeded.")
    serving_tuning: ServingTuningSummary | None = Field(
        None,
        description=(
            "The Triton batcher and instance settings chosen for the engine, once Succeeded; absent for an "
            "engine compiled without spec.batcherTuning."
        ),
    )
    candidates: list[CandidateSummary] = Field(
        default_factory=list,
        max_length=64,
        json_schema_extra=list_map("id"),
        description="Every candidate engine the compiler built and measured on the node, with its figures.",
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra=list_map("type"),
        description="Latest observations of the compile's state, unique by type: Compiled, AccuracyPassed, "
        "Selected, and Ready (an engine published or found), Reconciling (compiling) and Stalled (failed), "
        "which GitOps tools read (kstatus).",
    )
    reason: str | None = Field(None, description="CamelCase reason for the current phase.")
    message: str | None = Field(None, description="Human-readable details about the current phase.")
    attempts: int = Field(0, ge=0, description="Compile attempts started so far.")
    cluster_retries: int = Field(
        0,
        ge=0,
        description=(
            "Compile Jobs started again because one failed for the cluster's fault, not the model's: its "
            "deadline passed while the compiler could not run (an outage), its pod was evicted or lost with "
            "its node, or the engine it published is gone from the registry. At most 3; then it stays Failed."
        ),
    )


COMPILE_JOB = CustomResource(
    kind="CompileJob",
    plural="compilejobs",
    short_names=("cjob",),
    description=(
        "CompileJob builds and validates the engine of one InferenceModel for one hardware "
        "class. The operator creates it; a compiler pod on the class's nodes executes it."
    ),
    spec=CompileJobSpec,
    status=CompileJobStatus,
    printer_columns=(
        PrinterColumn("Class", "string", ".spec.hardware.className", "Hardware class."),
        PrinterColumn("Phase", "string", ".status.phase", "Lifecycle phase."),
        PrinterColumn("Node", "string", ".status.nodeName", "Node the compiler ran on."),
        PrinterColumn(
            "Simulated", "boolean", ".status.simulatedNode", "The node is simulated by kwok: no compiler runs there."
        ),
        PrinterColumn("Engine", "string", ".status.engine.digest", "Digest of the built engine.", priority=1),
        AGE_COLUMN,
    ),
)
