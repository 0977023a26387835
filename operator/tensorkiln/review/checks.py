"""What an InferenceModel's spec needs from the cluster and the operator, beyond what CEL can say (pure).

The CRD's schema and CEL rules (tensorkiln_api) refuse what the spec alone gets wrong: an unknown
URI scheme, a `..` segment. These checks need the operator's settings or the cluster's objects:

- a file:// source or calibration set outside the allowed roots (the compile pod mounts the
  file's directory from the node: anything else would be a host-path escape): error;
- a pvc:// claim, or the registry's claim or credentials Secret (S3's, or an oci:// registry's push
  and pull Secrets), missing in the namespace: error;
- hardware that matches no node: warning (a pool may appear later);
- under Auto, GPU nodes without a product label, taken as one hardware class whatever their GPUs
  (HardwareClass.note names them): warning (the model still compiles, one engine for them all);
- an SLO target below the engine's measured single-request p95: warning (no replica count can
  meet it);
- a dynamic batcher setting the spec sets where the spec itself runs no dynamic batcher
  (builders.batcher_fields): warning, not refused (that module says why), naming the field.
- burst capacity (slo.burstRequestsPerSecond) under placement PerClass, which keeps none: warning, not
  refused, so that the field set alone is admitted like every other (tests/unit/test_api_defaults_fit_together).

The admission webhook (tensorkiln.admission.webhook) refuses errors and returns warnings; the
reconciler reports the same findings as the `SpecValid` condition, and compiles nothing while
there is an error, so the operator holds without the webhook too.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import unquote, urlsplit

from tensorkiln.builders import batcher_fields, storage
from tensorkiln.hardware.classes import GPU_PRODUCT, HardwareClass, discover, node_labels
from tensorkiln.hardware.selection import select_targets
from tensorkiln.scaling.placement import places_least_cost
from tensorkiln.status.conditions import condition, merge_conditions

ERROR, WARNING = "Error", "Warning"
CONDITION = "SpecValid"

# Reasons, also the SpecValid condition's.
FILE_URI_NOT_ALLOWED = "FileURINotAllowed"
GPU_PRODUCT_UNKNOWN = "GPUProductUnknown"
MISSING_PVC = "MissingPVC"
MISSING_SECRET = "MissingSecret"
NO_MATCHING_NODES = "NoMatchingNodes"
TARGET_BELOW_MEASURED_LATENCY = "TargetBelowMeasuredLatency"
UNUSED_BATCHER_SETTINGS = "UnusedBatcherSettings"
UNUSED_BURST_CAPACITY = "UnusedBurstCapacity"

# exists(kind, name): True, False, or None when the operator may not look (RBAC): then no finding.
Exists = Callable[[str, str], bool | None]


@dataclass(frozen=True)
class Finding:
    severity: str  # ERROR or WARNING
    reason: str
    field: str  # the spec field (or operator setting) concerned, as the message names it
    message: str  # starts with the field, says the fix

    @property
    def is_error(self) -> bool:
        return self.severity == ERROR


def model_uris(spec: dict) -> list[tuple[str, str]]:
    """(field, URI) of everything a compile fetches: the model and its calibration set."""
    uris = [("spec.source.uri", spec["source"]["uri"])]
    calibration = (spec.get("compile") or {}).get("calibration")
    if calibration:
        uris.append(("spec.compile.calibration.datasetUri", calibration["datasetUri"]))
    return uris


def _under(path: str, root: str) -> bool:
    root = posixpath.normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def file_uri_allowed(uri: str, roots: Iterable[str]) -> bool:
    """A file:// URI whose directory (what the compile pod mounts) lies under one of `roots`,
    read both as written (the pod's hostPath) and decoded (what the fetcher opens)."""
    path = urlsplit(uri).path
    directories = {posixpath.dirname(p) for p in (path, unquote(path))}
    for directory in directories:
        if ".." in directory.split("/") or posixpath.normpath(directory) != directory.rstrip("/"):
            return False
    return all(any(_under(d, root) for root in roots if root) for d in directories)


def check_file_uris(spec: dict, roots: Iterable[str]) -> list[Finding]:
    roots = [r for r in roots if r]
    findings = []
    for field, uri in model_uris(spec):
        if urlsplit(uri).scheme != "file" or file_uri_allowed(uri, roots):
            continue
        if roots:
            where = f"outside the directories this operator may read models from ({', '.join(roots)})"
            fix = f"stage the file under {roots[0]}, or serve it by pvc://, s3:// or https://"
        else:
            where = "refused: this operator allows no file:// sources (TENSORKILN_MODEL_FILE_ROOTS is empty)"
            fix = "serve the file by pvc://, s3:// or https://"
        findings.append(Finding(ERROR, FILE_URI_NOT_ALLOWED, field, f"{field}: {uri} is {where}; {fix}"))
    return findings


def referenced_claims(spec: dict, registry_uri: str | None) -> list[tuple[str, str]]:
    """(field, claim) of every PersistentVolumeClaim a compile or Triton pod of the model mounts."""
    claims = [(field, urlsplit(uri).netloc) for field, uri in model_uris(spec) if urlsplit(uri).scheme == "pvc"]
    if registry_uri and urlsplit(registry_uri).scheme == "pvc":
        claims.append(("the engine registry (TENSORKILN_REGISTRY_URI)", urlsplit(registry_uri).netloc))
    return claims


# The settings naming an oci:// registry's docker-config Secrets, and the pods that mount each.
OCI_SECRET_SETTINGS = {
    "TENSORKILN_REGISTRY_PUSH_SECRET": "compile pods mount it to publish",
    "TENSORKILN_REGISTRY_PULL_SECRET": "Triton pods' engine-fetch mounts it to read",
}


def check_references(
    spec: dict,
    namespace: str,
    exists: Exists,
    *,
    registry_uri: str | None = None,
    registry_secret: str | None = None,
    registry_push_secret: str | None = None,
    registry_pull_secret: str | None = None,
) -> list[Finding]:
    findings = []
    for field, claim in referenced_claims(spec, registry_uri):
        if exists("PersistentVolumeClaim", claim) is False:
            fix = (
                f"create the claim in {namespace} or fix the URI"
                if field.startswith("spec.")
                else f"create a claim {claim} in {namespace} on the registry's storage"
            )
            findings.append(
                Finding(
                    ERROR,
                    MISSING_PVC,
                    field,
                    f"{field}: PersistentVolumeClaim {claim} does not exist in namespace {namespace}; {fix}",
                )
            )
    if registry_secret and exists("Secret", registry_secret) is False:
        field = "the engine registry's credentials (TENSORKILN_REGISTRY_SECRET)"
        findings.append(
            Finding(
                ERROR,
                MISSING_SECRET,
                field,
                f"{field}: Secret {registry_secret} does not exist in namespace {namespace}; compile and Triton "
                f"pods take it as environment in their own namespace: copy it into {namespace}",
            )
        )
    findings += _check_oci_secrets(namespace, exists, registry_uri, registry_push_secret, registry_pull_secret)
    return findings


def _check_oci_secrets(
    namespace: str, exists: Exists, registry_uri: str | None, push_secret: str | None, pull_secret: str | None
) -> list[Finding]:
    """An oci:// registry's push and pull Secrets (one finding per missing Secret, naming every setting that
    names it). Only pods of an oci:// registry mount them (builders.storage.registry_credentials)."""
    if not storage.is_oci(registry_uri):
        return []
    settings_of: dict[str, list[str]] = {}
    for setting, secret in zip(OCI_SECRET_SETTINGS, (push_secret, pull_secret), strict=True):
        if secret:
            settings_of.setdefault(secret, []).append(setting)
    findings = []
    for secret, settings in settings_of.items():
        if exists("Secret", secret) is not False:
            continue
        field = f"the engine registry's credentials ({', '.join(settings)})"
        who = "; ".join(OCI_SECRET_SETTINGS[s] for s in settings)
        findings.append(
            Finding(
                ERROR,
                MISSING_SECRET,
                field,
                f"{field}: Secret {secret} does not exist in namespace {namespace} ({who}, in their own namespace); "
                f"create it there: kubectl -n {namespace} create secret docker-registry {secret} "
                "--docker-server=... --docker-username=... --docker-password=...",
            )
        )
    return findings


def check_hardware(spec: dict, nodes: list[dict]) -> list[Finding]:
    """Warnings for hardware that matches no node now (a pool may still appear: not an error), and under
    Auto for each discovered class whose labels leave its hardware unknown (HardwareClass.note): whether
    or not the model targets it, as no include/exclude glob can name a product no label gives."""
    hardware = spec.get("hardware") or {}
    classes = discover(nodes)
    targets = select_targets(hardware, classes, nodes)
    if hardware.get("mode") == "Explicit":
        names = {p["name"]: i for i, p in enumerate(hardware.get("pools", []))}
        return [
            Finding(
                WARNING,
                NO_MATCHING_NODES,
                f"spec.hardware.pools[{names.get(t.name, 0)}]",
                f"spec.hardware.pools[{names.get(t.name, 0)}] ({t.name}): nodeSelector {t.node_selector} matches no "
                "node; nothing is compiled or served for it until a node has these labels",
            )
            for t in targets
            if not t.nodes
        ]
    unknown = [
        Finding(WARNING, GPU_PRODUCT_UNKNOWN, "spec.hardware", f"spec.hardware: {c.note}") for c in classes if c.note
    ]
    if any(t.nodes for t in targets):
        return unknown
    products = sorted({node_labels(n)[GPU_PRODUCT] for n in nodes if GPU_PRODUCT in node_labels(n)})
    fix = "widen spec.hardware.include/exclude" + ("" if hardware.get("includeCPU") else " or set includeCPU")
    return [
        Finding(
            WARNING,
            NO_MATCHING_NODES,
            "spec.hardware",
            f"spec.hardware matches no node (GPU products in the cluster: {', '.join(products) or 'none'}); {fix}",
        ),
        *unknown,
    ]


def single_request_p95(manifest) -> float | None:
    """The selected candidate's p95 at the smallest batch it was benchmarked at (1, or the engine's
    shapes.batch.min), in milliseconds, from an engine manifest."""
    winner = next((c for c in manifest.candidates if c.id == manifest.selection.winner), None)
    smallest = min(winner.benchmarks if winner else (), key=lambda b: b.batch_size, default=None)
    return None if smallest is None else smallest.p95_ms


def check_slo_target(spec: dict, measured: dict[str, float]) -> list[Finding]:
    """Warn when spec.slo.targetMilliseconds is below a target's measured single-request p95
    (`measured`: hardware class -> milliseconds, from its engine): no replica count meets it."""
    slo = spec.get("slo")
    if not slo:
        return []
    target = slo["targetMilliseconds"]
    below = sorted((cls, ms) for cls, ms in measured.items() if ms is not None and target < ms)
    if not below:
        return []
    figures = ", ".join(f"{cls} {ms:.3g} ms" for cls, ms in below)
    floor = max(ms for _, ms in below)
    return [
        Finding(
            WARNING,
            TARGET_BELOW_MEASURED_LATENCY,
            "spec.slo.targetMilliseconds",
            f"spec.slo.targetMilliseconds: {target:g} ms is below the engine's measured single-request p95 "
            f"({figures}): adding replicas cannot meet it; raise the target to at least {floor:.3g}"
            " ms, or target faster hardware",
        )
    ]


def check_batcher_settings(spec: dict) -> list[Finding]:
    """Warn when spec.serving.dynamicBatching sets what Triton leaves unused, the spec running no dynamic batcher
    (sequenceBatching, maxBatchSize 0, enabled: false); each target's status.serving says it too."""
    unused = batcher_fields.unused(spec["serving"])
    return [Finding(WARNING, UNUSED_BATCHER_SETTINGS, *unused)] if unused else []


def check_burst_capacity(spec: dict) -> list[Finding]:
    """Warn when spec.slo.burstRequestsPerSecond is set where no least-cost placement keeps it (placement PerClass)."""
    burst = (spec.get("slo") or {}).get("burstRequestsPerSecond") or 0
    if not burst or places_least_cost(spec):
        return []
    field = "spec.slo.burstRequestsPerSecond"
    message = (
        f"{field}: {burst:g} req/s is unused: only placement LeastCost keeps burst capacity (PerClass scales each "
        "class alone on its own latency); set spec.slo.placement: LeastCost, or remove it"
    )
    return [Finding(WARNING, UNUSED_BURST_CAPACITY, field, message)]


def review(
    spec: dict,
    namespace: str,
    *,
    file_roots: Iterable[str],
    exists: Exists,
    nodes: list[dict],
    measured: dict[str, float] | None = None,
    registry_uri: str | None = None,
    registry_secret: str | None = None,
    registry_push_secret: str | None = None,
    registry_pull_secret: str | None = None,
) -> list[Finding]:
    """Every finding for a validated spec (camelCase, defaults applied), errors first."""
    findings = check_file_uris(spec, file_roots)
    findings += check_references(
        spec,
        namespace,
        exists,
        registry_uri=registry_uri,
        registry_secret=registry_secret,
        registry_push_secret=registry_push_secret,
        registry_pull_secret=registry_pull_secret,
    )
    findings += check_hardware(spec, nodes)
    findings += check_slo_target(spec, measured or {})
    findings += check_batcher_settings(spec)
    findings += check_burst_capacity(spec)
    return sorted(findings, key=lambda f: not f.is_error)


def spec_valid_condition(findings: list[Finding]) -> dict:
    """SpecValid: False (reason of the first error) while anything stops the model compiling;
    True with a warning's reason when only warnings remain; True, Valid, otherwise."""
    if not findings:
        return condition(CONDITION, True, "Valid", "sources, claims and Secrets resolve; the hardware matches nodes")
    message = "; ".join(f.message for f in findings)
    return condition(CONDITION, not findings[0].is_error, findings[0].reason, message)


def refused_compile_job_status(compile_job: dict, roots: Iterable[str], now: datetime) -> dict | None:
    """A Failed CompileJob status when a file:// URI lies outside the allowed roots, else None: the
    InferenceModel reconciler never writes such a CompileJob, but one written by hand would get a
    Job that mounts that host path."""
    spec = compile_job["spec"]
    findings = check_file_uris({"source": spec["source"], "compile": {"calibration": spec.get("calibration")}}, roots)
    if not findings:
        return None
    generation = compile_job["metadata"].get("generation", 1)
    message = "; ".join(f.message for f in findings)
    old = compile_job.get("status", {})
    desired = [condition("Compiled", False, findings[0].reason, message)]
    return {
        **old,
        "observedGeneration": generation,
        "phase": "Failed",
        "reason": findings[0].reason,
        "message": message,
        "conditions": merge_conditions(old.get("conditions"), desired, generation, now),
    }


def measured_latencies(manifests: dict[str, object]) -> dict[str, float]:
    """Hardware class -> single-request p95 of its engine, from engine manifests by class."""
    figures = {cls: single_request_p95(m) for cls, m in manifests.items() if m is not None}
    return {cls: ms for cls, ms in figures.items() if ms is not None}


def targets_with_nodes(spec: dict, nodes: list[dict]) -> list[HardwareClass]:
    return [t for t in select_targets(spec.get("hardware") or {}, discover(nodes), nodes) if t.nodes]
