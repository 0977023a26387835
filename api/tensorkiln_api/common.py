"""Shared building blocks of the tensorkiln.dev/v1alpha1 API.

The pydantic models of this package are the single source of truth for the API:
`crdgen` renders them into CustomResourceDefinitions. Every cross-field invariant
is a `Rule` that carries both its CEL expression (enforced by the apiserver) and a
Python mirror (enforced by model validation), so the two cannot drift apart.

Enums are `StrEnum`s: members compare equal to their wire strings
(`HardwareKind.GPU == "GPU"`), and `model_dump(mode="json")` emits plain strings.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any, ClassVar, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

GROUP = "tensorkiln.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

# Go RE2 (apiserver) and Rust regex (pydantic) both accept these patterns, and read them alike: no
# \s, \S, \w, \d or \b, which RE2 reads as ASCII classes and Rust regex as Unicode ones (RE2's \S
# admits U+00A0 and the vertical tab; Rust's refuses them).
# A URI character: anything but a control character (C0, DEL, C1) or the ASCII space.
URI_CHAR = r"[^\x00-\x20\x7f-\x9f]"
# An OCI reference: a registry host (a DNS name, an IPv4 address or a bracketed IPv6 one) with an optional
# port, no credentials; a repository name as the OCI distribution spec writes it; then, for a model source, a
# tag or a digest (the artifact pinned). The engine registry's URI (compilejob) takes host and repository alone.
OCI_HOST = r"([A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?"
OCI_REPOSITORY = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*"
OCI_TAG_OR_DIGEST = r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[a-f0-9]{64})"
# A Cloud Storage bucket (3-63 characters, up to 222 in dotted names) and a Hugging Face repository id
# (owner/name) with its revision (a commit, a tag or a branch without '/').
GCS_BUCKET = r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]"
HF_REPO_ID = r"[A-Za-z0-9][-A-Za-z0-9_.]{0,95}/[A-Za-z0-9][-A-Za-z0-9_.]{0,95}"
HF_REVISION = r"[A-Za-z0-9][-A-Za-z0-9_.]{0,127}"
MODEL_URI_PATTERN = (
    rf"^(file:///{URI_CHAR}+"
    rf"|s3://[a-z0-9][a-z0-9.-]{{1,61}}[a-z0-9]/{URI_CHAR}+"
    rf"|https?://[A-Za-z0-9.-]+(:[0-9]+)?/{URI_CHAR}*"
    rf"|pvc://[a-z0-9]([-a-z0-9]*[a-z0-9])?/{URI_CHAR}+"
    rf"|oci://{OCI_HOST}/{OCI_REPOSITORY}{OCI_TAG_OR_DIGEST}"
    rf"|gs://{GCS_BUCKET}/{URI_CHAR}+"
    rf"|hf://{HF_REPO_ID}@{HF_REVISION}/{URI_CHAR}+)$"
)
SHA256_PATTERN = r"^[a-f0-9]{64}$"
# A `..` path segment, plain or percent-encoded (the fetcher decodes the path): a host-path escape
# for file://, a climb out of the claim for pvc://. RE2 (CEL) and Python's re read it alike.
DOT_DOT_SEGMENT = r"(?i)(/|%2f)(\.|%2e)(\.|%2e)(/|%2f|$)"
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# An object name of most kinds (Secret, ServiceAccount): a DNS-1123 subdomain.
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# A quantity of a resource: Kubernetes' quantity syntax, less the minus sign (a container's requests
# and limits must not be negative) and with a whole exponent (resource.ParseQuantity's own).
QUANTITY_PATTERN = r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?[0-9]+))?$"
# A label key or a taint key (validation.IsQualifiedName): an optional DNS-1123 subdomain prefix and
# '/', then a name of at most 63 characters. The prefix's length is checked apart: prefix_at_most().
QUALIFIED_NAME_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
# A label value or a taint value (validation.IsValidLabelValue), empty included.
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
# A container resource name (core/v1 ValidateContainerResourceName): a standard one, hugepages of a
# page size, or a domain-prefixed one (an extended resource such as nvidia.com/gpu, or a native
# kubernetes.io/ one).
RESOURCE_NAME_PATTERN = (
    r"^(cpu|memory|ephemeral-storage|hugepages-[0-9]+(\.[0-9]+)?([KMGTPE]i|[kMGTPE])?"
    r"|[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$"
)
# metav1.Condition's own constraints, so conditions stay kubectl/kstatus friendly.
CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"


def _check_quantity(value: int | str) -> int | str:
    if isinstance(value, str) and not re.fullmatch(QUANTITY_PATTERN, value):
        raise ValueError(f"{value!r} is not a non-negative Kubernetes quantity such as 500m, 2Gi or 1")
    return value


Quantity = Annotated[
    Annotated[int, Field(ge=0)] | Annotated[str, Field(max_length=64)],
    AfterValidator(_check_quantity),
    WithJsonSchema({"x-kubernetes-int-or-string": True, "minimum": 0, "maxLength": 64, "pattern": QUANTITY_PATTERN}),
]
"""A non-negative Kubernetes resource quantity (`2`, `500m`, `16Gi`)."""

_QUANTITY_SUFFIXES = {
    **{s: Decimal(10) ** (3 * i) for i, s in enumerate(("", "k", "M", "G", "T", "P", "E"))},
    **{s: Decimal(10) ** (-3 * i) for i, s in enumerate(("m", "u", "n"), start=1)},
    **{s: Decimal(2) ** (10 * i) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"), start=1)},
}


def quantity_value(quantity: int | str) -> Decimal:
    """The value of a quantity QUANTITY_PATTERN admits (CEL's `quantity()`, for the Rules' mirrors)."""
    if isinstance(quantity, int):
        return Decimal(quantity)
    number, suffix = re.fullmatch(r"\+?([0-9]*\.?[0-9]*)(.*)", quantity).groups()
    if suffix in _QUANTITY_SUFFIXES:
        return Decimal(number) * _QUANTITY_SUFFIXES[suffix]
    return Decimal(number + suffix)  # a decimal exponent: 1e3


IntOrString = Annotated[int | str, WithJsonSchema({"x-kubernetes-int-or-string": True})]
"""An integer or a string, like Kubernetes' intstr.IntOrString."""


