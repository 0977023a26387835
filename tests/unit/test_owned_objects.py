"""Whether an owned object may be written, and whether it must be (controllers.owned)."""

import pytest
from tensorkiln.controllers.owned import (
    DESIRED_HASH,
    NameConflict,
    check_owner,
    holder,
    ours_to_delete,
    why_apply,
    with_hash,
)

UID = "uid-1"


def service(owner_uid=UID, selector=None, annotations=None, **extra):
    refs = [] if owner_uid is None else [{"kind": "InferenceModel", "name": "x", "uid": owner_uid, "controller": True}]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "x", "namespace": "ns", "ownerReferences": refs, "annotations": annotations or {}},
        "spec": {"selector": selector or {"app": "x"}, **extra},
    }


def test_an_object_of_another_owner_or_of_none_is_a_conflict_naming_it():
    assert holder(None, UID) is None and holder(service(), UID) is None
    assert holder(service(owner_uid="uid-2"), UID) == "InferenceModel x (uid uid-2)"
    with pytest.raises(NameConflict, match=r"Service ns/x is controlled by no controller"):
        check_owner(service(owner_uid=None), service(), UID)


def test_an_unchanged_desired_object_needs_no_write():
    desired = with_hash(service())
    observed = {**desired, "metadata": {**desired["metadata"], "resourceVersion": "7"}, "status": {}}
    assert not why_apply(observed, desired)


def test_a_dropped_field_is_seen_through_the_hash_though_every_desired_field_still_holds():
    before = with_hash(service(sessionAffinity="ClientIP"))
    after = with_hash(service())
    assert before["metadata"]["annotations"][DESIRED_HASH] != after["metadata"]["annotations"][DESIRED_HASH]
    # the apply then removes sessionAffinity (server-side apply)
    assert why_apply(before, after) == "the desired object changed"
    assert why_apply(None, after) == "new"


def test_a_manual_edit_is_put_back():
    desired = with_hash(service())
    edited = with_hash(service())
    edited["spec"]["selector"] = {"app": "someone-else"}
    assert why_apply(edited, desired) == "spec.selector.app differs from the desired value"


def test_the_hash_ignores_itself_and_keeps_other_annotations():
    desired = with_hash(service(annotations={"a": "1"}))
    assert with_hash(desired) == desired and desired["metadata"]["annotations"]["a"] == "1"


def test_only_an_existing_object_of_ours_is_deleted():
    assert ours_to_delete(service(), UID)
    assert not ours_to_delete(None, UID)
    assert not ours_to_delete(service(owner_uid="uid-2"), UID)
