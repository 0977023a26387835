"""Ready, Reconciling and Stalled: the conditions kstatus (Flux, kpt, cli-utils) reads, derived from
the phase and Ready condition the status already has. The real library runs over real objects in
tests/integration/test_gitops_health.py."""

import itertools
from datetime import UTC, datetime

import pytest
from tensorkiln.status import gitops
from tensorkiln.status.conditions import condition, find


def flags(conditions: list[dict]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in conditions}


@pytest.mark.parametrize(
    "phase, ready, reason, expected",
    [
        ("Ready", True, "Serving", {"Reconciling": "False", "Stalled": "False"}),
        ("Deploying", True, "Serving", {"Reconciling": "True", "Stalled": "False"}),  # a rollout under way
        ("Compiling", False, "Compiling", {"Reconciling": "True", "Stalled": "False"}),
        ("Pending", False, "ReconcileError", {"Reconciling": "True", "Stalled": "False"}),  # retried with backoff
        ("Failed", False, "CompileFailed", {"Reconciling": "False", "Stalled": "True"}),
        ("Degraded", False, "CompileFailed", {"Reconciling": "False", "Stalled": "True"}),  # serves elsewhere
        ("Pending", False, "NoMatchingHardware", {"Reconciling": "False", "Stalled": "True"}),
        ("Pending", False, "MissingPVC", {"Reconciling": "False", "Stalled": "True"}),
        ("Failed", False, "NameConflict", {"Reconciling": "False", "Stalled": "True"}),
    ],
)
def test_a_models_reconciling_and_stalled_follow_its_phase_and_ready_reason(phase, ready, reason, expected):
    derived = gitops.model_conditions(phase, condition("Ready", ready, reason, "why"))
    assert flags(derived) == expected
    assert {c["reason"] for c in derived} == {reason}


def test_reconciling_and_stalled_are_never_true_together():
    phases = ("Ready", "Deploying", "Compiling", "Pending", "Degraded", "Failed", "Simulated")
    reasons = [*gitops.STALLED_MODEL_REASONS, "Serving", "Compiling", "ReconcileError", "SimulatedPools"]
    for phase, ready, reason in itertools.product(phases, (True, False), reasons):
        derived = flags(gitops.model_conditions(phase, condition("Ready", ready, reason, "")))
        assert (derived["Reconciling"], derived["Stalled"]) != ("True", "True"), (phase, ready, reason)


@pytest.mark.parametrize(
    "phase, expected",
    [
        ("Pending", {"Ready": "False", "Reconciling": "True", "Stalled": "False"}),
        ("Running", {"Ready": "False", "Reconciling": "True", "Stalled": "False"}),
        ("Succeeded", {"Ready": "True", "Reconciling": "False", "Stalled": "False"}),
        ("Failed", {"Ready": "False", "Reconciling": "False", "Stalled": "True"}),
    ],
)
def test_a_compile_job_is_ready_once_published_and_stalled_once_failed(phase, expected):
    status = {"phase": phase, "conditions": [condition("Compiled", phase == "Succeeded", "DigestMismatch", "m")]}
    assert flags(gitops.compile_job_conditions(status)) == expected


def test_compile_job_conditions_replace_their_own_and_keep_transition_times():
    then, later = datetime(2026, 12, 1, tzinfo=UTC), datetime(2026, 12, 2, tzinfo=UTC)
    running = {"phase": "Running", "conditions": [condition("Compiled", None, "Compiling", "on local-0")]}
    first = gitops.with_compile_job_conditions(running, None, 1, then)
    again = gitops.with_compile_job_conditions(first, first["conditions"], 1, later)
    assert again == first  # nothing changed: no new transition time, no duplicate
    assert [c["type"] for c in again["conditions"]] == ["Compiled", "Ready", "Reconciling", "Stalled"]
    failed = {**again, "phase": "Failed"}
    done = gitops.with_compile_job_conditions(failed, again["conditions"], 1, later)
    assert find(done["conditions"], "Stalled")["lastTransitionTime"] == "2026-12-02T00:00:00Z"
    assert find(done["conditions"], "Ready")["lastTransitionTime"] == "2026-12-01T00:00:00Z"  # still False