def list_map(*keys: str) -> dict[str, Any]:
    """Schema extra for a list whose items are unique by `keys` (an SSA-mergeable list-map)."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}


LIST_SET: dict[str, Any] = {"x-kubernetes-list-type": "set"}


# How Kubernetes writes a time in an object (metav1.Time): RFC 3339 in UTC, whole seconds.
KUBE_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def kube_time(at: datetime) -> str:
    """`at` (aware, in UTC) as Kubernetes writes it: 2026-12-07T09:00:00Z."""
    return at.strftime(KUBE_TIME_FORMAT)


@dataclass(frozen=True)
class Rule:
    """A cross-field invariant, rendered as an `x-kubernetes-validations` entry.

    `field` is the path, relative to the object that declares the rule, that the
    error is reported at (CEL `fieldPath`); the message always starts with it, so
    both the apiserver error (`spec.shapes.batch.min: ... min must be <= opt`) and
    the pydantic error name the offending field. `check` mirrors `cel` in Python.
    Fields with a schema default are always present when CEL runs (defaulting
    happens first), so rules only guard optional fields with `has()`. A default
    derived from other fields is no schema default: such a field stays absent,
    its rules compare it only when set, and the derived value (filled in by a
    model validator after the rules ran) satisfies them by construction.
    """

    field: str
    cel: str
    message: str
    check: Callable[[Any], bool]
    reason: str | None = None  # apiserver's field error type; FieldValueInvalid when None

    @property
    def full_message(self) -> str:
        return f"{self.field} {self.message}"

    def to_schema(self) -> dict[str, str]:
        out = {"rule": self.cel, "message": self.full_message, "fieldPath": f".{self.field}"}
        if self.reason:
            out["reason"] = self.reason
        return out


def _schema_extra(schema: dict[str, Any], cls: type[KubeModel]) -> None:
    if cls.cel_rules:
        schema["x-kubernetes-validations"] = [rule.to_schema() for rule in cls.cel_rules]


class KubeModel(BaseModel):
    """Base of all API models: camelCase on the wire, CEL rules mirrored in Python."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, json_schema_extra=_schema_extra)
    cel_rules: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="before")
    @classmethod
    def _prune_nulls(cls, data: Any) -> Any:
        # The apiserver prunes an explicit null (YAML `field:` with nothing after it) of a declared,
        # non-nullable field before defaulting and validation: null means absent here too.
        # So is a null value in a map (nodeSelector, resources.requests).
        if not isinstance(data, dict):
            return data
        declared, maps = set(), set()
        for name, info in cls.model_fields.items():
            keys = {key for key in (name, info.alias) if key}
            declared |= keys
            if dict in (get_origin(info.annotation), *(get_origin(a) for a in get_args(info.annotation))):
                maps |= keys
        return {
            k: {mk: mv for mk, mv in v.items() if mv is not None} if k in maps and isinstance(v, dict) else v
            for k, v in data.items()
            if v is not None or k not in declared
        }

    @model_validator(mode="after")
    def _check_invariants(self) -> KubeModel:
        # Mirror the apiserver's list-map/list-set uniqueness, then the CEL rules.
        for name, info in type(self).model_fields.items():
            extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
            if extra.get("x-kubernetes-list-type") not in ("map", "set"):
                continue
            keys = extra.get("x-kubernetes-list-map-keys")
            seen: set[Any] = set()
            for item in getattr(self, name) or ():
                key = ", ".join(f"{k}={getattr(item, _field_name(type(item), k))}" for k in keys) if keys else str(item)
                if key in seen:
                    alias = info.alias or name
                    raise _invariant_error(alias, f"{alias} has duplicate entries for {key}")
                seen.add(key)
        for rule in self.cel_rules:
            if not rule.check(self):
                raise _invariant_error(rule.field, rule.full_message)
        return self


def _invariant_error(field: str, message: str) -> PydanticCustomError:
    # ctx["field"] extends the error's loc to the field named, as CEL's fieldPath does.
    return PydanticCustomError("invariant", "{message}", {"field": field, "message": message})


