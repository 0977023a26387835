"""Container resources of the pods the operator runs on a hardware class, and volume sizes (pure)."""

import math

from tensorkiln_api.common import quantity_value

from tensorkiln.hardware.classes import HardwareClass
from tensorkiln.hardware.pools import GPU_RESOURCE

MEBIBYTE = 1 << 20
_BINARY_SUFFIXES = ("Mi", "Gi", "Ti", "Pi", "Ei")


def for_class(requested: dict | None, defaults: dict[str, dict], target: HardwareClass) -> dict:
    """The user's resources, else the class kind's defaults; a GPU class's pod always gets its GPU
    (without one it would land on a GPU node and see none)."""
    if not requested:
        return defaults[target.kind]
    if target.kind != "GPU" or GPU_RESOURCE in requested.get("limits", {}):
        return requested
    return {**requested, "limits": {**requested.get("limits", {}), GPU_RESOURCE: "1"}}


def bounded(resources: dict, default: dict) -> dict:
    """`resources` with what every container the operator runs has: a cpu and a memory request, and a
    memory limit. A missing request is its limit where one is given (as the API server defaults it), else
    `default`'s (the class kind's defaults); a missing memory limit is the larger of the memory request and
    `default`'s memory limit (its memory request where it has none), so that a pod asked to request little
    keeps the default's headroom rather than being OOM-killed at its request. No CPU limit is added: it
    throttles, and a CFS quota would also change what the compiler and Triton measure and size their
    threads by."""
    requests = dict(resources.get("requests") or {})
    limits = dict(resources.get("limits") or {})
    for name in ("cpu", "memory"):
        if name not in requests:
            requests[name] = limits.get(name, default["requests"][name])
    if "memory" not in limits:
        floor = (default.get("limits") or {}).get("memory", default["requests"]["memory"])
        limits["memory"] = max(requests["memory"], floor, key=quantity_value)  # a tie keeps the request's spelling
    return {**resources, "requests": requests, "limits": limits}


def mebibytes(size: int | str) -> str:
    """`size` (bytes, or a quantity such as 20Gi) rounded up to whole MiB, as the API server writes it back
    (the largest binary suffix that keeps it whole: 1Gi, not 1024Mi), so that the object the operator
    wants and the one it reads back compare equal."""
    value = math.ceil(quantity_value(size) / MEBIBYTE)
    suffix = 0
    while value and value % 1024 == 0 and suffix < len(_BINARY_SUFFIXES) - 1:
        value, suffix = value // 1024, suffix + 1
    return f"{value}{_BINARY_SUFFIXES[suffix]}"
