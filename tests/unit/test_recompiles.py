"""The bound on recompiles (controllers.recompiles, and how the CompileJob reconciler uses it): a
served target's compile needs a slot, a first compile never waits, and a queued one says why and
asks again; the engine it replaces keeps serving (status.serving.desired_engine)."""

from datetime import UTC, datetime

from tensorkiln.builders.job import job_name
from tensorkiln.builders.labels import COMPILE_JOB, RECOMPILE
from tensorkiln.controllers import compilejob, recompiles
from tensorkiln.controllers.compilejob import Observed, decide
from tensorkiln.settings import Settings
from tensorkiln.status.serving import Rollout, desired_engine

from .test_compilejob_decisions import actions, compile_job, observed

NOW = datetime(2026, 12, 8, 12, 0, tzinfo=UTC)
SETTINGS = Settings(registry_uri="file:///registry")


def recompile_job(namespace: str, name: str, finished: str | None = None) -> dict:
    conditions = [{"type": finished, "status": "True"}] if finished else []
    return {"metadata": {"namespace": namespace, "name": f"{name}-abc", "labels": {COMPILE_JOB: name, RECOMPILE: "true"}},
            "status": {"conditions": conditions}}  # fmt: skip


def test_running_counts_the_unfinished_recompile_jobs_only():
    first = {"metadata": {"namespace": "a", "name": "x-1", "labels": {COMPILE_JOB: "x"}}, "status": {}}
    jobs = [recompile_job("a", "m"), recompile_job("b", "m"), recompile_job("a", "done", "Complete"),
            recompile_job("a", "broke", "Failed"), first]  # fmt: skip
    assert recompiles.running(jobs) == {("a", "m"), ("b", "m")}


def test_slots_bound_what_runs_and_what_was_just_started():
    slots = recompiles.RecompileSlots()
    assert slots.take(("a", "m1"), frozenset(), 2, 0.0) == (True, 1)
    assert slots.take(("a", "m2"), frozenset(), 2, 1.0) == (True, 2)  # m1 not yet in the cache: still counted
    assert slots.take(("a", "m3"), frozenset(), 2, 2.0) == (False, 2)
    # m1's Job shows in the cache, then finishes: its slot is free again.
    assert slots.take(("a", "m3"), frozenset({("a", "m1"), ("a", "m2")}), 2, 3.0) == (False, 2)
    assert slots.take(("a", "m3"), frozenset({("a", "m2")}), 2, 4.0) == (True, 2)
    assert slots.take(("a", "m4"), frozenset(), 0, 5.0)[0]  # 0: no bound


def test_a_slot_taken_but_never_seen_is_freed_after_a_while():
    slots = recompiles.RecompileSlots()
    assert slots.take(("a", "m1"), frozenset(), 1, 0.0) == (True, 1)
    assert slots.take(("a", "m2"), frozenset(), 1, 10.0)[0] is False
    assert slots.take(("a", "m2"), frozenset(), 1, recompiles.SEEN_WITHIN_SECONDS + 1)[0] is True


def test_a_served_targets_compile_is_a_labelled_recompile_and_a_first_compile_is_not():
    body = compile_job()
    first = decide(observed(body, looked_up=True), SETTINGS, NOW)
    assert not first.recompile and RECOMPILE not in first.create_job["metadata"]["labels"]
    again = decide(observed(body, looked_up=True, served=True), SETTINGS, NOW)
    assert again.recompile and again.create_job["metadata"]["labels"][RECOMPILE] == "true"
    assert actions(again) == [f"create Job {job_name(body)}", "registry answered", "status Pending Pending"]


class Writes:
    def __init__(self):
        self.applied = []

    def apply(self, obj):
        self.applied.append(obj)
        return obj


def test_a_recompile_without_a_slot_creates_nothing_and_waits_with_its_reason(monkeypatch):
    monkeypatch.setattr(compilejob, "RECOMPILE_SLOTS", recompiles.RecompileSlots())
    body = compile_job()
    busy = frozenset({("team-b", "x"), ("team-c", "y")})
    seen: Observed = observed(body, looked_up=True, served=True, recompiles_running=busy)
    state = Writes()
    status = compilejob.apply(state, seen, decide(seen, SETTINGS, NOW), compilejob.REGISTRY_BACKOFF, 2)
    assert state.applied == []
    (compiled,) = [c for c in status["conditions"] if c["type"] == "Compiled"]
    assert (status["phase"], compiled["reason"]) == ("Pending", "RecompileQueued")
    assert compiled["message"].startswith("2 recompiles of served models run, at most 2 at once")
    # What serves keeps serving while it waits.
    assert desired_engine({**body, "status": status}, Rollout("sha256:old", 1, 1, True)) == "sha256:old"

    free = observed(body, looked_up=True, served=True, recompiles_running=frozenset({("team-b", "x")}))
    status = compilejob.apply(state, free, decide(free, SETTINGS, NOW), compilejob.REGISTRY_BACKOFF, 2)
    assert [o["kind"] for o in state.applied] == ["Job"] and status["phase"] == "Pending"


def test_the_controller_asks_again_soon_for_a_queued_recompile_and_not_otherwise(monkeypatch):
    import types

    from tensorkiln.cluster.cache import WatchCache
    from tensorkiln.controllers import handlers
    from tensorkiln.leadership import Leadership

    waiting = {"type": "Compiled", "reason": "RecompileQueued", "status": "Unknown", "message": "2 run"}
    queued = {"phase": "Pending", "conditions": [waiting]}
    outcome = {}
    monkeypatch.setattr(
        handlers.compilejob, "reconcile", lambda state, body, registry, settings: ({}, outcome["status"])
    )
    monkeypatch.setattr(handlers.events, "post", lambda *args: None)
    context = types.SimpleNamespace(settings=Settings(), namespaces=[], cache=WatchCache(), state=types.SimpleNamespace(core=None),
                                    registry=lambda: None, scaler=None, leadership=Leadership())  # fmt: skip
    controller = handlers.Controller(context)
    body = compile_job()
    outcome["status"] = queued
    assert controller.compile_job(body) == recompiles.WAIT_SECONDS
    outcome["status"] = {
        "phase": "Running",
        "conditions": [{**waiting, "reason": "Compiling", "message": "on local-0"}],
    }
    assert controller.compile_job(body) is None
