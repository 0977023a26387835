"""Container resources of the pods the operator runs on a hardware class (pure)."""

from tensorkiln.hardware.classes import HardwareClass
from tensorkiln.hardware.pools import GPU_RESOURCE


def for_class(requested: dict | None, defaults: dict[str, dict], target: HardwareClass) -> dict:
    """The user's resources, else the class kind's defaults; a GPU class's pod always gets its GPU
    (without one it would land on a GPU node and see none)."""
    if not requested:
        return defaults[target.kind]
    if target.kind != "GPU" or GPU_RESOURCE in requested.get("limits", {}):
        return requested
    return {**requested, "limits": {**requested.get("limits", {}), GPU_RESOURCE: "1"}}