def field_errors(error: ValidationError, root: str = "spec") -> list[str]:
    """Render pydantic errors with apiserver-style paths: `spec.shapes.batch.min: min must be <= opt`."""
    rendered = []
    for e in error.errors():
        path = root
        for part in [*e["loc"], *filter(None, [(e.get("ctx") or {}).get("field")])]:
            path += f"[{part}]" if isinstance(part, int) else f".{part}"
        rendered.append(f"{path}: {e['msg']}")
    return rendered


def _field_name(model: type[BaseModel], alias: str) -> str:
    return next(n for n, f in model.model_fields.items() if (f.alias or n) == alias)


class SpecModel(KubeModel):
    """Base of desired-state models: unknown fields are errors, as with strict field validation."""

    model_config = ConfigDict(extra="forbid")


class ModelFormat(StrEnum):
    """Serialization format of the source model."""

    ONNX = "onnx"


class Precision(StrEnum):
    """Numeric precision an engine is built for."""

    FP32 = "FP32"
    FP16 = "FP16"
    BF16 = "BF16"
    INT8 = "INT8"


class Compiler(StrEnum):
    """Engine compiler."""

    TENSORRT = "TensorRT"
    ONNX_RUNTIME = "OnnxRuntime"
    OPENVINO = "OpenVINO"


class HardwareKind(StrEnum):
    """Kind of accelerator a hardware class provides."""

    GPU = "GPU"
    CPU = "CPU"


class OptimizationMetric(StrEnum):
    """What the compiler optimizes for when it picks among candidate engines."""

    LATENCY_P95 = "LatencyP95"
    THROUGHPUT = "Throughput"


class CompileJobPhase(StrEnum):
    """Lifecycle phase of a CompileJob."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class ConditionStatus(StrEnum):
    """Status of a condition."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class TolerationOperator(StrEnum):
    """How a toleration matches a taint's value."""

    EXISTS = "Exists"
    EQUAL = "Equal"


class TaintEffect(StrEnum):
    """Taint effect a toleration matches."""

    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


def prefix_at_most(length: int) -> str:
    """A pattern admitting a qualified name whose prefix (before '/') has at most `length` characters."""
    return rf"^[^/]{{0,{length}}}(/|$)"


def _cel_regex(pattern: str) -> str:
    """`pattern` as a single-quoted CEL string literal."""
    return "'" + pattern.replace("\\", "\\\\") + "'"


def _no_dot_dot(field: str) -> Rule:
    return Rule(
        field,
        f"!self.{field}.matches({_cel_regex(DOT_DOT_SEGMENT)})",
        "must not contain a '..' path segment (plain or percent-encoded): give the file's direct path",
        lambda obj: re.search(DOT_DOT_SEGMENT, getattr(obj, _field_name(type(obj), field))) is None,
    )


class SourceCredentials(SpecModel):
    """How the compile pod authenticates to the model source (and to the calibration dataset's): a Secret
    of the model's namespace or a ServiceAccount whose cloud identity the source trusts. Never the engine
    registry's credentials, which a source is not read with."""

    cel_rules = (
        Rule(
            "secretName",
            "has(self.secretName) != has(self.serviceAccountName)",
            "or serviceAccountName: set exactly one",
            lambda c: (c.secret_name is None) != (c.service_account_name is None),
        ),
    )

    secret_name: str | None = Field(
        None,
        max_length=253,
        pattern=DNS_SUBDOMAIN_PATTERN,
        description=(
            "A Secret in the model's namespace, mounted read-only into the compile pod; its keys by scheme: "
            "s3:// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (AWS_SESSION_TOKEN, AWS_REGION and "
            "AWS_ENDPOINT_URL, an S3-compatible endpoint, optional); http(s):// and hf:// token (a bearer "
            "token); gs:// service-account.json (a service account key) or token (an OAuth 2 access token); "
            "oci:// .dockerconfigjson (a kubernetes.io/dockerconfigjson Secret)."
        ),
    )
    service_account_name: str | None = Field(
        None,
        max_length=253,
        pattern=DNS_SUBDOMAIN_PATTERN,
        description=(
            "A ServiceAccount of the model's namespace that the compile pod runs as, with its token mounted, "
            "so that the cloud's workload identity gives s3:// and gs:// their credentials (EKS IRSA: the "
            "web-identity token file; GKE Workload Identity: the metadata server)."
        ),
    )


