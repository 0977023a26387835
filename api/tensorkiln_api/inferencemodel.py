"""InferenceModel: an ONNX model compiled per hardware class and served with Triton."""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, model_validator

from .common import (
    AGE_COLUMN,
    DNS_LABEL_PATTERN,
    LIST_SET,
    SYNTHETIC_INPUTS_DESCRIPTION,
    AccuracyTolerance,
    Calibration,
    CompileJobPhase,
    Compiler,
    Condition,
    CustomResource,
    EngineRef,
    HardwareKind,
    IntOrString,
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
from .names import MODEL_NAME_MAX, MODEL_NAME_RULES

INT32_MAX = 2**31 - 1  # replicas and counts in Deployments and HorizontalPodAutoscalers are int32
UINT32_MAX = 2**32 - 1
MAX_STABILIZATION_SECONDS = 3600  # a HorizontalPodAutoscaler's stabilizationWindowSeconds limit
MAX_BATCH_SIZE = 4096
# The batcher's settings for an engine whose compile chose none (compiled before the compile tuned them).
DEFAULT_PREFERRED_BATCH_SIZES = (8, 16)
DEFAULT_MAX_QUEUE_DELAY_MICROSECONDS = 2000
DEFAULT_MAX_REPLICAS = 10


class HardwareMode(StrEnum):
    """How the hardware classes to compile for are chosen."""

    AUTO = "Auto"
    EXPLICIT = "Explicit"


class TimeoutAction(StrEnum):
    """What Triton does with a request that timed out in the queue."""

    REJECT = "REJECT"
    DELAY = "DELAY"


class Percentile(StrEnum):
    """Latency percentile an SLO is measured at."""

    P50 = "p50"
    P90 = "p90"
    P95 = "p95"
    P99 = "p99"

    @property
    def quantile(self) -> str:
        """The `quantile` label Triton's latency summaries carry at this percentile ("0.95" for p95)."""
        return f"0.{self.value[1:]}".rstrip("0")


class ScalingMode(StrEnum):
    """Who scales the serving replicas."""

    OPERATOR = "Operator"
    HPA = "HPA"


class PlacementPolicy(StrEnum):
    """How a model's load is placed across its hardware classes."""

    PER_CLASS = "PerClass"
    LEAST_COST = "LeastCost"


class CapacitySource(StrEnum):
    """Where a target's capacity per replica comes from."""

    MEASURED_AT_COMPILE = "MeasuredAtCompile"
    OBSERVED = "Observed"


class InferenceModelPhase(StrEnum):
    """Summary of an InferenceModel's lifecycle."""

    PENDING = "Pending"
    COMPILING = "Compiling"
    DEPLOYING = "Deploying"
    READY = "Ready"
    DEGRADED = "Degraded"
    FAILED = "Failed"
    # Every target not serving is on a kwok-simulated pool, where no compile runs (local cluster).
    SIMULATED = "Simulated"


PRODUCT_GLOB_PATTERN = r"^[A-Za-z0-9._*?\[\]-]+$"
ProductGlob = Annotated[str, Field(min_length=1, max_length=128, pattern=PRODUCT_GLOB_PATTERN)]
"""A glob (fnmatch) over nvidia.com/gpu.product label values."""


class HardwarePool(SpecModel):
    """A named set of nodes, selected by labels, that is compiled for and served on as one hardware class."""

    name: str = Field(
        max_length=40,
        pattern=DNS_LABEL_PATTERN,
        description="Name of the pool, a DNS-1123 label; used as the hardware class name.",
    )
    kind: HardwareKind = Field(HardwareKind.GPU, description="Accelerator the pool's nodes provide.")
    node_selector: dict[str, str] = Field(
        min_length=1,
        description="Node labels that select the pool's nodes, e.g. nvidia.com/gpu.product: NVIDIA-L4.",
    )
    tolerations: list[Toleration] = Field(
        default_factory=list,
        max_length=32,
        description="Tolerations added to compiler and server pods scheduled on the pool.",
    )


class HardwareSelection(SpecModel):
    """Which hardware classes the model is compiled for and served on."""

    cel_rules = (
        Rule(
            "pools",
            "self.mode != 'Explicit' || (has(self.pools) && size(self.pools) > 0)",
            "must not be empty when mode is Explicit",
            lambda h: h.mode != HardwareMode.EXPLICIT or bool(h.pools),
            reason="FieldValueRequired",
        ),
    )

    mode: HardwareMode = Field(
        HardwareMode.AUTO,
        description=(
            "Auto discovers hardware classes from the nodes: GPU classes, one per distinct nvidia.com/gpu.product "
            "label plus nvidia-gpu-unlabelled for nodes with nvidia.com/gpu capacity but no such label (filtered "
            "by include and exclude), and CPU classes (includeCPU). A node is left out when it is cordoned or its "
            "class does not tolerate its NoSchedule/NoExecute taints (GPU classes tolerate nvidia.com/gpu:NoSchedule, "
            "CPU classes none; Kubernetes' node.kubernetes.io/* state taints do not count). Explicit uses exactly "
            "the listed pools."
        ),
    )
    include_cpu: bool = Field(
        False,
        alias="includeCPU",
        description=(
            "Auto mode only: also target the CPU classes: nodes with neither an nvidia.com/gpu.product label nor "
            "nvidia.com/gpu capacity, classed by Node Feature Discovery's CPU labels (vendor, best vector ISA) "
            "or, without them, by kubernetes.io/arch alone (cpu-<arch>). Cordoned nodes and nodes with a "
            "NoSchedule/NoExecute taint (but for node.kubernetes.io/* state taints) are left out."
        ),
    )
    include: list[ProductGlob] = Field(
        default_factory=list,
        max_length=32,
        description=(
            "Auto mode only: glob patterns (e.g. NVIDIA-H100*) matched against nvidia.com/gpu.product; "
            "when set, only matching GPU products are targeted. Unset targets all GPU products."
        ),
    )
    exclude: list[ProductGlob] = Field(
        default_factory=list,
        max_length=32,
        description="Auto mode only: glob patterns of GPU products never targeted; wins over include.",
    )
    pools: list[HardwarePool] = Field(
        default_factory=list,
        max_length=16,
        json_schema_extra=list_map("name"),
        description="Explicit mode: the hardware pools to target, unique by name. Ignored in Auto mode.",
    )


class CompilerChoice(SpecModel):
    """Compilers used per kind of hardware."""

    gpu: Literal[Compiler.TENSORRT] = Field(Compiler.TENSORRT, description="Compiler for GPU hardware classes.")
    cpu: list[Literal[Compiler.ONNX_RUNTIME, Compiler.OPENVINO]] = Field(
        default_factory=lambda: [Compiler.ONNX_RUNTIME, Compiler.OPENVINO],
        min_length=1,
        max_length=2,
        json_schema_extra=LIST_SET,
        description="Compilers tried for CPU hardware classes; the best engine among them is kept.",
    )


class CompileOptions(SpecModel):
    """How engines are built, checked and chosen for each hardware class."""

    cel_rules = (
        Rule(
            "syntheticInputs",
            "!has(self.syntheticInputs) || !has(self.calibration)",
            "must be unset when calibration is set: the dataset gives every input",
            lambda o: o.synthetic_inputs is None or o.calibration is None,
        ),
    )

    precisions: list[Precision] | None = Field(
        None,
        min_length=1,
        max_length=4,
        json_schema_extra=LIST_SET,
        description=(
            "Precisions to build candidate engines in. Candidates that fail the accuracy check "
            "are discarded; the best remaining one by objective is served. Precisions a class "
            "cannot run (e.g. BF16 on pre-Ampere GPUs) are skipped. Unset: what the compile node "
            "runs natively: on CPUs FP32 and INT8, plus BF16 with AVX512-BF16 or AMX and FP16 with "
            "AVX512-FP16 or AMX-FP16; on GPUs FP32, FP16 and INT8, plus BF16 from compute capability 8.0."
        ),
    )
    compilers: CompilerChoice = Field(
        default_factory=CompilerChoice, description="Compilers used per kind of hardware."
    )
    calibration: Calibration | None = Field(
        None,
        description=(
            "Calibration data for INT8. Without it, INT8 candidates use the model's own "
            "quantization (QDQ nodes) or are skipped."
        ),
    )
    synthetic_inputs: dict[str, SyntheticInput] | None = Field(
        None,
        max_length=64,
        description=SYNTHETIC_INPUTS_DESCRIPTION + " Not with calibration: the dataset gives every input.",
    )
    accuracy: AccuracyTolerance = Field(
        default_factory=AccuracyTolerance,
        description="How far candidate outputs may drift from the ONNX reference.",
    )
    objective: Objective = Field(default_factory=Objective, description="What the best candidate is chosen by.")
    deadline_seconds: int = Field(3600, ge=60, description="Wall-clock limit, in seconds, of one compile attempt.")
    resources: ResourceRequirements | None = Field(
        None,
        description=(
            "Compile pod resources. The compiler runs as many threads as its CPU limit allows and times candidates "
            "with them, so the limit is what the engine is measured with. Unset: per kind of hardware, CPU classes "
            "request 1 CPU and 2Gi and are limited to 2 CPUs and 6Gi; GPU classes request 4 CPUs and 16Gi, limited "
            "to 16Gi. A cpu or memory request left out is its limit where one is given, else the default's; a "
            "memory limit left out is the larger of the memory request and the default's limit; no CPU limit is "
            "added. GPU classes always get nvidia.com/gpu: 1 added to limits."
        ),
    )
    retries: int = Field(
        2,
        ge=0,
        le=10,
        description="How many times a failed compile is retried before the class is marked Failed.",
    )


class QueuePolicy(SpecModel):
    """Triton's dynamic batcher queue policy."""

    timeout_microseconds: int = Field(
        0, ge=0, description="How long a request may wait in the queue, in microseconds; 0 waits forever."
    )
    max_queue_size: int = Field(
        0,
        ge=0,
        le=UINT32_MAX,
        description=(
            "Most requests the queue holds before rejecting new ones; 0 is unbounded. At most 4294967295 "
            "(Triton's max_queue_size is a uint32)."
        ),
    )
    timeout_action: TimeoutAction = Field(
        TimeoutAction.REJECT,
        description="What happens to a request whose timeout expired: REJECT it or DELAY it behind others.",
    )


class DynamicBatching(SpecModel):
    """Triton's dynamic batcher, which merges concurrent requests into larger batches."""

    enabled: bool | None = Field(
        None,
        description=(
            "Whether Triton batches concurrent requests. Unset: false when serving.sequenceBatching is set (a model "
            "has one scheduler: the dynamic batcher or the sequence batcher); else true when preferredBatchSizes, "
            "maxQueueDelayMicroseconds or a queuePolicy other than its defaults is set (a batcher setting asks for "
            "the batcher, whatever the compile chose); else as the compile chose for the class's engine (CompileJob "
            "status.servingTuning: off when batching gains nothing on the node), and true for an engine compiled "
            "without that choice. Batcher settings set where the spec runs no dynamic batcher (sequenceBatching, "
            "maxBatchSize 0, enabled: false) are unused: admission warns, naming them, and so does each target's "
            "status.serving.unused."
        ),
    )
    preferred_batch_sizes: list[Annotated[int, Field(ge=1, le=MAX_BATCH_SIZE)]] | None = Field(
        None,
        max_length=16,
        json_schema_extra=LIST_SET,
        description=(
            "Batch sizes the batcher tries to form; each must be <= serving.maxBatchSize. Empty: none, the "
            "batcher forms the largest batches it can. Unset: those the compile chose for the class's engine "
            "(CompileJob status.servingTuning); for an engine compiled without that choice, "
            f"{' and '.join(map(str, DEFAULT_PREFERRED_BATCH_SIZES))}, each lowered to serving.maxBatchSize when "
            "above it (maxBatchSize 4 gives 4 alone); none when batching is off (maxBatchSize 0)."
        ),
    )
    max_queue_delay_microseconds: int | None = Field(
        None,
        ge=0,
        description=(
            "How long a request may wait for a preferred batch to fill, in microseconds. Unset: what the compile "
            "chose for the class's engine (CompileJob status.servingTuning); for an engine compiled without that "
            f"choice, {DEFAULT_MAX_QUEUE_DELAY_MICROSECONDS}."
        ),
    )
    queue_policy: QueuePolicy = Field(default_factory=QueuePolicy, description="Queue limits and timeout behaviour.")


# CEL for ServingOptions.dynamic_batching_on(): enabled as set, else on unless sequenceBatching is set.
_DYNAMIC_ON = "(has(self.dynamicBatching.enabled) ? self.dynamicBatching.enabled : !has(self.sequenceBatching))"


class ServingOptions(SpecModel):
    """How the selected engine of each hardware class is served with Triton."""

    cel_rules = (
        Rule(
            "dynamicBatching.preferredBatchSizes",
            "!has(self.maxBatchSize) || !has(self.dynamicBatching.preferredBatchSizes) || !"
            + _DYNAMIC_ON
            + " || self.dynamicBatching.preferredBatchSizes.all(b, b <= self.maxBatchSize)",
            "must all be <= maxBatchSize",
            lambda s: s.max_batch_size is None
            or s.dynamic_batching.preferred_batch_sizes is None
            or not s.dynamic_batching_on()
            or all(b <= s.max_batch_size for b in s.dynamic_batching.preferred_batch_sizes),
        ),
        Rule(
            "sequenceBatching",
            "!has(self.sequenceBatching) || !has(self.dynamicBatching.enabled) || !self.dynamicBatching.enabled",
            "and serving.dynamicBatching.enabled: true are mutually exclusive (Triton schedules a model with one "
            "batcher); unset dynamicBatching.enabled or set it to false",
            lambda s: s.sequence_batching is None or s.dynamic_batching.enabled is not True,
        ),
    )

    image: str | None = Field(
        None,
        min_length=1,
        max_length=512,
        description=(
            "Triton Inference Server image of this model's pods. Unset: the serving image the operator is installed "
            "with (the Helm chart's servingImage: NVIDIA's nvcr.io/nvidia/tritonserver:25.10-py3 by default)."
        ),
    )
    max_batch_size: int | None = Field(
        None,
        ge=0,
        le=MAX_BATCH_SIZE,
        description=(
            "Triton's max_batch_size: the largest batch Triton forms from requests; must be <= shapes.batch.max. "
            "Above 0, the model is batched: axis 0 of every input and output is the batch axis (Triton batches "
            "only so), and the compile refuses a model with an input or output of rank 0 or with its batch on "
            "another axis, naming it. 0: the model is not batched, each request carries full shapes: every "
            "dynamic dimension, axis 0 included, takes its range from shapes.dynamicDims, shapes.batch is "
            f"ignored and compile.objective.batchSize is 1. Unset: shapes.batch.max (at most {MAX_BATCH_SIZE})."
        ),
    )
    dynamic_batching: DynamicBatching = Field(
        default_factory=DynamicBatching, description="Triton's dynamic batcher settings."
    )
    sequence_batching: SequenceBatching | None = Field(
        None,
        description=(
            "Triton's sequence batcher, for a stateful model: each sequence's requests go to one instance, in "
            "order, its state kept by Triton or by the client. Excludes the dynamic batcher. The compile refuses "
            "a model without the state inputs and outputs named here, and, the other way round, a model served "
            "batched (maxBatchSize > 0) without this whose graph has an input and an output alike in name, type "
            "and shape (a state pair). Unset: requests are independent."
        ),
    )
    instances_per_gpu: int | None = Field(
        None,
        ge=1,
        le=16,
        alias="instancesPerGPU",
        description=(
            "Model instances Triton runs on each GPU of a GPU class. Unset: the count the compile chose for the "
            "class's engine (CompileJob status.servingTuning), else 1. CPU classes run the count the compile chose "
            "per pod, else 1."
        ),
    )
    resources: ResourceRequirements | None = Field(
        None,
        description=(
            "Triton container resources. Unset: CPU classes request 500m and 1Gi, limited to 1Gi of memory; GPU "
            "classes request 2 CPUs and 8Gi, limited to 8Gi. A cpu or memory request left out is its limit where "
            "one is given, else the default's; a memory limit left out is the larger of the memory request and the "
            "default's limit; no CPU limit is added (it would throttle Triton's threads into latency spikes). GPU "
            "classes always get nvidia.com/gpu: 1 added to limits."
        ),
    )

    def dynamic_batching_on(self) -> bool:
        """dynamicBatching.enabled as set, or as derived when unset: on unless sequenceBatching is set."""
        enabled = self.dynamic_batching.enabled
        return self.sequence_batching is None if enabled is None else enabled

    def derive_unset(self, batch_max: int) -> None:
        """Fill maxBatchSize where unset, as its description says; `batch_max`: shapes.batch.max, itself
        derived first. The batcher's fields and the instance count stay unset: they are derived per hardware
        class, from its engine (builders.tritonconfig.batcher), and a field the spec sets always wins."""
        if self.max_batch_size is None:
            self.max_batch_size = min(batch_max, MAX_BATCH_SIZE)


def default_preferred_batch_sizes(max_batch_size: int) -> list[int]:
    """serving.dynamicBatching.preferredBatchSizes for an engine compiled without a choice of its own."""
    return sorted({min(size, max_batch_size) for size in DEFAULT_PREFERRED_BATCH_SIZES}) if max_batch_size else []


class SLO(SpecModel):
    """Latency objective the serving replicas are scaled to meet."""

    cel_rules = (
        Rule(
            "minReplicas",
            "!has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
            "must be <= maxReplicas",
            lambda s: s.max_replicas is None or s.min_replicas <= s.max_replicas,
        ),
        Rule(
            "placement",
            "self.placement != 'LeastCost' || self.mode == 'Operator'",
            "LeastCost needs mode: Operator (a HorizontalPodAutoscaler scales each class alone)",
            lambda s: s.placement != PlacementPolicy.LEAST_COST or s.mode == ScalingMode.OPERATOR,
        ),
    )

    percentile: Percentile = Field(Percentile.P95, description="Latency percentile the target applies to.")
    target_milliseconds: float = Field(
        gt=0, description="Target end-to-end inference latency at the percentile, in milliseconds."
    )
    min_replicas: int = Field(
        1,
        ge=0,
        le=INT32_MAX,
        description=(
            "Fewest serving replicas per hardware class. 0: under placement LeastCost a class the placement "
            "does not need goes unused (0 replicas); PerClass keeps at least 1."
        ),
    )
    max_replicas: int | None = Field(
        None,
        ge=1,
        le=INT32_MAX,
        description=(
            f"Most serving replicas per hardware class. Unset: {DEFAULT_MAX_REPLICAS}, or minReplicas when that is "
            "larger."
        ),
    )
    scale_up_stabilization_seconds: int = Field(
        0,
        ge=0,
        le=MAX_STABILIZATION_SECONDS,
        description=(
            "How long, in seconds, the SLO must be missed before scaling up; at most 3600, as for a "
            "HorizontalPodAutoscaler."
        ),
    )
    scale_down_stabilization_seconds: int = Field(
        300,
        ge=0,
        le=MAX_STABILIZATION_SECONDS,
        description=(
            "How long, in seconds, the SLO must be met with spare headroom before scaling down; at most 3600, "
            "as for a HorizontalPodAutoscaler."
        ),
    )
    mode: ScalingMode = Field(
        ScalingMode.OPERATOR,
        description=(
            "Operator: the operator scales replicas from Triton metrics. HPA: a "
            "HorizontalPodAutoscaler is created instead."
        ),
    )
    placement: PlacementPolicy = Field(
        PlacementPolicy.PER_CLASS,
        description=(
            "How the load is placed across the hardware classes. PerClass: each class's replicas are scaled "
            "alone on its own latency. LeastCost (mode Operator only): the model is served as a whole, with the "
            "replicas per class that carry the request rate for the least cost per hour; the model's Service "
            "spreads requests evenly over ready pods, so every replica is counted at the capacity per replica of "
            "the slowest class used, from the tensorkiln.dev/price-per-hour annotation of the classes' Nodes (the "
            "hourly price of one GPU, or of one CPU core); a class whose pool is full is kept at what it runs "
            "and the rest spills to the next-cheapest class (SLOMet reason SpilledOver, and an Event). minReplicas "
            "and maxReplicas still bound each class: minReplicas 0 lets a class go unused. Without a price on "
            "every class, the fewest replicas that carry the load. When even every class at maxReplicas falls "
            "short, each runs as many replicas as can serve and SLOMet is False, reason InsufficientCapacity, "
            "with the shortfall in requests per second. Scaling down keeps the stabilization windows."
        ),
    )
    burst_requests_per_second: float = Field(
        0.0,
        ge=0,
        description=(
            "Placement LeastCost only (set under PerClass, it is unused and admission warns, naming it): spare "
            "capacity, in requests per second, kept above the demand, so that "
            "a burst of this size is served within the target at once. Scaling needs seconds to see a burst and "
            "new replicas more to become ready, and at the least cost the replicas run near their capacity. "
            "The placement carries the demand plus this, at the least cost (like Knative's "
            "target-burst-capacity); the spare replicas cost what they cost. When the classes cannot carry it "
            "all, they run as many replicas as can serve, and SLOMet stays True while the demand itself is "
            "carried. 0: no spare capacity."
        ),
    )

    @model_validator(mode="after")
    def _derive_unset(self) -> SLO:
        # After the rules (KubeModel's validator runs first), which saw the spec as written.
        if self.max_replicas is None:
            self.max_replicas = max(DEFAULT_MAX_REPLICAS, self.min_replicas)
        return self


# A percentage above 0%: the serving Deployment's maxUnavailable is 0, and both may not be 0.
SURGE_PERCENT_PATTERN = r"^0*[1-9][0-9]{0,8}%$"


def _is_surge(value: int | str) -> bool:
    if isinstance(value, int):
        return 1 <= value <= INT32_MAX
    return re.fullmatch(SURGE_PERCENT_PATTERN, value) is not None


class Rollout(SpecModel):
    """How a newly compiled engine replaces the one being served."""

    cel_rules = (
        Rule(
            "maxSurge",
            f"type(self.maxSurge) == int ? self.maxSurge >= 1 && self.maxSurge <= {INT32_MAX}"
            f" : self.maxSurge.matches('{SURGE_PERCENT_PATTERN}')",
            "must be a positive integer or a percentage above 0% such as 25% (the rollout never takes a "
            "serving replica away first, so it needs a surge)",
            lambda r: _is_surge(r.max_surge),
        ),
    )

    max_surge: IntOrString = Field(
        "25%",
        description=(
            "Extra serving replicas allowed during a rollout: a count or a percentage of replicas, above 0 "
            "(no serving replica is taken away before its replacement is ready: maxUnavailable is 0)."
        ),
    )
    keep_previous_engine: bool = Field(
        True,
        description=(
            "Keep serving the previous engine while a new one compiles, and keep it if the new one "
            "fails to compile or to become ready."
        ),
    )


class InferenceModelSpec(SpecModel):
    """Desired state of an InferenceModel."""

    # The rules compare what the spec sets; the fields they leave unset are derived to fit (_derive_unset).
    cel_rules = (
        Rule(
            "serving.maxBatchSize",
            "!has(self.serving.maxBatchSize) || !has(self.shapes.batch.max)"
            " || self.serving.maxBatchSize <= self.shapes.batch.max",
            "must be <= shapes.batch.max (the engine's profile must cover Triton's largest batch)",
            lambda s: s.serving.max_batch_size is None
            or s.shapes.batch.max is None
            or s.serving.max_batch_size <= s.shapes.batch.max,
        ),
        Rule(
            "serving.dynamicBatching.preferredBatchSizes",
            "has(self.serving.maxBatchSize) || !has(self.shapes.batch.max)"
            " || !has(self.serving.dynamicBatching.preferredBatchSizes) || !"
            + _DYNAMIC_ON.replace("self.", "self.serving.")
            + " || self.serving.dynamicBatching.preferredBatchSizes.all(b, b <= self.shapes.batch.max)",
            "must all be <= shapes.batch.max (serving.maxBatchSize, unset, follows it)",
            lambda s: s.serving.max_batch_size is not None
            or s.shapes.batch.max is None
            or s.serving.dynamic_batching.preferred_batch_sizes is None
            or not s.serving.dynamic_batching_on()
            or all(b <= s.shapes.batch.max for b in s.serving.dynamic_batching.preferred_batch_sizes),
        ),
        Rule(
            "compile.objective.batchSize",
            "!has(self.serving.maxBatchSize) || self.serving.maxBatchSize > 0"
            " || !has(self.compile.objective.batchSize) || self.compile.objective.batchSize == 1",
            "must be 1 when serving.maxBatchSize is 0 (a request is then one inference of full shapes)",
            lambda s: s.serving.max_batch_size != 0 or s.compile.objective.batch_size in (None, 1),
        ),
        Rule(
            "compile.objective.batchSize",
            "!has(self.compile.objective.batchSize) || (self.compile.objective.batchSize >= self.shapes.batch.min"
            " && (!has(self.shapes.batch.max) || self.compile.objective.batchSize <= self.shapes.batch.max))",
            "must be within shapes.batch min..max",
            lambda s: s.compile.objective.batch_size is None
            or (
                s.shapes.batch.min <= s.compile.objective.batch_size
                and (s.shapes.batch.max is None or s.compile.objective.batch_size <= s.shapes.batch.max)
            ),
        ),
    )

    source: ModelSource = Field(description="Where the model is fetched from.")
    io: ModelIO | None = Field(None, description="Model inputs and outputs. Unset: read from the ONNX graph.")
    shapes: Shapes = Field(default_factory=Shapes, description="Input shapes the engines must accept.")
    hardware: HardwareSelection = Field(
        default_factory=HardwareSelection,
        description="Hardware classes to compile for and serve on.",
    )
    compile: CompileOptions = Field(
        default_factory=CompileOptions, description="How engines are built, checked and chosen."
    )
    serving: ServingOptions = Field(default_factory=ServingOptions, description="How engines are served with Triton.")
    slo: SLO | None = Field(
        None,
        description="Latency objective the replicas are scaled to meet. Unset: replicas stay at 1 per class.",
    )
    rollout: Rollout = Field(default_factory=Rollout, description="How a new engine replaces the served one.")

    @model_validator(mode="after")
    def _derive_unset(self) -> InferenceModelSpec:
        # After the rules (KubeModel's validator runs first), which saw the spec as written: every
        # consumer then reads the derived values from the validated model (normalised_spec).
        serving, batching = self.serving, self.serving.dynamic_batching
        sizes_set = [serving.max_batch_size] if serving.max_batch_size is not None else []
        if serving.dynamic_batching_on() and batching.preferred_batch_sizes:
            sizes_set += batching.preferred_batch_sizes
        derive_unset_batch_sizes(self.shapes, self.compile.objective, sizes_set, batched=serving.max_batch_size != 0)
        serving.derive_unset(self.shapes.batch.max)
        return self


class TargetSLOStatus(KubeModel):
    """What the SLO scaler last saw and decided for one hardware target."""

    observed_milliseconds: float | None = Field(
        None, description="Latency at spec.slo.percentile: the worst pod's Triton summary quantile, in milliseconds."
    )
    latency_source: str | None = Field(
        None,
        max_length=32,
        description=(
            "Where the latency came from: summary-<percentile> (Triton's per-pod quantile, worst pod), mean"
            " (from counters, when summaries are off), or idle (no requests)."
        ),
    )
    queue_milliseconds: float | None = Field(None, description="Time requests waited in Triton's queue, milliseconds.")
    request_rate: float | None = Field(None, description="Requests per second the target served.")
    desired_replicas: int | None = Field(None, ge=0, description="Replicas the scaler wants for this target.")
    last_decision: str | None = Field(
        None, max_length=64, description="Reason of the last decision: ScaledUp, ScaledDown, SLOMet, NoMetrics, ..."
    )
    last_decision_message: str | None = Field(None, max_length=1024, description="Why, with the figures.")
    last_decision_time: datetime | None = Field(
        None,
        description="When the last decision was first reached (RFC 3339); kept while the same decision "
        "(reason and replicas) repeats.",
    )
    last_scale_time: datetime | None = Field(
        None, description="When replicas last changed for the SLO (RFC 3339); the cooldown counts from it."
    )
    capacity_per_replica: float | None = Field(
        None,
        ge=0,
        description=(
            "Requests per second one replica sustains with the latency percentile under target, as the "
            "least-cost placement counts it (spec.slo.placement LeastCost; it counts on 80% of it): "
            "capacityObserved once there is one, else capacityMeasuredAtCompile."
        ),
    )
    capacity_source: CapacitySource | None = Field(
        None,
        description=(
            "Where capacityPerReplica comes from: MeasuredAtCompile (capacityMeasuredAtCompile, the compile's "
            "figures) or Observed (capacityObserved, Triton's metrics)."
        ),
    )
    capacity_measured_at_compile: float | None = Field(
        None,
        ge=0,
        description=(
            "Requests per second one replica sustains under target by the compile's figures: its model of "
            "Triton's batcher at the settings served (the engine's servingTuning), else the single-request "
            "benchmark through the scaler's queueing projection; on a CPU class, times the replica's CPU request "
            "over the compile pod's usable CPUs (at most 1). 0: a replica cannot meet the target."
        ),
    )
    capacity_observed: float | None = Field(
        None,
        ge=0,
        description=(
            "Requests per second one replica sustains under target by Triton's metrics: the scaler's queueing "
            "projection from the newest settled observation with the replicas 20-90% busy. Unset: none yet."
        ),
    )
    capacity_observed_for: str | None = Field(
        None,
        max_length=512,
        description=(
            "What capacityObserved was observed for: the engine (the start of the target's engine.digest), Triton's "
            "batching and instance settings, the replica's resource request and the SLO. A restarted operator "
            "counts on capacityObserved while all of these are the same, until it observes again; a change of "
            "any makes it void (the compile's figure counts until a new observation)."
        ),
    )
    replica_price_per_hour: float | None = Field(
        None,
        ge=0,
        description=(
            "Price of one replica-hour: the class's price per GPU times the replica's GPUs (one unless "
            "spec.serving.resources asks for more), or per CPU core times the replica's CPU request. Unset: the "
            "class has no price."
        ),
    )
    load_share: float | None = Field(
        None,
        ge=0,
        le=1,
        description=(
            "Share of the model's load placed on this target (spec.slo.placement LeastCost): its replicas over "
            "the model's, 0 to 1, as the model's Service spreads requests evenly over ready pods (replicas its "
            "pool cannot run count none)."
        ),
    )
    cost_per_hour: float | None = Field(
        None, ge=0, description="What this target's replicas cost an hour: replicas times replicaPricePerHour."
    )


class TritonScheduler(StrEnum):
    """Which of Triton's schedulers a target's model config sets (one at most: ModelConfig's oneof)."""

    DYNAMIC = "Dynamic"
    SEQUENCE = "Sequence"
    NONE = "None"


class TargetServingStatus(KubeModel):
    """What the target's Triton model config (config.pbtxt) sets for batching and instances, as applied."""

    scheduler: TritonScheduler = Field(
        description="Dynamic (the dynamic batcher), Sequence (the sequence batcher) or None (requests run as sent)."
    )
    max_batch_size: int = Field(ge=0, description="Triton's max_batch_size; 0: the model is served unbatched.")
    preferred_batch_sizes: list[int] | None = Field(
        None, max_length=16, description="The dynamic batcher's preferred batch sizes; empty: none. Unset: no batcher."
    )
    max_queue_delay_microseconds: int | None = Field(
        None, ge=0, description="How long the dynamic batcher holds a request for a batch. Unset: no batcher."
    )
    instances: int = Field(ge=1, description="Model instances per pod on a CPU class, per GPU on a GPU class.")
    chosen_by: str = Field(
        max_length=1024,
        description=(
            "Where each setting came from: spec (spec.serving; enabled too when a batcher setting the spec sets "
            "turned the batcher on), compile (chosen by measurement for the engine on its node: the CompileJob's "
            "status.servingTuning), or default (fixed defaults, for an engine compiled without that choice)."
        ),
    )
    reason: str | None = Field(
        None,
        max_length=2048,
        description=(
            "Why the compile's measurement chose its settings (its model of Triton's batcher, with the figures), "
            "chosen again from the same measurements when spec.slo or serving.maxBatchSize changed since the "
            "compile. Unset: no setting came from the compile."
        ),
    )
    unused: str | None = Field(
        None,
        max_length=1024,
        description=(
            "The spec.serving.dynamicBatching settings the spec sets that this model config leaves unused, and "
            "why: Triton runs no dynamic batcher (serving.sequenceBatching is set, serving.maxBatchSize is 0, "
            "dynamicBatching.enabled is false, or the engine served was compiled unbatched), and what to do. "
            "Unset: every batcher setting the spec sets is used."
        ),
    )


class TargetStatus(KubeModel):
    """Compile and serving state of one hardware class."""

    hardware_class: str = Field(description="Name of the hardware class (a pool name or a derived GPU product name).")
    kind: HardwareKind = Field(description="Accelerator the class provides.")
    product: str | None = Field(None, description="GPU product label (nvidia.com/gpu.product) or a CPU description.")
    node_count: int = Field(0, ge=0, description="Nodes currently in the class.")
    simulated: bool = Field(
        False,
        description="Every node of the class is simulated (kwok on the local cluster): pods bound there run nothing.",
    )
    compile_job: str | None = Field(None, description="Name of the class's current CompileJob.")
    compile_phase: CompileJobPhase | None = Field(None, description="Phase of that CompileJob.")
    engine: EngineRef | None = Field(None, description="Engine being served on the class.")
    price_per_hour: float | None = Field(
        None,
        gt=0,
        description=(
            "Hourly price of one GPU (GPU classes) or one CPU core (CPU classes), from the "
            "tensorkiln.dev/price-per-hour annotation of the class's Nodes. Unset: no price."
        ),
    )
    price_error: str | None = Field(
        None,
        max_length=1024,
        description="Why the class has no price although its Nodes carry one: the node and its value.",
    )
    replicas: int = Field(0, ge=0, description="Serving replicas of the class.")
    ready_replicas: int = Field(0, ge=0, description="Serving replicas that are ready.")
    serving: TargetServingStatus | None = Field(
        None, description="Triton's batching and instance settings the target is served with, once rolled out."
    )
    slo: TargetSLOStatus | None = Field(None, description="The SLO scaler's view of this target, when spec.slo is set.")


class InferenceModelStatus(KubeModel):
    """Observed state of an InferenceModel."""

    observed_generation: int | None = Field(None, ge=0, description="metadata.generation the status was computed from.")
    phase: InferenceModelPhase | None = Field(None, description="Summary of the lifecycle across all hardware classes.")
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra=list_map("type"),
        description="Latest observations of the model's state, unique by type: Ready, Compiled, Deployed, "
        "SpecValid, SLOMet, SLOMetricsAvailable, and Reconciling (work under way) and Stalled (a failure that "
        "needs a changed spec or cluster), which GitOps tools read (kstatus).",
    )
    targets: list[TargetStatus] = Field(
        default_factory=list,
        json_schema_extra=list_map("hardwareClass"),
        description="Per hardware class state, unique by hardwareClass.",
    )
    target_summary: str | None = Field(
        None, description='Human summary of targets for kubectl, such as "2/3 compiled".'
    )
    slo_summary: str | None = Field(
        None, description='Worst target\'s latency against the SLO for kubectl, such as "p95 12.3/50 ms".'
    )
    cost_per_hour: float | None = Field(
        None,
        ge=0,
        description=(
            "What the model's serving replicas cost an hour, over all targets (spec.slo.placement LeastCost). "
            "Unset: PerClass, or a target has no price."
        ),
    )


