"""Pure builders of Pod status: container states, phase, conditions, termination messages.

`ContainerState` is what the agent knows about one container; everything here turns such
records into the fields of `pod.status`, following the kubelet's rules.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

MAX_MESSAGE_BYTES = 4096  # the kubelet caps termination messages at 4 KiB
FALLBACK_LINES = 80
FALLBACK_BYTES = 2048
TERMINAL_PHASES = ("Succeeded", "Failed")


def timestamp(seconds: float | None = None, *, micro: bool = False) -> str:
    """RFC 3339 in UTC, as the API expects (MicroTime for Lease renewTime)."""
    seconds = time.time() if seconds is None else seconds
    text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return f"{text}.{int(seconds % 1 * 1e6):06d}Z" if micro else f"{text}Z"


def waiting(reason: str, message: str = "") -> dict:
    return {"waiting": {"reason": reason, **({"message": message} if message else {})}}


def running(started_at: str) -> dict:
    return {"running": {"startedAt": started_at}}


def terminated(
    exit_code: int,
    *,
    started_at: str | None,
    finished_at: str,
    message: str = "",
    reason: str | None = None,
    container_id: str | None = None,
) -> dict:
    state = {
        "exitCode": exit_code,
        "reason": reason or ("Completed" if exit_code == 0 else "Error"),
        "startedAt": started_at,
        "finishedAt": finished_at,
    }
    if message:
        state["message"] = message
    if container_id:
        state["containerID"] = container_id
    return {"terminated": state}


@dataclass
class ContainerState:
    name: str
    image: str
    state: dict = field(default_factory=lambda: waiting("ContainerCreating"))
    last_state: dict = field(default_factory=dict)
    container_id: str | None = None
    restart_count: int = 0
    ready: bool = False
    started: bool = False

    @property
    def exit_code(self) -> int | None:
        return self.state.get("terminated", {}).get("exitCode")

    def to_status(self) -> dict:
        status = {
            "name": self.name,
            "image": self.image,
            "imageID": f"local://{self.image}",
            "state": self.state,
            "lastState": self.last_state,
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restart_count,
        }
        if self.container_id:
            status["containerID"] = self.container_id
        return status


def exit_code(returncode: int) -> int:
    """Popen reports death by signal N as -N; Kubernetes reports 128+N."""
    return returncode if returncode >= 0 else 128 - returncode


def termination_message(file_text: str, log_text: str, *, exit_code: int, fallback_to_logs: bool) -> str:
    if file_text or not fallback_to_logs or exit_code == 0:
        return _cap(file_text, MAX_MESSAGE_BYTES, keep="head")
    tail = "".join(log_text.splitlines(keepends=True)[-FALLBACK_LINES:])
    return _cap(tail, FALLBACK_BYTES, keep="tail")


def restarts(restart_policy: str, *, init: bool, exit_code: int) -> bool:
    """Whether the kubelet starts a container again after it exited with exit_code."""
    if restart_policy == "Always" and not init:
        return True
    return restart_policy != "Never" and exit_code != 0


def pod_phase(
    restart_policy: str, inits: list[ContainerState], apps: list[ContainerState], *, final: bool = False
) -> str:
    """final: nothing restarts any more (the pod is being deleted or ran past its deadline)."""
    no_restart = restart_policy == "Never" or final
    if no_restart and any(c.exit_code not in (None, 0) for c in inits):
        return "Failed"
    if not all(c.exit_code == 0 for c in inits):
        return "Pending"
    codes = [c.exit_code for c in apps]
    if all(code is not None for code in codes):
        if all(code == 0 for code in codes) and (restart_policy != "Always" or final):
            return "Succeeded"
        if no_restart:
            return "Failed"
        return "Running"  # the failed ones are restarting
    if any("running" in c.state or c.last_state for c in apps):
        return "Running"
    return "Pending"


def pod_conditions(
    phase: str, inits: list[ContainerState], apps: list[ContainerState], previous: dict[str, dict], now: str
) -> list[dict]:
    """Initialized, ContainersReady and Ready; lastTransitionTime kept while the status holds."""
    terminal = phase in TERMINAL_PHASES
    incomplete = [c.name for c in inits if c.exit_code != 0]
    unready = [c.name for c in apps if not c.ready]
    if terminal:
        ready = (False, "PodCompleted", "")
    elif unready:
        ready = (False, "ContainersNotReady", f"containers with unready status: [{' '.join(unready)}]")
    else:
        ready = (True, "", "")
    initialized = (
        (False, "ContainersNotInitialized", f"containers with incomplete status: [{' '.join(incomplete)}]")
        if incomplete
        else (True, "", "")
    )
    conditions = []
    for kind, (ok, reason, message) in (("Initialized", initialized), ("ContainersReady", ready), ("Ready", ready)):
        status = "True" if ok else "False"
        before = previous.get(kind, {})
        since = before["lastTransitionTime"] if before.get("status") == status else now
        # None, not absent: the status is a strategic-merge patch, where null removes a stale reason.
        conditions.append(
            {
                "type": kind,
                "status": status,
                "lastProbeTime": None,
                "lastTransitionTime": since,
                "reason": reason or None,
                "message": message or None,
            }
        )
    return conditions


def pod_status(
    *,
    phase: str,
    inits: list[ContainerState],
    apps: list[ContainerState],
    conditions: list[dict],
    pod_ip: str | None,
    host_ip: str,
    start_time: str,
    reason: str | None = None,
    message: str | None = None,
) -> dict:
    status = {
        "phase": phase,
        "conditions": conditions,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "startTime": start_time,
        "containerStatuses": [c.to_status() for c in apps],
    }
    if pod_ip:  # none before the sandbox (IP) exists
        status["podIP"] = pod_ip
        status["podIPs"] = [{"ip": pod_ip}]
    if inits:
        status["initContainerStatuses"] = [c.to_status() for c in inits]
    if reason:
        status["reason"] = reason
        status["message"] = message or ""
    return status


def _cap(text: str, limit: int, *, keep: str) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    data = data[:limit] if keep == "head" else data[-limit:]
    return data.decode(errors="ignore")


def pod_event(pod: dict, *, node_name: str, reason: str, message: str, now: str, now_ns: int) -> dict:
    """A Warning Event about the pod, as the kubelet records one (named <pod>.<hex nanoseconds>)."""
    meta = pod["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{now_ns:x}", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
        },
        "reason": reason,
        "message": message,
        "type": "Warning",
        "count": 1,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "source": {"component": "kubelet", "host": node_name},
        "reportingComponent": "kubelet",
        "reportingInstance": node_name,
    }