class ModelSource(SpecModel):
    """Where the model is fetched from, and how to verify it."""

    cel_rules = (_no_dot_dot("uri"),)

    uri: str = Field(
        min_length=1,
        max_length=2048,
        pattern=MODEL_URI_PATTERN,
        description=(
            "Location of the model file. One of file:///absolute/path (a path on the node), "
            "s3://bucket/key, https://host/path, http://host/path (inside a cluster network; set sha256 to "
            "verify what it served), pvc://claim-name/path (a file on a PersistentVolumeClaim in the same "
            "namespace), or oci://host[:port]/repository@sha256:<digest> (or :tag; pin the digest): an OCI "
            "artifact such as a ModelPack, whose one layer titled *.onnx is the model, or a modelcar image, "
            "whose one models/**/*.onnx file is; gs://bucket/object (Cloud Storage); or "
            "hf://owner/repository@revision/path/file.onnx (a file of a Hugging Face Hub model repository at a "
            "revision: pin a commit). spec.source.credentials gives the fetch its credentials."
        ),
    )
    format: ModelFormat = Field(ModelFormat.ONNX, description="Format of the model file.")
    sha256: str | None = Field(
        None,
        pattern=SHA256_PATTERN,
        description=(
            "Expected SHA-256 of the model file, as 64 lowercase hex digits. When set, a "
            "download with a different digest fails the compile; the digest is also part of "
            "the engine cache key. When unset, the digest is computed after download."
        ),
    )
    credentials: SourceCredentials | None = Field(
        None,
        description=("Credentials for the source. Unset: none (a public source; file:// and pvc:// need none)."),
    )


DEFAULT_BATCH_OPT = 8
DEFAULT_BATCH_MAX = 32


class BatchRange(SpecModel):
    """Batch sizes the engine's optimization profile covers: min <= opt <= max. Ignored when
    serving.maxBatchSize is 0: the model then has no batch axis.

    opt and max have no fixed default: unset, they are derived from the batch sizes the spec does set
    (derive_unset_batch_sizes), so that a default never contradicts them.
    """

    # The rules compare fields the spec sets; a derived value fits by construction.
    cel_rules = (
        Rule(
            "min", "!has(self.opt) || self.min <= self.opt", "must be <= opt", lambda r: r.opt is None or r.min <= r.opt
        ),
        Rule(
            "opt",
            "!has(self.opt) || !has(self.max) || self.opt <= self.max",
            "must be <= max",
            lambda r: r.opt is None or r.max is None or r.opt <= r.max,
        ),
        # With opt set, the two rules above already order min and max.
        Rule(
            "min",
            "has(self.opt) || !has(self.max) || self.min <= self.max",
            "must be <= max",
            lambda r: r.opt is not None or r.max is None or r.min <= r.max,
        ),
    )

    min: int = Field(1, ge=1, description="Smallest batch size the engine accepts.")
    opt: int | None = Field(
        None,
        ge=1,
        description=(
            f"Batch size the engine is tuned for (TensorRT's kOPT profile shape). Unset: {DEFAULT_BATCH_OPT}, "
            "raised to min or lowered to max when outside them."
        ),
    )
    max: int | None = Field(
        None,
        ge=1,
        description=(
            f"Largest batch size the engine accepts; bounds serving.maxBatchSize. Unset: {DEFAULT_BATCH_MAX}, or the "
            "largest batch size the spec sets when that is larger: min, opt, compile.objective.batchSize, "
            "serving.maxBatchSize, and serving.dynamicBatching.preferredBatchSizes while the batcher is enabled."
        ),
    )


class DynamicDim(SpecModel):
    """Range of a dynamic (-1) non-batch input dimension, such as sequence length: min <= opt <= max."""

    cel_rules = (
        Rule("min", "self.min <= self.opt", "must be <= opt", lambda r: r.min <= r.opt),
        Rule("opt", "self.opt <= self.max", "must be <= max", lambda r: r.opt <= r.max),
    )

    input: str = Field(min_length=1, max_length=256, description="Name of the model input the dimension belongs to.")
    axis: int = Field(
        ge=0,
        le=7,
        description=(
            "Index of the dimension in the input's full ONNX shape, 0-based. Axis 0 is the batch axis, whose range "
            "is shapes.batch, unless serving.maxBatchSize is 0: then axis 0 takes an entry like any other."
        ),
    )
    min: int = Field(ge=1, description="Smallest size of the dimension the engine accepts.")
    opt: int = Field(ge=1, description="Size of the dimension the engine is tuned for.")
    max: int = Field(ge=1, description="Largest size of the dimension the engine accepts.")


class Shapes(SpecModel):
    """Input shapes the compiled engines must accept (their optimization profile)."""

    batch: BatchRange = Field(
        default_factory=BatchRange,
        description="Batch sizes the engines accept (axis 0 of every input). Ignored when serving.maxBatchSize is 0.",
    )
    dynamic_dims: list[DynamicDim] = Field(
        default_factory=list,
        max_length=16,
        json_schema_extra=list_map("input", "axis"),
        description=(
            "Ranges for dynamic dimensions other than the batch axis, one entry per (input, axis). Every such "
            "dynamic dimension needs an entry; when serving.maxBatchSize is 0 there is no batch axis, so every "
            "dynamic dimension, axis 0 included, needs one."
        ),
    )


