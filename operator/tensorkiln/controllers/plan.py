"""One target's serving objects, gather → plan → apply: the plan step (pure).

The reconciler gathers what exists under the target's derived name (`GATHERED`), builds what it
wants (builders.serving), and `plan` says what to write: the desired objects whose hash or fields
differ from what exists (controllers.owned), the owned objects no longer wanted, and the replicas
the scaler asks for. Only the apply step calls the API.
"""

from dataclasses import dataclass

from tensorkiln.controllers import owned

# (apiVersion, kind) of every object a target's serving may own, all named after the target.
GATHERED = (
    ("v1", "ConfigMap"),
    ("apps/v1", "Deployment"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
    ("v1", "Service"),
    ("policy/v1", "PodDisruptionBudget"),
)


@dataclass(frozen=True)
class Plan:
    applies: tuple[dict, ...] = ()  # desired objects, hash-annotated, in apply order
    deletes: tuple[tuple[str, str, str], ...] = ()  # (apiVersion, kind, name): owned, no longer wanted
    replicas: int | None = None  # through the scale subresource (the scaler's); None: the Deployment's own
    reasons: tuple[str, ...] = ()  # why each of `applies` is applied (owned.why_apply), for the log


def plan(desired: list[dict], observed: dict[str, dict | None], owner_uid: str, replicas: int | None = None) -> Plan:
    """`observed`: by kind, what exists under the target's name (None: nothing). Raises
    owned.NameConflict when a desired name is held by an object this owner does not control."""
    applies, reasons, wanted = [], [], set()
    for obj in desired:
        found = observed.get(obj["kind"])
        owned.check_owner(found, obj, owner_uid)
        hashed = owned.with_hash(obj)
        wanted.add(obj["kind"])
        if why := owned.why_apply(found, hashed):
            applies.append(hashed)
            reasons.append(why)
    deletes = [
        (api_version, kind, found["metadata"]["name"])
        for api_version, kind in GATHERED
        if kind not in wanted and owned.ours_to_delete(found := observed.get(kind), owner_uid)
    ]
    return Plan(tuple(applies), tuple(deletes), replicas, tuple(reasons))
