"""Which hardware classes an InferenceModel targets (pure)."""

from fnmatch import fnmatchcase

from tensorkiln.hardware.classes import (
    GPU_PRODUCT,
    GPU_TOLERATION,
    HardwareClass,
    dns_label,
    is_simulated,
    node_labels,
)
from tensorkiln.hardware.prices import class_price


def _selector_matches(selector: dict[str, str], node: dict) -> bool:
    labels = node_labels(node)
    return all(labels.get(k) == v for k, v in selector.items())


def _wanted_gpu(product: str, include: list[str], exclude: list[str]) -> bool:
    if include and not any(fnmatchcase(product, pattern) for pattern in include):
        return False
    return not any(fnmatchcase(product, pattern) for pattern in exclude)


def select_auto(hardware: dict, classes: list[HardwareClass]) -> list[HardwareClass]:
    """Auto mode: every GPU product passing include/exclude, plus CPU classes if asked for."""
    include, exclude = hardware.get("include", []), hardware.get("exclude", [])
    return [
        c
        for c in classes
        if (c.kind == "GPU" and _wanted_gpu(c.product, include, exclude))
        or (c.kind == "CPU" and hardware.get("includeCPU", False))
    ]


def select_explicit(hardware: dict, nodes: list[dict]) -> list[HardwareClass]:
    """Explicit mode: one class per listed pool, its nodes being those its selector matches."""
    targets = []
    for pool in hardware.get("pools", []):
        members = [n for n in nodes if _selector_matches(pool["nodeSelector"], n)]
        tolerations = tuple(pool.get("tolerations", []))
        if pool["kind"] == "GPU" and not tolerations:
            tolerations = (GPU_TOLERATION,)
        price, price_error = class_price(members)
        targets.append(
            HardwareClass(
                name=dns_label(pool["name"]),
                kind=pool["kind"],
                product=", ".join(sorted({node_labels(n).get(GPU_PRODUCT, "cpu") for n in members}))
                or "no matching nodes",
                node_selector=dict(pool["nodeSelector"]),
                tolerations=tolerations,
                nodes=tuple(sorted(n["metadata"]["name"] for n in members)),
                simulated=bool(members) and all(is_simulated(n) for n in members),
                price_per_hour=price,
                price_error=price_error,
            )
        )
    return targets


def select_targets(hardware: dict, classes: list[HardwareClass], nodes: list[dict]) -> list[HardwareClass]:
    """The targets of `spec.hardware` (camelCase dict, defaults applied)."""
    if hardware.get("mode") == "Explicit":
        return select_explicit(hardware, nodes)
    return select_auto(hardware, classes)