class Toleration(SpecModel):
    """A Kubernetes toleration, copied into compiler and server pods; what a Pod refuses is refused here."""

    cel_rules = (
        Rule(
            "key",
            "self.operator == 'Exists' || has(self.key)",
            "is required unless operator is Exists (only Exists may match every key)",
            lambda t: t.operator == TolerationOperator.EXISTS or t.key is not None,
            reason="FieldValueRequired",
        ),
        Rule(
            "key",
            f"!has(self.key) || self.key.matches({_cel_regex(prefix_at_most(253))})",
            "must have a prefix (before '/') of at most 253 characters",
            lambda t: t.key is None or re.match(prefix_at_most(253), t.key) is not None,
        ),
        Rule(
            "value",
            "self.operator != 'Exists' || !has(self.value) || self.value == ''",
            "must be empty when operator is Exists",
            lambda t: t.operator != TolerationOperator.EXISTS or not t.value,
        ),
        Rule(
            "effect",
            "!has(self.tolerationSeconds) || !has(self.effect) || self.effect == 'NoExecute'",
            "must be NoExecute when tolerationSeconds is set",
            lambda t: t.toleration_seconds is None or t.effect in (None, TaintEffect.NO_EXECUTE),
        ),
    )

    key: str | None = Field(
        None,
        max_length=317,
        pattern=QUALIFIED_NAME_PATTERN,
        description=(
            "Taint key to match, a qualified name such as nvidia.com/gpu. Unset with operator Exists "
            "matches all taints; required otherwise."
        ),
    )
    operator: TolerationOperator = Field(
        TolerationOperator.EQUAL, description="Exists matches any value; Equal matches `value`."
    )
    value: str | None = Field(
        None,
        max_length=63,
        pattern=LABEL_VALUE_PATTERN,
        description="Taint value to match when operator is Equal, a label value. Must be empty with Exists.",
    )
    effect: TaintEffect | None = Field(
        None,
        description=(
            "Taint effect to match. Unset matches all effects, or NoExecute alone when tolerationSeconds is set "
            "(the only effect it applies to)."
        ),
    )
    toleration_seconds: int | None = Field(
        None,
        description=(
            "Seconds the pod stays bound after a NoExecute taint appears; effect, when set, must be NoExecute. "
            "Unset tolerates forever."
        ),
    )

    @model_validator(mode="after")
    def _derive_unset(self) -> Toleration:
        # After the rules (KubeModel's validator runs first); a Pod requires the effect spelled out.
        if self.toleration_seconds is not None and self.effect is None:
            self.effect = TaintEffect.NO_EXECUTE
        return self


def _extended(name: str) -> str:
    """CEL: whether resource `name` is an extended one (domain-prefixed, not kubernetes.io/): whole units."""
    return f"({name}.contains('/') && !{name}.contains('kubernetes.io/'))"


def _exact(name: str) -> str:
    """CEL: whether resource `name` cannot be overcommitted (extended or hugepages): request == limit."""
    return f"({name}.startsWith('hugepages-') || {_extended(name)})"


def _is_extended(name: str) -> bool:
    return "/" in name and "kubernetes.io/" not in name


def _is_exact(name: str) -> bool:
    return name.startswith("hugepages-") or _is_extended(name)


def _resource_names_rule(field: str) -> Rule:
    return Rule(
        field,
        f"!has(self.{field}) || self.{field}.all(k, k.matches({_cel_regex(RESOURCE_NAME_PATTERN)})"
        f" && k.matches({_cel_regex(prefix_at_most(244))}) && !k.startsWith('requests.'))",
        "must name cpu, memory, ephemeral-storage, hugepages-<size> or a domain-prefixed resource such as "
        "nvidia.com/gpu",
        lambda r: all(
            re.fullmatch(RESOURCE_NAME_PATTERN, k)
            and re.match(prefix_at_most(244), k)
            and not k.startswith("requests.")
            for k in getattr(r, field) or {}
        ),
    )


def _whole_units_rule(field: str) -> Rule:
    return Rule(
        field,
        f"!has(self.{field}) || self.{field}.all(k, !{_extended('k')}"
        f" || quantity(string(self.{field}[k])).isInteger())",
        "must be whole numbers for extended resources such as nvidia.com/gpu",
        lambda r: all(not _is_extended(k) or _whole(quantity_value(v)) for k, v in (getattr(r, field) or {}).items()),
    )


def _whole(value: Decimal) -> bool:
    # CEL's isInteger(): a whole number that fits an int64.
    return value == value.to_integral_value() and abs(value) < 2**63


def _request_vs_limit(r: ResourceRequirements, compare: Callable[[str, Decimal, Decimal], bool]) -> bool:
    limits = r.limits or {}
    return all(
        compare(k, quantity_value(v), quantity_value(limits[k])) for k, v in (r.requests or {}).items() if k in limits
    )


_REQUEST = "quantity(string(self.requests[k]))"
_LIMIT = "quantity(string(self.limits[k]))"


