"""Group Nodes into hardware classes from the labels real clusters carry (pure).

GPU nodes are grouped by NVIDIA GPU Feature Discovery's `nvidia.com/gpu.product`; CPU nodes
(no GPU) by architecture, vendor and best vector ISA from Node Feature Discovery's labels,
because an engine tuned for AMX is not the engine for an AVX2-only machine.

A cluster without these labellers (kind, a bare kubeadm cluster) gets classes that claim no more
than its nodes say:

- nodes with `nvidia.com/gpu` capacity but no product label (no GPU Feature Discovery) make one GPU
  class, `nvidia-gpu-unlabelled`, whatever their GPUs are: nothing tells the products apart, and its
  `note` says which label would (review.checks reports it). There is no label to select them by, so
  its pods are placed by the nodes' `kubernetes.io/hostname`, and CPU classes keep off those hostnames
  (`NotIn`): CPU pods would otherwise land on GPU nodes that carry no taint. Those hostname lists
  change as such nodes come and go, and with them the classes' pod templates;
- a CPU node without NFD's CPU labels is in `cpu-<arch>`, whose product says that its ISA is unknown
  (each compile pod fingerprints its node, and the engine's manifest records it), and whose affinity
  keeps it off the nodes NFD labelled, which have classes of their own.

A node counts when its class's pods can be placed there: it is not cordoned, and its class tolerates
every taint on it that keeps pods off (NoSchedule, NoExecute). GPU classes tolerate
`nvidia.com/gpu:NoSchedule`, CPU classes nothing. So kind's single node (the control-plane role
label, no taint) counts, and a kubeadm control plane (`node-role.kubernetes.io/control-plane:
NoSchedule`) or a pool tainted for other work does not: an Explicit pool with its tolerations targets
such nodes. The node lifecycle's condition taints (`node.kubernetes.io/not-ready`, `unreachable`,
`memory-pressure`, ...) do not count: they come and go with the node's state, which the scheduler
and pools.takes_new_pods read, and a class does not change with them.
"""

import re
import threading
from dataclasses import dataclass, field

from tensorkiln.hardware.pools import GPU_RESOURCE
from tensorkiln.hardware.prices import class_price

GPU_PRODUCT = "nvidia.com/gpu.product"
ARCH = "kubernetes.io/arch"
HOSTNAME = "kubernetes.io/hostname"
CPU_VENDOR = "feature.node.kubernetes.io/cpu-model.vendor_id"
CPUID = "feature.node.kubernetes.io/cpu-cpuid."
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
TOLERATIONS = {"GPU": (GPU_TOLERATION,), "CPU": ()}  # what each kind's pods tolerate
# Taint effects that keep an untolerating pod off a node (PreferNoSchedule only discourages it).
KEEPS_PODS_OFF = ("NoSchedule", "NoExecute")
CONDITION_TAINTS = "node.kubernetes.io/"  # the node lifecycle's taints for the node's state
UNLABELLED_GPU_CLASS = "nvidia-gpu-unlabelled"
UNLABELLED_GPU_PRODUCT = f"NVIDIA GPU (product unknown: no {GPU_PRODUCT} label)"
NODES_LISTED = 10  # nodes a note names before it counts the rest

# Best first: a node is classed by the first level whose flags it has.
CPU_ISA_LEVELS = (
    ("amx", ("AMXBF16", "AMXINT8")),
    ("avx512vnni", ("AVX512VNNI",)),
    ("avx512", ("AVX512F",)),
    ("avx2", ("AVX2",)),
    ("baseline", ()),
)


@dataclass(frozen=True)
class HardwareClass:
    """One kind of hardware a compiled engine is specific to."""

    name: str  # DNS-1123 label, stable: used in object names
    kind: str  # "GPU" or "CPU"
    product: str  # GPU product label (UNLABELLED_GPU_PRODUCT without one), or a CPU description
    node_selector: dict[str, str]
    # Extra required node-affinity expressions: CPU classes exclude better ISAs, known vendors when theirs
    # is not, and GPU nodes without a product label, which that GPU class selects by hostname.
    match_expressions: tuple[dict, ...] = ()
    tolerations: tuple[dict, ...] = ()
    nodes: tuple[str, ...] = ()
    simulated: bool = False  # every node of the class is simulated by kwok
    labels: dict[str, str] = field(default_factory=dict)  # fingerprint labels of a sample node
    # Hourly price of one GPU (GPU class) or CPU core (CPU class), from its nodes' price annotation
    # (tensorkiln.hardware.prices); None: no price, or a bad one, and then price_error says why.
    price_per_hour: float | None = None
    price_error: str | None = None
    # What the nodes' labels cannot tell apart within the class, and which label would: set on the class
    # of GPUs without a product label; review.checks reports it as a SpecValid warning. None: nothing.
    note: str | None = None

    def node_affinity(self) -> dict | None:
        """Required node affinity for what nodeSelector cannot say (absent labels)."""
        if not self.match_expressions:
            return None
        return {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": list(self.match_expressions)}]
            }
        }


def dns_label(text: str, max_length: int = 40) -> str:
    label = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return label[:max_length].rstrip("-") or "unknown"