_READY = '.status.conditions[?(@.type=="Ready")]'

INFERENCE_MODEL = CustomResource(
    kind="InferenceModel",
    plural="inferencemodels",
    short_names=("im",),
    description=(
        "InferenceModel is an ONNX model that TensorKiln compiles into an engine per hardware "
        "class (GPU product or CPU pool) and serves with Triton, scaled to a latency SLO. Its name is a "
        f"DNS-1035 label of at most {MODEL_NAME_MAX} characters without '--': it names the model's Service, "
        "and <name>--<hardware class> names its CompileJobs, Deployments, Services, ConfigMaps, PDBs and HPAs."
    ),
    spec=InferenceModelSpec,
    status=InferenceModelStatus,
    create_rules=tuple((cel, message) for cel, _, message in MODEL_NAME_RULES),
    printer_columns=(
        PrinterColumn("Phase", "string", ".status.phase", "Lifecycle phase."),
        PrinterColumn("Targets", "string", ".status.targetSummary", "Hardware classes compiled."),
        PrinterColumn("Ready", "string", f"{_READY}.status", "Ready condition status."),
        PrinterColumn("Reason", "string", f"{_READY}.reason", "Why the model is or is not Ready."),
        PrinterColumn("Latency", "string", ".status.sloSummary", "Observed latency against the SLO target."),
        PrinterColumn("Cost/h", "number", ".status.costPerHour", "What the serving replicas cost an hour."),
        AGE_COLUMN,
    ),
)
