"""The conditions GitOps tools read, derived from what a status already says (pure).

Flux, kpt and cli-utils compute health with kstatus (sigs.k8s.io/cli-utils/pkg/kstatus): an
object whose status.observedGeneration lags its generation is InProgress; then `Reconciling`
True means InProgress, `Stalled` True (abnormal-true) means Failed, and failing both, `Ready`
True means Current and `Ready` False InProgress. Without `Stalled`, a failure that will not heal
by itself reads InProgress, and a Flux health check waits for it until it times out.

So both kinds carry `Ready`, `Reconciling` while work is under way, and `Stalled` for a failure
that needs a person: a changed spec, a claim or Secret, nodes of the hardware, a name set free.
The two are never True together.
"""

from __future__ import annotations

from datetime import datetime

from tensorkiln.status.conditions import condition, find, merge_conditions

# Ready=False reasons of an InferenceModel that nothing but a person changes (docs/troubleshooting.md).
STALLED_MODEL_REASONS = frozenset(
    {
        "CompileFailed",  # a compile failed for good: a spec change compiles again
        "ServingRefused",  # Kubernetes or Triton refuse the serving objects made from the spec
        "NameConflict",  # another owner holds a derived name
        "NoMatchingHardware",  # no node of any selected class
        "FileURINotAllowed",
        "MissingPVC",
        "MissingSecret",
    }
)


def model_conditions(phase: str, ready: dict) -> list[dict]:
    """Reconciling and Stalled for an InferenceModel in `phase` with `ready` (its Ready condition).
    A model that is Ready but still rolling out (phase Deploying) is Reconciling."""
    stalled = ready["status"] != "True" and ready["reason"] in STALLED_MODEL_REASONS
    reconciling = not stalled and (ready["status"] != "True" or phase != "Ready")
    return _pair(reconciling, stalled, ready["reason"], ready["message"])


def compile_job_conditions(status: dict) -> list[dict]:
    """Ready, Reconciling and Stalled for a CompileJob status: Ready once an engine is published (or
    found), Stalled once it failed for good (a failure that is the cluster's fault is retried before:
    its status reads Pending then; anything else runs again only for a changed spec)."""
    phase = status.get("phase", "Pending")
    compiled = find(status.get("conditions"), "Compiled") or {}
    reason = compiled.get("reason") or status.get("reason") or phase
    message = compiled.get("message") or status.get("message") or f"phase {phase}"
    done, failed = phase == "Succeeded", phase == "Failed"
    return [condition("Ready", done, reason, message), *_pair(not (done or failed), failed, reason, message)]


def with_compile_job_conditions(
    status: dict, old_conditions: list[dict] | None, generation: int, now: datetime
) -> dict:
    """`status` with its Ready, Reconciling and Stalled conditions (transition times from `old_conditions`)."""
    derived = merge_conditions(old_conditions, compile_job_conditions(status), generation, now)
    types = {c["type"] for c in derived}
    return {**status, "conditions": [c for c in status.get("conditions", []) if c["type"] not in types] + derived}


def _pair(reconciling: bool, stalled: bool, reason: str, message: str) -> list[dict]:
    return [
        condition("Reconciling", reconciling, reason, message),
        condition("Stalled", stalled, reason, message),
    ]
