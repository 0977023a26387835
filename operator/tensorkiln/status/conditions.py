"""Conditions as plain dicts, keyed by type, with lastTransitionTime kept across no-op updates."""

from datetime import datetime

from tensorkiln_api.common import kube_time


def merge_conditions(existing: list[dict], desired: list[dict], generation: int, now: datetime) -> list[dict]:
    """desired conditions (type, status, reason, message) with transition times carried over.

    lastTransitionTime changes only when a condition's status changes, as the API conventions ask.
    """
    previous = {c["type"]: c for c in existing or []}
    merged = []
    for condition in desired:
        old = previous.get(condition["type"])
        changed = old is None or old.get("status") != condition["status"]
        merged.append(
            {
                **condition,
                "observedGeneration": generation,
                "lastTransitionTime": kube_time(now) if changed else old["lastTransitionTime"],
            }
        )
    return merged


def condition(type_: str, status: bool | None, reason: str, message: str) -> dict:
    return {
        "type": type_,
        "status": {True: "True", False: "False", None: "Unknown"}[status],
        "reason": reason,
        "message": message,
    }


def find(conditions: list[dict] | None, type_: str) -> dict | None:
    return next((c for c in conditions or [] if c.get("type") == type_), None)
