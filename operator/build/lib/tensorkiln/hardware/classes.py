"""Group Nodes into hardware classes from the labels real clusters carry (pure).

GPU nodes are grouped by NVIDIA GPU Feature Discovery's `nvidia.com/gpu.product`; CPU nodes
(no GPU product) by architecture, vendor and best vector ISA from Node Feature Discovery's
labels, because an engine tuned for AMX is not the engine for an AVX2-only machine.
"""

import re
import threading
from dataclasses import dataclass, field

from tensorkiln.hardware.prices import class_price

GPU_PRODUCT = "nvidia.com/gpu.product"
ARCH = "kubernetes.io/arch"
CPU_VENDOR = "feature.node.kubernetes.io/cpu-model.vendor_id"
CPUID = "feature.node.kubernetes.io/cpu-cpuid."
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}

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
    product: str  # GPU product label, or a CPU description
    node_selector: dict[str, str]
    # Extra required node-affinity expressions (CPU classes exclude better ISAs).
    match_expressions: tuple[dict, ...] = ()
    tolerations: tuple[dict, ...] = ()
    nodes: tuple[str, ...] = ()
    simulated: bool = False  # every node of the class is simulated by kwok
    labels: dict[str, str] = field(default_factory=dict)  # fingerprint labels of a sample node
    # Hourly price of one GPU (GPU class) or CPU core (CPU class), from its nodes' price annotation
    # (tensorkiln.hardware.prices); None: no price, or a bad one, and then price_error says why.
    price_per_hour: float | None = None
    price_error: str | None = None

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


def _schedulable(node: dict) -> bool:
    if node.get("spec", {}).get("unschedulable"):
        return False
    return "node-role.kubernetes.io/control-plane" not in node_labels(node)


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


def _gpu_class_key(labels: dict[str, str]) -> tuple[str, str]:
    product = labels[GPU_PRODUCT]
    return dns_label(product), product


def _cpu_class_key(labels: dict[str, str]) -> tuple[str, str]:
    arch = labels.get(ARCH, "amd64")
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
        if not _schedulable(node):
            continue
        labels = node_labels(node)
        kind = "GPU" if GPU_PRODUCT in labels else "CPU"
        name, product = (_gpu_class_key if kind == "GPU" else _cpu_class_key)(labels)
        groups.setdefault(name, []).append(node)
        descriptions[name] = (kind, product)
    return [_build_class(name, *descriptions[name], members) for name, members in sorted(groups.items())]


def _build_class(name: str, kind: str, product: str, members: list[dict]) -> HardwareClass:
    sample = node_labels(members[0])
    node_names = tuple(sorted(n["metadata"]["name"] for n in members))
    simulated = all(is_simulated(n) for n in members)
    price, price_error = class_price(members)
    if kind == "GPU":
        fingerprint = {k: v for k, v in sample.items() if k.startswith(("nvidia.com/gpu.", "nvidia.com/cuda."))}
        return HardwareClass(
            name=name,
            kind="GPU",
            product=product,
            node_selector={GPU_PRODUCT: product},
            tolerations=(GPU_TOLERATION,),
            nodes=node_names,
            simulated=simulated,
            labels=fingerprint,
            price_per_hour=price,
            price_error=price_error,
        )
    level = cpu_isa_level(sample)
    selector = {ARCH: sample.get(ARCH, "amd64")}
    if CPU_VENDOR in sample:
        selector[CPU_VENDOR] = sample[CPU_VENDOR]
    required_flags = dict(CPU_ISA_LEVELS)[level]
    selector |= {CPUID + flag: "true" for flag in required_flags}
    return HardwareClass(
        name=name,
        kind="CPU",
        product=product,
        node_selector=selector,
        match_expressions=(
            {"key": GPU_PRODUCT, "operator": "DoesNotExist"},
            *_better_isa_exclusions(level),
        ),
        nodes=node_names,
        simulated=simulated,
        labels={k: v for k, v in sample.items() if k.startswith(CPUID) or k in (ARCH, CPU_VENDOR)},
        price_per_hour=price,
        price_error=price_error,
    )