class ResourceRequirements(SpecModel):
    """Compute resources of a container, as in a Pod spec; what a Pod refuses is refused here."""

    cel_rules = (
        _resource_names_rule("requests"),
        _resource_names_rule("limits"),
        _whole_units_rule("requests"),
        _whole_units_rule("limits"),
        Rule(
            "limits",
            f"!has(self.requests) || self.requests.all(k, !{_exact('k')} || (has(self.limits) && k in self.limits))",
            "must be set for every extended resource (and hugepages) that requests sets",
            lambda r: all(not _is_exact(k) or k in (r.limits or {}) for k in r.requests or {}),
            reason="FieldValueRequired",
        ),
        Rule(
            "requests",
            f"!has(self.requests) || !has(self.limits) || self.requests.all(k, !(k in self.limits)"
            f" || ({_exact('k')} ? {_REQUEST}.compareTo({_LIMIT}) == 0 : !{_REQUEST}.isGreaterThan({_LIMIT})))",
            "must equal limits for extended resources and hugepages, and be at most limits for the others",
            lambda r: _request_vs_limit(r, lambda k, req, lim: req == lim if _is_exact(k) else req <= lim),
        ),
    )

    requests: dict[str, Quantity] | None = Field(
        None,
        max_length=16,
        description=(
            "Minimum resources the scheduler reserves, by resource name (cpu, memory, ...). An extended "
            "resource (nvidia.com/gpu) is a whole number, equal to its limit."
        ),
    )
    limits: dict[str, Quantity] | None = Field(
        None,
        max_length=16,
        description=(
            "Maximum resources the container may use, by resource name. Each must be at least its request; "
            "an extended resource requested needs a limit."
        ),
    )


class Calibration(SpecModel):
    """Calibration data for INT8 engines."""

    cel_rules = (_no_dot_dot("datasetUri"),)

    dataset_uri: str = Field(
        min_length=1,
        max_length=2048,
        pattern=MODEL_URI_PATTERN,
        description=(
            "Location of the calibration dataset, with the same schemes as source.uri (from an oci:// "
            "reference, its one layer titled *.npz or models/**/*.npz file): "
            "an .npz file with one array per model input, first axis the sample index: the batch axis, or, "
            "when serving.maxBatchSize is 0, an axis of its own before the input's full shape."
        ),
    )
    samples: int = Field(256, ge=1, le=100000, description="Number of samples fed to the INT8 calibrator.")


class SyntheticInput(SpecModel):
    """A constant, or a range to draw from, that the compiler feeds one model input it synthesises."""

    cel_rules = (
        Rule(
            "value",
            "!has(self.value) || !(has(self.min) || has(self.max))",
            "must not be set with min or max",
            lambda s: s.value is None or (s.min is None and s.max is None),
        ),
        Rule(
            "max",
            "has(self.min) == has(self.max)",
            "must be set with min, and min with max",
            lambda s: (s.min is None) == (s.max is None),
        ),
        Rule(
            "min",
            "!has(self.min) || !has(self.max) || self.min <= self.max",
            "must be <= max",
            lambda s: s.min is None or s.max is None or s.min <= s.max,
        ),
    )

    value: float | None = Field(
        None,
        description=(
            "Every element of every sample is this value: for an input the model accepts only some values of, "
            "such as a sample rate (16000) or an image size."
        ),
    )
    min: float | None = Field(
        None,
        description="Lowest value drawn (uniformly; whole numbers for an integer input). Set with max.",
    )
    max: float | None = Field(
        None, description="Highest value drawn. Set with min. Neither value nor min and max: the compiler's own draw."
    )


SYNTHETIC_INPUTS_DESCRIPTION = (
    "Values for the inputs the compiler synthesises when no calibration dataset is given, by input name: a "
    "constant or a range. Inputs left out get the compiler's own draws (floats: standard normal; integers: 0 to "
    "15; booleans: either; a text encoder's ids, mask and token types: shaped like tokenised text), which the "
    "engine's status lists. An input the model accepts only some values of, such as a sample rate or a size, "
    "needs one here; a compile that the model refuses names the inputs it synthesised and how."
)


class AccuracyTolerance(SpecModel):
    """How far a compiled engine's outputs may drift from the ONNX reference before it is rejected."""

    max_abs_error: float = Field(0.05, ge=0, description="Largest allowed absolute difference of any output element.")
    max_rel_error: float = Field(
        0.05, ge=0, description="Largest allowed relative difference of any output element (0.05 = 5%)."
    )
    min_cosine_similarity: float = Field(
        0.99,
        ge=0,
        le=1,
        description="Smallest allowed cosine similarity between engine and reference outputs, per output.",
    )
    min_top1_agreement: float | None = Field(
        None,
        ge=0,
        le=1,
        description=(
            "For classifiers: smallest allowed fraction of samples whose arg-max class matches the "
            "reference. Unset disables the check."
        ),
    )


class Objective(SpecModel):
    """What the compiler benchmarks candidate engines on to pick the best one."""

    cel_rules = (
        Rule(
            "latencyBudgetMilliseconds",
            "self.metric != 'Throughput' || has(self.latencyBudgetMilliseconds)",
            "is required when metric is Throughput",
            lambda o: o.metric != OptimizationMetric.THROUGHPUT or o.latency_budget_milliseconds is not None,
            reason="FieldValueRequired",
        ),
    )

    metric: OptimizationMetric = Field(
        OptimizationMetric.LATENCY_P95,
        description=(
            "LatencyP95 picks the engine with the lowest 95th percentile latency; Throughput picks "
            "the highest inferences per second whose p95 latency stays within latencyBudgetMilliseconds."
        ),
    )
    batch_size: int | None = Field(
        None,
        ge=1,
        description=(
            "Batch size the candidates are benchmarked at; within shapes.batch. Unset: shapes.batch.min (1 by "
            "default). Must be 1 when serving.maxBatchSize is 0: each request is then one inference of full shapes."
        ),
    )
    latency_budget_milliseconds: float | None = Field(
        None,
        gt=0,
        description="p95 latency ceiling in milliseconds for metric Throughput. Required for Throughput.",
    )


