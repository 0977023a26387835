"""CompileJob status from its Job and that Job's newest pod (pure)."""

import json
from dataclasses import dataclass
from datetime import datetime

from tensorkiln_api.registry.manifest import EngineManifest

from tensorkiln.status.conditions import condition, find, merge_conditions
from tensorkiln.status.engine import engine_status
from tensorkiln.status.pods import stuck_container

SIMULATED_NOTE = "simulated by kwok: no container runs there, so no engine is built"
# Compile Jobs started again after failures that are the cluster's fault (cluster_fault), per CompileJob.
CLUSTER_RETRY_BUDGET = 3
# A deadline counts as the model's (the compile is too slow) once the compiler ran this share of it.
DEADLINE_SHARE_RUN = 0.9


def job_condition(job: dict, type_: str) -> dict | None:
    """The Job's condition `type_` (Complete, Failed) when it is True, else None."""
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
    report = compiler_report(terminated.get("message") or "")
    error = report.get("error") or {}
    complete, failed = job_condition(job, "Complete"), job_condition(job, "Failed")
    extra: list[dict] = []
    if complete and published:
        status["phase"] = "Succeeded"
        # "cached": the pod fetched the source, checked its digest and found the engine (another
        # namespace's, or one published by a try the operator did not see end): nothing compiled.
        cached = report.get("cached") is True
        fields, (compiled, *extra) = engine_status(published.manifest, published.digest, published.uri, cached)
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
    elif node and terminated:
        # The container ended before the Job controller recorded its verdict (or started a retry):
        # the compile is over on that node, not waiting to start.
        status["phase"] = "Running"
        code = terminated.get("exitCode")
        compiled = condition(
            "Compiled", None, "CompilerExited", f"compiler exited {code} on node {node}; waiting for the Job's verdict"
        )
    elif stuck := stuck_container(pod):
        # A wrong image, a missing Secret: the pod waits until someone mends it, and says why.
        status["phase"] = "Pending"
        reason, message = stuck
        compiled = condition("Compiled", None, reason, f"compile pod {pod['metadata']['name']} cannot start: {message}")
    else:
        status["phase"] = "Pending"
        compiled = condition("Compiled", None, "Pending", _waiting(compile_job, pod, node))
    if old.get("clusterRetries"):
        status["clusterRetries"] = old["clusterRetries"]
    status["conditions"] = merge_conditions(old.get("conditions"), [scheduled, compiled, *extra], generation, now)
    return status


def _waiting(compile_job: dict, pod: dict | None, node: str | None) -> str:
    """Why a placed pod may not start yet, where the pod's status cannot say: a volume it waits for (the
    kubelet reports a missing Secret only as a FailedMount Event, which the operator does not read)."""
    source = compile_job["spec"].get("source") or {}
    secret = (source.get("credentials") or {}).get("secretName")
    if not (pod and node and secret):
        return "waiting for the compile pod to start"
    return (
        f"waiting for the compile pod to start; it mounts the Secret {secret!r} of spec.source.credentials: "
        f"if that does not exist, `kubectl describe pod {pod['metadata']['name']}` shows FailedMount"
    )


def cluster_fault(compile_job: dict, job: dict, pod: dict | None, published: Published | None) -> str | None:
    """Why a finished Job failed for the cluster's fault, not the model's: None when the model's (a
    compiler report, a crash, a kill for memory, a deadline the compiler used up) or not failed."""
    if job_condition(job, "Complete"):
        return None if published else "the registry holds no engine the compiler reported: removed since"
    failed, terminated = job_condition(job, "Failed"), _termination(pod)
    if not failed or compiler_report((terminated or {}).get("message") or "").get("error"):
        return None
    deadline = compile_job["spec"].get("deadlineSeconds", 3600)
    if pod is None:
        gone = "the compile pod is gone (its node was lost, deleted or stopped)"
        if failed.get("reason") == "DeadlineExceeded":  # a cluster resumed past it: the Job controller deleted it
            return f"the Job's deadline ({deadline} s) passed and {gone}: an outage?"
        return gone
    pod_status = pod.get("status", {})
    if pod_status.get("reason") == "Evicted" or find(pod_status.get("conditions"), "DisruptionTarget"):
        return f"the compile pod was evicted: {pod_status.get('message', 'a disruption')}"
    if failed.get("reason") == "DeadlineExceeded":
        ran = _seconds_run(terminated)
        if ran is None or ran < DEADLINE_SHARE_RUN * deadline:
            run = "never ran" if ran is None else f"ran {ran:.0f} s of it"
            return f"the Job's deadline ({deadline} s) passed while the compiler could not run (it {run}): an outage?"
    return None


def _seconds_run(terminated: dict | None) -> float | None:
    started, finished = (terminated or {}).get("startedAt"), (terminated or {}).get("finishedAt")
    if not (started and finished):
        return None
    return (datetime.fromisoformat(finished) - datetime.fromisoformat(started)).total_seconds()


def retrying_status(status: dict, fault: str, generation: int, now: datetime) -> dict:
    """`status` (a failed compile) as one started again after `fault`: Pending, one cluster retry more."""
    retries = status.get("clusterRetries", 0) + 1
    message = f"retry {retries} of {CLUSTER_RETRY_BUDGET}: {fault}"
    desired = [c for c in status.get("conditions", []) if c["type"] == "Scheduled"]
    desired.append(condition("Compiled", None, "RetryingAfterClusterFault", message))
    kept = {k: v for k, v in status.items() if k not in ("reason", "message", "completionTime", "conditions")}
    return {
        **kept,
        "phase": "Pending",
        "clusterRetries": retries,
        "conditions": merge_conditions(status.get("conditions"), desired, generation, now),
    }
