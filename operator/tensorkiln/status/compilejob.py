"""CompileJob status from its Job and that Job's newest pod (pure)."""

import json
from dataclasses import dataclass
from datetime import datetime

from tensorkiln.registry.manifest import EngineManifest
from tensorkiln.status.conditions import condition, find, merge_conditions
from tensorkiln.status.engine import engine_status

SIMULATED_NOTE = "simulated by kwok: no container runs there, so no engine is built"


def _job_condition(job: dict, type_: str) -> dict | None:
    found = find(job.get("status", {}).get("conditions"), type_)
    return found if found and found.get("status") == "True" else None


def _termination(pod: dict | None) -> dict | None:
    """The compiler container's terminated state, if it ended."""
    for status in (pod or {}).get("status", {}).get("containerStatuses", []):
        if status.get("name") == "compiler":
            return status.get("state", {}).get("terminated") or status.get("lastState", {}).get("terminated")
    return None


def _killed(terminated: dict, attempts: int) -> str | None:
    """A compiler ended by a signal (exit code 128 + n) wrote no report: say so, with its last output."""
    code = terminated.get("exitCode")
    if not isinstance(code, int) or code <= 128:
        return None
    cause = " (SIGKILL: killed, e.g. by the OOM killer)" if code == 137 else ""
    message = f"attempt {attempts}: the compiler exited {code}{cause}, reason {terminated.get('reason', 'Error')}"
    output = (terminated.get("message") or "").strip()
    return f"{message}; its output ended: {output[-1500:]}" if output else message


@dataclass(frozen=True)
class Published:
    """An engine found in the registry (after a compile, or as a cache hit)."""

    manifest: EngineManifest
    digest: str
    uri: str


def compiler_report(message: str) -> dict:
    """The compiler's termination message: {"engine": {...}} on success, {"error": {...}} on failure."""
    try:
        report = json.loads(message)
    except (TypeError, ValueError):
        return {}
    return report if isinstance(report, dict) else {}


def reported_engine(pod: dict | None) -> dict | None:
    engine = compiler_report((_termination(pod) or {}).get("message") or "").get("engine")
    return engine if isinstance(engine, dict) and "digest" in engine else None


def _placement(pod: dict | None, simulated_nodes: set[str]) -> tuple[str | None, bool, dict]:
    """(node, simulated, Scheduled condition) of the compile pod."""
    node = (pod or {}).get("spec", {}).get("nodeName")
    if not node:
        waiting = find((pod or {}).get("status", {}).get("conditions"), "PodScheduled")
        if waiting and waiting.get("status") == "False":
            return (
                None,
                False,
                condition(
                    "Scheduled",
                    False,
                    waiting.get("reason", "Unschedulable"),
                    waiting.get("message", "the scheduler found no node"),
                ),
            )
        return None, False, condition("Scheduled", False, "WaitingForPod", "no pod bound to a node yet")
    simulated = node in simulated_nodes
    message = f"pod {pod['metadata']['name']} bound to node {node}" + (f" ({SIMULATED_NOTE})" if simulated else "")
    return node, simulated, condition("Scheduled", True, "Scheduled", message)


def cache_hit_status(compile_job: dict, published: Published, now: datetime) -> dict:
    """The registry already holds this engine: Succeeded without a Job."""
    generation = compile_job["metadata"].get("generation", 1)
    fields, conditions = engine_status(published.manifest, published.digest, published.uri, cache_hit=True)
    return {
        "observedGeneration": generation,
        "phase": "Succeeded",
        **fields,
        "conditions": merge_conditions(compile_job.get("status", {}).get("conditions"), conditions, generation, now),
    }


def compile_job_status(
    compile_job: dict,
    job: dict | None,
    pod: dict | None,
    simulated_nodes: set[str],
    now: datetime,
    published: Published | None = None,
) -> dict:
    """Mirror the Job's progress into the CompileJob's phase, conditions and timestamps.

    `published` is the engine the compiler reported, as read back from the registry.
    """
    old = compile_job.get("status", {})
    generation = compile_job["metadata"].get("generation", 1)
    status: dict = {"observedGeneration": generation}
    if job is None:
        status["phase"] = "Pending"
        desired = [
            condition("Scheduled", False, "JobNotCreated", "the compile Job is being created"),
            condition("Compiled", None, "Pending", "waiting for the compile Job"),
        ]
        status["conditions"] = merge_conditions(old.get("conditions"), desired, generation, now)
        return status

    job_status = job.get("status", {})
    status["jobName"] = job["metadata"]["name"]
    status["attempts"] = job_status.get("failed", 0) + job_status.get("succeeded", 0) + job_status.get("active", 0)
    for source, target in (("startTime", "startTime"), ("completionTime", "completionTime")):
        if job_status.get(source):
            status[target] = job_status[source]
    node, simulated, scheduled = _placement(pod, simulated_nodes)
    if node:
        status["nodeName"] = node
    status["simulatedNode"] = simulated

    terminated = _termination(pod) or {}
    error = compiler_report(terminated.get("message") or "").get("error") or {}
    complete, failed = _job_condition(job, "Complete"), _job_condition(job, "Failed")
    extra: list[dict] = []
    if complete and published:
        status["phase"] = "Succeeded"
        fields, (compiled, *extra) = engine_status(published.manifest, published.digest, published.uri, False)
        status |= fields
    elif complete:
        status["phase"] = "Failed"
        status["reason"] = "EngineNotFound"
        status["message"] = "the compiler exited 0 but the registry holds no engine it reported"
        compiled = condition("Compiled", False, status["reason"], status["message"])
    elif failed:
        status["phase"] = "Failed"
        status["reason"] = error.get("reason") or failed.get("reason", "Failed")
        status["message"] = (
            error.get("message")
            or _killed(terminated, status["attempts"])
            or (terminated.get("message") or "").strip()
            or failed.get("message", "the compile Job failed")
        )[:4096]
        compiled = condition("Compiled", False, status["reason"], status["message"])
    elif node and (pod or {}).get("status", {}).get("phase") == "Running":
        status["phase"] = "Running"
        note = f" on a node {SIMULATED_NOTE}" if simulated else f" on node {node}"
        compiled = condition("Compiled", None, "Compiling", f"compiler running{note}")
    else:
        status["phase"] = "Pending"
        compiled = condition("Compiled", None, "Pending", "waiting for the compile pod to start")
    status["conditions"] = merge_conditions(old.get("conditions"), [scheduled, compiled, *extra], generation, now)
    return status
