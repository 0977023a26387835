"""The Node and Lease objects that describe this machine.

`MachineFacts.probe()` is the only part that reads the machine; the builders are pure so the
objects can be checked in unit tests. Labels are truthful: architecture, CPU model and the CPU
features NFD would report. There are no taints and no kwok annotation: local-0 is a real node.
Each real node is also its own CPU pool, `tensorkiln.dev/cpu-pool: <node name>`: two of them on
one machine have the same CPU labels (one hardware class under Auto discovery), and this label
is what an Explicit pool selects to serve them as two classes.
Whether containers' memory limits are enforced (cgroups.py) is the condition MemoryLimitsEnforced,
with the reason when they are not: the node never claims what it does not do. The addresses are
InternalIP 127.0.0.1 and Hostname <node name> (which does not resolve: the API server prefers
InternalIP, kwok.yaml), and daemonEndpoints names the port of the kubelet endpoint (`kubectl logs`).
"""

from __future__ import annotations

import os
import platform
import shutil
from dataclasses import dataclass
from pathlib import Path

from tensorkiln.hardware.cpuinfo import cpu_labels, parse_cpuinfo

KUBELET_VERSION = "v1.37.2"
RUNTIME_VERSION = "tensorkiln-localnode://0.1.0"
MAX_PODS = "110"
LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_S = 40
HOST_IP = "127.0.0.1"
CPU_POOL_LABEL = "tensorkiln.dev/cpu-pool"
MEMORY_LIMITS = "MemoryLimitsEnforced"  # a node condition of ours, as node-problem-detector adds its own

_ARCHES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
_PRESSURES = (
    ("MemoryPressure", "KubeletHasSufficientMemory", "local node agent has sufficient memory available"),
    ("DiskPressure", "KubeletHasNoDiskPressure", "local node agent has no disk pressure"),
    ("PIDPressure", "KubeletHasSufficientPID", "local node agent has sufficient PID available"),
)


@dataclass(frozen=True)
class MachineFacts:
    cpuinfo: str
    meminfo: str
    machine: str
    cpu_count: int
    disk_bytes: int
    kernel: str
    os_image: str
    machine_id: str
    boot_id: str

    @classmethod
    def probe(cls, state_dir: Path) -> MachineFacts:
        return cls(
            cpuinfo=_read("/proc/cpuinfo"),
            meminfo=_read("/proc/meminfo"),
            machine=platform.machine(),
            cpu_count=os.cpu_count() or 1,
            disk_bytes=shutil.disk_usage(state_dir).total,
            kernel=platform.release(),
            os_image=_os_image(_read("/etc/os-release")),
            machine_id=_read("/etc/machine-id").strip(),
            boot_id=_read("/proc/sys/kernel/random/boot_id").strip(),
        )


def node_object(name: str, facts: MachineFacts) -> dict:
    """Metadata and spec of the Node; status is sent separately (`node_status`)."""
    info = parse_cpuinfo(facts.cpuinfo)
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": arch(facts.machine),
        "node.kubernetes.io/instance-type": "local",
        "tensorkiln.dev/local-node": "true",
        CPU_POOL_LABEL: name,
        **cpu_labels(info),
    }
    annotations = {"tensorkiln.dev/cpu-model-name": info.model_name} if info.model_name else {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {},
    }


def node_status(
    name: str,
    facts: MachineFacts,
    *,
    now: str,
    ready_since: str,
    memory_limits: tuple[bool, str],
    kubelet_port: int = 0,
) -> dict:
    """memory_limits: (enforced, how or why not); kubelet_port: where the agent's kubelet endpoint
    (kubelet_server.py) listens on HOST_IP, 0 when it does not."""
    capacity = {
        "cpu": str(facts.cpu_count),
        "memory": f"{mem_total_kib(facts.meminfo)}Ki",
        "pods": MAX_PODS,
        "ephemeral-storage": f"{facts.disk_bytes // 1024}Ki",
    }
    conditions = [_condition(kind, "False", reason, message, now, ready_since) for kind, reason, message in _PRESSURES]
    conditions.append(
        _condition("Ready", "True", "LocalNodeAgentReady", "local node agent is posting ready status", now, ready_since)
    )
    enforced, how = memory_limits
    reason = "MemoryCgroups" if enforced else "MemoryCgroupsUnavailable"
    conditions.append(_condition(MEMORY_LIMITS, str(enforced), reason, how, now, ready_since))
    return {
        "capacity": capacity,
        "allocatable": dict(capacity),  # nothing is reserved: requests are not enforced
        "conditions": conditions,
        "addresses": [{"type": "InternalIP", "address": HOST_IP}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
        "nodeInfo": {
            "machineID": facts.machine_id,
            "systemUUID": facts.machine_id,
            "bootID": facts.boot_id,
            "kernelVersion": facts.kernel,
            "osImage": facts.os_image,
            "containerRuntimeVersion": RUNTIME_VERSION,
            "kubeletVersion": KUBELET_VERSION,
            "operatingSystem": "linux",
            "architecture": arch(facts.machine),
        },
    }


def lease_object(name: str, node_uid: str, *, renew_time: str) -> dict:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": LEASE_NAMESPACE,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid}],
        },
        "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION_S, "renewTime": renew_time},
    }


def arch(machine: str) -> str:
    return _ARCHES.get(machine.lower(), machine.lower())


def mem_total_kib(meminfo: str) -> int:
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1])
    raise ValueError("MemTotal missing from /proc/meminfo")


def _condition(kind: str, status: str, reason: str, message: str, now: str, since: str) -> dict:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": since,
    }


def _os_image(os_release: str) -> str:
    for line in os_release.splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"')
    return platform.system()


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""
