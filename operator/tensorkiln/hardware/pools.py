"""Room for more serving replicas in a hardware class's pool, from its Nodes and the pods bound to them (pure).

A replica takes one resource from one node: GPUs on a GPU class (nvidia.com/gpu), CPU cores on a CPU
class. A node's room is its allocatable amount less what the pods bound to it request, and the pool
fits as many more replicas as its nodes' rooms hold whole (a replica is never split across nodes).
Nodes that take no new pod (cordoned, or not Ready) have no room.

What the operator sees of the pods is its watch cache, which holds TensorKiln's own pods only (compile
and serving pods, every model, every namespace): other workloads' requests are not counted, so the
room counted is an upper bound. What settles it is the scheduler: once one of the target's own pods
is Pending as Unschedulable, the pool is full, whatever the count says.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tensorkiln.hardware.prices import cpu_cores

GPU_RESOURCE = "nvidia.com/gpu"
FINISHED = ("Succeeded", "Failed")  # pods that hold nothing on their node any more


@dataclass(frozen=True)
class Room:
    """A target's replicas on its pool, and how many more the pool fits."""

    running: int  # the target's replicas bound to a node (scheduled), not being deleted
    free: int | None  # more replicas that fit; None: not known (no limit is assumed)
    pending: int  # the target's replicas the scheduler found no node for
    note: str  # how `free` was counted, for the placement's messages


def replica_request(kind: str, resources: dict) -> tuple[str, float] | None:
    """(resource, amount) one serving replica takes from its node, from the container's `resources`
    (builders.serving.triton_resources): GPUs on a GPU class, CPU cores on a CPU class; None when it
    requests none (nothing to count it against). Requests default to limits, as the API server does."""
    resource = GPU_RESOURCE if kind == "GPU" else "cpu"
    value = (resources.get("requests") or {}).get(resource) or (resources.get("limits") or {}).get(resource)
    amount = _amount(resource, value) if value is not None else 0.0
    return (resource, amount) if amount > 0 else None


def _amount(resource: str, value) -> float:
    """A quantity of `resource`: CPU as cores ("500m", "2"), extended resources as plain numbers."""
    return cpu_cores(value) if resource == "cpu" else float(value)


def pod_request(pod: dict, resource: str) -> float:
    """What `pod` takes of `resource` on its node: its containers' requests summed, or its largest init
    container's when more (Kubernetes' effective request)."""
    spec = pod.get("spec", {})

    def requested(container: dict) -> float:
        value = ((container.get("resources") or {}).get("requests") or {}).get(resource)
        return 0.0 if value is None else _amount(resource, value)

    main = sum(requested(c) for c in spec.get("containers") or [])
    init = max((requested(c) for c in spec.get("initContainers") or []), default=0.0)
    return max(main, init)


def takes_new_pods(node: dict) -> bool:
    if node.get("spec", {}).get("unschedulable"):
        return False
    ready = next((c for c in node.get("status", {}).get("conditions") or [] if c.get("type") == "Ready"), None)
    return ready is None or ready.get("status") == "True"


def unschedulable(pod: dict) -> bool:
    """The scheduler found no node for `pod` (PodScheduled False, reason Unschedulable)."""
    conditions = pod.get("status", {}).get("conditions") or []
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in conditions
    )


def _holds(pod: dict) -> bool:
    return pod.get("status", {}).get("phase") not in FINISHED


def free_replicas(nodes: list[dict], bound: list[dict], resource: str, per_replica: float) -> int:
    """How many more replicas, each taking `per_replica` of `resource`, fit on `nodes`, given the pods
    `bound` to them (any pods; those of other nodes are ignored)."""
    taken: dict[str, float] = {}
    for pod in bound:
        node = pod.get("spec", {}).get("nodeName")
        if node and _holds(pod):
            taken[node] = taken.get(node, 0.0) + pod_request(pod, resource)
    fits = 0
    for node in nodes:
        if not takes_new_pods(node):
            continue
        allocatable = (node.get("status", {}).get("allocatable") or {}).get(resource)
        if allocatable is None:
            continue
        left = _amount(resource, allocatable) - taken.get(node["metadata"]["name"], 0.0)
        fits += max(math.floor(left / per_replica + 1e-9), 0)
    return fits


def room(kind: str, resources: dict, nodes: list[dict], own: list[dict], bound: Sequence[dict] | None) -> Room:
    """The room of one target on its pool: `nodes` the class's Nodes, `own` the target's serving pods,
    `bound` every pod the cache holds on those nodes (None: not known)."""
    live = [p for p in own if _holds(p) and not p["metadata"].get("deletionTimestamp")]
    running = sum(1 for p in live if p.get("spec", {}).get("nodeName"))
    pending = sum(1 for p in live if not p.get("spec", {}).get("nodeName") and unschedulable(p))
    if pending:
        return Room(running, 0, pending, f"{pending} replica(s) unschedulable: the pool is full")
    request = replica_request(kind, resources)
    if request is None:
        return Room(running, None, 0, "a replica requests no GPU or CPU: room not counted")
    if bound is None:
        return Room(running, None, 0, "the pods on the pool are not known: room not counted")
    resource, amount = request
    try:
        free = free_replicas(nodes, bound, resource, amount)
    except ValueError as error:  # a quantity this module does not read: count no limit rather than guess one
        return Room(running, None, 0, f"room not counted: {error}")
    return Room(running, free, 0, f"{free} more fit ({amount:g} {resource} each, TensorKiln's pods counted)")
