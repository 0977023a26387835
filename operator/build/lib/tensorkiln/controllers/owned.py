"""Objects a model owns: whether one may be written, and whether it needs to be (pure).

- An object that exists under a derived name but is controlled by another owner (or by none:
  made by hand or by another tool) is never overwritten: `NameConflict`, reported in status.
- The desired object carries a hash of itself in an annotation. Server-side apply removes the
  fields our field manager set before and the new desired object leaves out, so an apply is due
  when the hash differs (a field was dropped or changed) or when a desired field no longer holds
  in the observed object (a manual edit to put back); otherwise nothing is written.
"""

from tensorkiln.builders.naming import digest
from tensorkiln.controllers.diff import first_difference

DESIRED_HASH = "tensorkiln.dev/desired-hash"


class NameConflict(Exception):
    """A derived name is taken by an object this model does not control."""

    def __init__(self, kind: str, namespace: str, name: str, holder: str):
        self.kind, self.namespace, self.name, self.holder = kind, namespace, name, holder
        super().__init__(f"{kind} {namespace}/{name} is controlled by {holder}; it is never overwritten")


def controller(obj: dict) -> dict | None:
    return next((r for r in obj.get("metadata", {}).get("ownerReferences") or [] if r.get("controller")), None)


def holder(observed: dict | None, owner_uid: str) -> str | None:
    """Who controls `observed` if not the owner with `owner_uid`; None when it is ours or absent."""
    if observed is None:
        return None
    ref = controller(observed)
    if ref is None:
        return "no controller (it was not made by TensorKiln)"
    if ref.get("uid") == owner_uid:
        return None
    return f"{ref.get('kind')} {ref.get('name')} (uid {ref.get('uid')})"


def check_owner(observed: dict | None, desired: dict, owner_uid: str) -> None:
    other = holder(observed, owner_uid)
    if other is not None:
        meta = desired["metadata"]
        raise NameConflict(desired["kind"], meta.get("namespace", ""), meta["name"], other)


def with_hash(desired: dict) -> dict:
    """`desired` annotated with the hash of its content (without that annotation)."""
    meta = desired["metadata"]
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != DESIRED_HASH}
    bare = {**desired, "metadata": {**meta, "annotations": annotations} if annotations else _without(meta)}
    return {**desired, "metadata": {**meta, "annotations": {**annotations, DESIRED_HASH: digest(bare, 16)}}}


def _without(meta: dict) -> dict:
    return {k: v for k, v in meta.items() if k != "annotations"}


def why_apply(observed: dict | None, desired: dict) -> str | None:
    """Why `desired` (as `with_hash` made it) must be applied over `observed`; None: it need not."""
    if observed is None:
        return "new"
    applied = (observed.get("metadata", {}).get("annotations") or {}).get(DESIRED_HASH)
    if applied != desired["metadata"]["annotations"][DESIRED_HASH]:
        return "the desired object changed"
    drifted = first_difference(observed, desired)
    return None if drifted is None else f"{drifted} differs from the desired value"


def ours_to_delete(observed: dict | None, owner_uid: str) -> bool:
    """An object no longer desired is deleted only if it exists and this owner controls it."""
    return observed is not None and holder(observed, owner_uid) is None