def node_labels(node: dict) -> dict[str, str]:
    return node.get("metadata", {}).get("labels") or {}


def is_simulated(node: dict) -> bool:
    return (node.get("metadata", {}).get("annotations") or {}).get(KWOK_ANNOTATION) == "fake"


def _has_gpus(node: dict) -> bool:
    """The node offers nvidia.com/gpu: its capacity or allocatable is not zero (the API server writes
    quantities canonically, zero as "0"), whether or not GPU Feature Discovery labelled it."""
    status = node.get("status") or {}
    return any(str((status.get(field) or {}).get(GPU_RESOURCE, "0")) != "0" for field in ("capacity", "allocatable"))


def _node_kind(node: dict) -> str:
    return "GPU" if GPU_PRODUCT in node_labels(node) or _has_gpus(node) else "CPU"


def _hostname(node: dict) -> str:
    """What node affinity selects the node by: its hostname label (the kubelet sets it, by default to
    the node's name)."""
    return node_labels(node).get(HOSTNAME, node["metadata"]["name"])


def _tolerates(toleration: dict, taint: dict) -> bool:
    """Kubernetes' rule (core/v1 Toleration.ToleratesTaint): the effects match (or the toleration sets
    none), and the keys with Exists (an empty key: every key), or keys and values with Equal."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint.get("key")
    return toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get("value", "")


def _placement_taints(node: dict) -> list[dict]:
    """The node's taints that keep untolerating pods off, but for the node lifecycle's condition taints
    (module docstring): those a class must tolerate for the node to count."""
    return [
        taint
        for taint in (node.get("spec") or {}).get("taints") or []
        if taint.get("effect") in KEEPS_PODS_OFF and not taint.get("key", "").startswith(CONDITION_TAINTS)
    ]


def _schedulable(node: dict, tolerations: tuple[dict, ...]) -> bool:
    """Pods with `tolerations` can be placed on the node: it is not cordoned, and they tolerate every
    taint that keeps pods off, but for the node lifecycle's condition taints (module docstring)."""
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    return all(any(_tolerates(toleration, taint) for toleration in tolerations) for taint in _placement_taints(node))


def discovery_key(node: dict) -> tuple:
    """What discovery reads of a node to class it: its labels, the taints that keep pods off (not the
    node lifecycle's condition taints), whether it is cordoned, and whether it offers nvidia.com/gpu.
    Two versions of a node with equal keys are in the same class, or in none; a heartbeat or any other
    status change leaves the key as it was, unless it changes whether the node offers GPUs (_has_gpus).
    (Annotations, which a class's price and `simulated` read, are not in it.)"""
    taints = sorted((t.get("key", ""), t.get("value", ""), t.get("effect", "")) for t in _placement_taints(node))
    return (
        tuple(sorted(node_labels(node).items())),
        tuple(taints),
        bool((node.get("spec") or {}).get("unschedulable")),
        _has_gpus(node),
    )


def cpu_isa_level(labels: dict[str, str]) -> str:
    for level, flags in CPU_ISA_LEVELS:
        if all(labels.get(CPUID + flag) == "true" for flag in flags):
            return level
    return "baseline"


def _better_isa_exclusions(level: str) -> tuple[dict, ...]:
    """Affinity terms that keep a CPU class off nodes of a better ISA level (their own class)."""
    names = [name for name, _ in CPU_ISA_LEVELS]
    better = CPU_ISA_LEVELS[: names.index(level)]
    return tuple({"key": CPUID + flags[0], "operator": "DoesNotExist"} for _, flags in better if flags)


def _nfd_cpu_exclusions() -> tuple[dict, ...]:
    """Every label a CPU class is told apart by (the vendor, each ISA level's flag) absent: the affinity
    that _build_class gives a class of no vendor and the baseline level, which keeps the class of CPUs
    NFD did not label off the nodes it did."""
    return ({"key": CPU_VENDOR, "operator": "DoesNotExist"}, *_better_isa_exclusions("baseline"))


def _cpu_labelled(labels: dict[str, str]) -> bool:
    """Node Feature Discovery labelled the node's CPU: it has a label that _nfd_cpu_exclusions excludes."""
    return any(term["key"] in labels for term in _nfd_cpu_exclusions())


def _gpu_class_key(labels: dict[str, str]) -> tuple[str, str]:
    if GPU_PRODUCT not in labels:
        return UNLABELLED_GPU_CLASS, UNLABELLED_GPU_PRODUCT
    product = labels[GPU_PRODUCT]
    return dns_label(product), product


def _cpu_class_key(labels: dict[str, str]) -> tuple[str, str]:
    arch = labels.get(ARCH, "amd64")
    if not _cpu_labelled(labels):
        unknown = "no Node Feature Discovery CPU labels: ISA unknown; each compile pod fingerprints its node"
        return dns_label(f"cpu-{arch}"), f"{arch} CPU ({unknown})"
    vendor = labels.get(CPU_VENDOR, "unknown")
    level = cpu_isa_level(labels)
    return dns_label(f"cpu-{arch}-{vendor}-{level}"), f"{vendor} {arch} CPU ({level})"