def derive_unset_batch_sizes(
    shapes: Shapes, objective: Objective, sizes_set_elsewhere: Iterable[int], batched: bool = True
) -> None:
    """Fill shapes.batch.max, shapes.batch.opt and objective.batchSize where the spec leaves them unset,
    as their descriptions say: the profile covers every batch size the spec sets (`sizes_set_elsewhere`:
    those outside shapes and objective, such as serving.maxBatchSize). Run after the rules.
    Unbatched (`batched` False), a request is one inference: objective.batchSize is 1."""
    if not batched and objective.batch_size is None:
        objective.batch_size = 1
    batch = shapes.batch
    if batch.max is None:
        set_here = [size for size in (batch.opt, objective.batch_size) if size is not None]
        batch.max = max(DEFAULT_BATCH_MAX, batch.min, *set_here, *sizes_set_elsewhere)
    if batch.opt is None:
        batch.opt = min(max(DEFAULT_BATCH_OPT, batch.min), batch.max)
    if objective.batch_size is None:
        objective.batch_size = batch.min


class EngineRef(KubeModel):
    """A compiled engine in the engine registry."""

    digest: str = Field(
        pattern=SHA256_PATTERN,
        description=(
            "SHA-256 of the engine manifest (which lists every artifact with its own SHA-256), 64 lowercase hex digits."
        ),
    )
    uri: str = Field(min_length=1, max_length=2048, description="Location of the engine in the registry.")


class Condition(KubeModel):
    """One aspect of the object's current state, following Kubernetes API conventions (metav1.Condition)."""

    type: str = Field(
        max_length=316,
        pattern=CONDITION_TYPE_PATTERN,
        description="Type of the condition in CamelCase, such as Ready.",
    )
    status: ConditionStatus = Field(description="Whether the condition holds: True, False or Unknown.")
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=CONDITION_REASON_PATTERN,
        description="Machine-readable CamelCase reason for the condition's last transition.",
    )
    message: str = Field("", max_length=32768, description="Human-readable details about the transition.")
    last_transition_time: datetime = Field(description="When the condition last changed status (RFC 3339).")
    observed_generation: int | None = Field(
        None, ge=0, description="metadata.generation the condition was computed from."
    )


@dataclass(frozen=True)
class PrinterColumn:
    """A `kubectl get` column (CRD additionalPrinterColumns)."""

    name: str
    type: str
    json_path: str
    description: str
    priority: int = 0  # 1: only shown with -o wide


@dataclass(frozen=True)
class CustomResource:
    """Everything crdgen needs to render one kind's CustomResourceDefinition."""

    kind: str
    plural: str
    short_names: tuple[str, ...]
    description: str
    spec: type[SpecModel]
    status: type[KubeModel]
    printer_columns: tuple[PrinterColumn, ...]
    categories: tuple[str, ...] = ("tensorkiln",)
    # (CEL expression, message) on the object's root, checked at creation (metadata.name rules)
    create_rules: tuple[tuple[str, str], ...] = ()

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{GROUP}"


AGE_COLUMN = PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since the object was created.")


class DataType(StrEnum):
    """Element type of a tensor."""

    FP32 = "FP32"
    FP16 = "FP16"
    BF16 = "BF16"
    INT8 = "INT8"
    UINT8 = "UINT8"
    INT32 = "INT32"
    INT64 = "INT64"
    BOOL = "BOOL"


class TensorSpec(SpecModel):
    """Name, element type and shape of one model input or output."""

    name: str = Field(min_length=1, max_length=256, description="Tensor name as in the ONNX graph.")
    data_type: DataType = Field(description="Element type of the tensor.")
    dims: list[Annotated[int, Field(ge=-1)]] = Field(
        max_length=8,
        description=(
            "Shape as the graph has it, less axis 0 (the batch axis) when serving.maxBatchSize > 0; the full shape "
            "when it is 0 ([] for a scalar). -1 marks a dynamic dimension (give its range in shapes.dynamicDims); "
            "a size the graph leaves open matches any size given here."
        ),
    )


class ModelIO(SpecModel):
    """Inputs and outputs of the model, as a check: the compiler refuses a model whose graph
    says otherwise, naming both. When unset they are read from the ONNX graph."""

    inputs: list[TensorSpec] = Field(
        min_length=1,
        max_length=64,
        json_schema_extra=list_map("name"),
        description="Model inputs, unique by name: every input of the graph, none it lacks.",
    )
    outputs: list[TensorSpec] = Field(
        min_length=1,
        max_length=64,
        json_schema_extra=list_map("name"),
        description="Model outputs, unique by name: every output of the graph, none it lacks.",
    )


