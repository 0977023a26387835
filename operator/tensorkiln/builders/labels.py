"""Labels and owner references shared by everything the operator creates."""

from tensorkiln_api import API_VERSION

MODEL = "tensorkiln.dev/model"
HARDWARE_CLASS = "tensorkiln.dev/hardware-class"
COMPILE_JOB = "tensorkiln.dev/compile-job"
OPTIONS_HASH = "tensorkiln.dev/options-hash"
RECOMPILE = "tensorkiln.dev/recompile"  # a compile Job for a target that already serves an engine
MANAGED_BY = {"app.kubernetes.io/managed-by": "tensorkiln"}


def owner_reference(owner: dict, kind: str) -> dict:
    """Controller owner reference: deleting the owner garbage-collects the object."""
    return {
        "apiVersion": owner.get("apiVersion", API_VERSION),
        "kind": kind,
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