class _LastDiscovery:
    """The classes of the last set of nodes seen, by every node's name and resourceVersion: every
    reconcile discovers the classes (three times, with the admission checks), and at a hundred
    nodes that is milliseconds each, while the nodes seldom change. Nodes without a
    resourceVersion (built in tests) are never remembered."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple | None = None
        self._classes: list[HardwareClass] = []

    def classes(self, nodes: list[dict]) -> list[HardwareClass]:
        versions = tuple((n["metadata"].get("name"), n["metadata"].get("resourceVersion")) for n in nodes)
        key = versions if all(version for _, version in versions) else None
        with self._lock:
            if key is not None and key == self._key:
                return list(self._classes)
        classes = _discover(nodes)
        if key is not None:
            with self._lock:
                self._key, self._classes = key, classes
        return list(classes)


_last = _LastDiscovery()


def discover(nodes: list[dict]) -> list[HardwareClass]:
    """Hardware classes present on schedulable nodes, sorted by name."""
    return _last.classes(nodes)


def _discover(nodes: list[dict]) -> list[HardwareClass]:
    groups: dict[str, list[dict]] = {}
    descriptions: dict[str, tuple[str, str]] = {}
    for node in nodes:
        kind = _node_kind(node)
        if not _schedulable(node, TOLERATIONS[kind]):
            continue
        name, product = (_gpu_class_key if kind == "GPU" else _cpu_class_key)(node_labels(node))
        groups.setdefault(name, []).append(node)
        descriptions[name] = (kind, product)
    unlabelled_gpus = tuple(sorted(_hostname(n) for n in groups.get(UNLABELLED_GPU_CLASS, [])))
    return [
        _build_class(name, *descriptions[name], members, unlabelled_gpus) for name, members in sorted(groups.items())
    ]


def _listed(names: tuple[str, ...]) -> str:
    shown = ", ".join(names[:NODES_LISTED])
    return shown + (f" and {len(names) - NODES_LISTED} more" if len(names) > NODES_LISTED else "")


def _unlabelled_gpus_note(node_names: tuple[str, ...]) -> str:
    nodes = f"node {node_names[0]} has" if len(node_names) == 1 else f"nodes {_listed(node_names)} have"
    return (
        f"{nodes} {GPU_RESOURCE} capacity but no {GPU_PRODUCT} label: their GPUs are taken as one product "
        f"(hardware class {UNLABELLED_GPU_CLASS}); install GPU Feature Discovery (NVIDIA GPU Operator) so "
        "that each product gets its own engine"
    )


def _build_class(
    name: str, kind: str, product: str, members: list[dict], unlabelled_gpus: tuple[str, ...]
) -> HardwareClass:
    """The class of `members`; `unlabelled_gpus` the hostnames of the GPU nodes without a product label,
    which the unlabelled GPU class is placed on and CPU classes keep off."""
    sample = node_labels(members[0])
    node_names = tuple(sorted(n["metadata"]["name"] for n in members))
    simulated = all(is_simulated(n) for n in members)
    price, price_error = class_price(members)
    if kind == "GPU":
        fingerprint = {k: v for k, v in sample.items() if k.startswith(("nvidia.com/gpu.", "nvidia.com/cuda."))}
        labelled = GPU_PRODUCT in sample
        by_hostname = {"key": HOSTNAME, "operator": "In", "values": list(unlabelled_gpus)}
        return HardwareClass(
            name=name,
            kind="GPU",
            product=product,
            node_selector={GPU_PRODUCT: product} if labelled else {},
            match_expressions=() if labelled else (by_hostname,),
            tolerations=TOLERATIONS["GPU"],
            nodes=node_names,
            simulated=simulated,
            labels=fingerprint,
            price_per_hour=price,
            price_error=price_error,
            note=None if labelled else _unlabelled_gpus_note(node_names),
        )
    level = cpu_isa_level(sample)
    selector = {ARCH: sample.get(ARCH, "amd64")}
    if CPU_VENDOR in sample:
        selector[CPU_VENDOR] = sample[CPU_VENDOR]
    required_flags = dict(CPU_ISA_LEVELS)[level]
    selector |= {CPUID + flag: "true" for flag in required_flags}
    off_gpus = ({"key": HOSTNAME, "operator": "NotIn", "values": list(unlabelled_gpus)},) if unlabelled_gpus else ()
    # A class of no vendor keeps off the nodes whose vendor gives them a class of their own.
    vendor_unknown = () if CPU_VENDOR in sample else ({"key": CPU_VENDOR, "operator": "DoesNotExist"},)
    return HardwareClass(
        name=name,
        kind="CPU",
        product=product,
        node_selector=selector,
        match_expressions=(
            {"key": GPU_PRODUCT, "operator": "DoesNotExist"},
            *off_gpus,
            *vendor_unknown,
            *_better_isa_exclusions(level),
        ),
        nodes=node_names,
        simulated=simulated,
        labels={k: v for k, v in sample.items() if k.startswith(CPUID) or k in (ARCH, CPU_VENDOR)},
        price_per_hour=price,
        price_error=price_error,
    )