# Bounds the API server can hold: it reads an integer schema's `maximum` as a float64, and refuses
# a CRD whose bound (2**63 - 1 loses its precision there) is no integer.
MAX_SEQUENCE_IDLE_MICROSECONDS = 86_400_000_000  # a day
MAX_QUEUE_DELAY_MICROSECONDS = 10_000_000  # 10 s
DEFAULT_CANDIDATE_SEQUENCES = 64


class SequenceStrategy(StrEnum):
    """How Triton's sequence batcher schedules the requests of concurrent sequences."""

    DIRECT = "Direct"
    OLDEST = "Oldest"


class StateKeeper(StrEnum):
    """Who carries a sequence's state from one request to the next."""

    TRITON = "Triton"
    CLIENT = "Client"


class SequenceState(SpecModel):
    """An input and an output of the graph that carry a sequence's state: the output of one request of a
    sequence is the input of its next."""

    input: str = Field(min_length=1, max_length=256, description="Graph input that takes the state.")
    output: str = Field(
        min_length=1,
        max_length=256,
        description="Graph output that gives the next state; the graph must give it the input's element type and "
        "shape.",
    )


class SequenceControls(SpecModel):
    """Graph inputs that Triton's sequence batcher fills with control values; each is optional, and the compile
    refuses a name the graph lacks. The values are 0 and 1 in the input's own type (FP32, INT32 or BOOL); the
    correlation id is a UINT64, INT64, UINT32 or INT32 input."""

    start: str | None = Field(
        None, min_length=1, max_length=256, description="Input set to 1 on the first request of a sequence."
    )
    end: str | None = Field(
        None, min_length=1, max_length=256, description="Input set to 1 on the last request of a sequence."
    )
    ready: str | None = Field(
        None,
        min_length=1,
        max_length=256,
        description="Input set to 1 when the request carries data (0: a batch slot Triton filled, to skip).",
    )
    correlation_id: str | None = Field(
        None, min_length=1, max_length=256, description="Input set to the sequence's correlation id."
    )


class SequenceBatching(SpecModel):
    """Triton's sequence batcher, for stateful models: every request of a sequence (one correlation id) goes
    to the same model instance, in order."""

    strategy: SequenceStrategy = Field(
        SequenceStrategy.OLDEST,
        description=(
            "Oldest (the default here): Triton keeps any number of live sequences (up to maxCandidateSequences) and "
            "forms each batch from their oldest requests, so a replica serves many streams at once. Direct "
            "(Triton's own default): each sequence holds one batch slot of one instance until it ends, so a "
            "replica serves at most max(1, serving.maxBatchSize) sequences per instance at once and a further "
            "sequence waits for a slot (with maxBatchSize 0 and one instance: one stream at a time)."
        ),
    )
    max_sequence_idle_microseconds: int = Field(
        1_000_000,
        ge=1,
        le=MAX_SEQUENCE_IDLE_MICROSECONDS,
        description=(
            "How long, in microseconds, a sequence may go without a request before Triton ends it and frees its "
            "slot (and its state); 1000000 is Triton's own default. At most a day."
        ),
    )
    max_queue_delay_microseconds: int = Field(
        0,
        ge=0,
        le=MAX_QUEUE_DELAY_MICROSECONDS,
        description="How long a request may wait for others to batch with, in microseconds. At most 10 s.",
    )
    max_candidate_sequences: int | None = Field(
        None,
        ge=1,
        le=2**31 - 1,
        description=(
            f"Oldest only: the most live sequences a replica keeps at once. Unset: {DEFAULT_CANDIDATE_SEQUENCES}."
        ),
    )
    state: list[SequenceState] = Field(
        min_length=1,
        max_length=16,
        json_schema_extra=list_map("input"),
        description=(
            "The graph's state inputs and outputs, unique by input. An ONNX graph keeps nothing from one run to the "
            "next, so a stateful model takes its state as an input and gives the next as an output; the compile "
            "refuses a pair the graph lacks or gives a different element type or shape."
        ),
    )
    state_kept_by: StateKeeper = Field(
        StateKeeper.TRITON,
        description=(
            "Triton (implicit state): Triton keeps each sequence's state, starting from zeros (every variable "
            "dimension 1) on its first request and dropping it on its last; clients send neither the state input "
            "nor get the state output. Served natively, this needs the onnxruntime or TensorRT backend, so CPU "
            "classes compile with OnnxRuntime only. Client: clients send the state input and read the state output "
            "with every request; Triton only keeps a sequence on one instance, in order."
        ),
    )
    control_inputs: SequenceControls = Field(
        default_factory=SequenceControls,
        description="Graph inputs Triton fills with the sequence's start, end, ready and correlation id values.",
    )

    def tensor_names(self) -> list[tuple[str, str]]:
        """(field, tensor) for every graph tensor named here, state inputs and outputs then controls."""
        named = [(f"state[{i}].input", s.input) for i, s in enumerate(self.state)]
        named += [(f"state[{i}].output", s.output) for i, s in enumerate(self.state)]
        controls = self.control_inputs
        for field, name in (("start", controls.start), ("end", controls.end), ("ready", controls.ready),
                            ("correlationId", controls.correlation_id)):  # fmt: skip
            if name:
                named.append((f"controlInputs.{field}", name))
        return named
