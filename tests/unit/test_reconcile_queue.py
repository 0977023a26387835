"""How controllers.handlers runs a queued object: read from the cache, reconciled (forced past a
backoff when its spec changed), queued again after a failure's backoff or the SLO scaler's period."""

import pytest
from tensorkiln.controllers import handlers
from tensorkiln.controllers.workqueue import WorkQueue


class Clock:
    now = 100.0

    def __call__(self):
        return self.now


def model(name, slo=None, deleting=False):
    meta = {"name": name, "namespace": "ns"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T10:00:00Z"
    return {"kind": "InferenceModel", "metadata": meta, "spec": {"slo": slo} if slo else {}}


@pytest.fixture
def wired(monkeypatch):
    """A queue on a fake clock, a cache of `objects`, reconcilers that record and return `retry`."""
    clock = Clock()
    queue = WorkQueue(clock)
    objects, calls, retry = {}, [], {}
    monkeypatch.setattr(handlers, "QUEUE", queue)
    monkeypatch.setattr(handlers, "_forced", set())
    monkeypatch.setattr(handlers, "_paused_by", [])
    monkeypatch.setattr(
        handlers, "state", lambda: type("State", (), {"get": lambda self, v, k, ns, n: objects.get((k, ns, n))})()
    )

    def reconcile(body, forced=False):
        calls.append((body["metadata"]["name"], forced))
        return retry.get(body["metadata"]["name"])

    monkeypatch.setattr(handlers, "_inference_model", reconcile)
    monkeypatch.setattr(handlers, "SETTINGS", handlers.SETTINGS.__class__(slo_period_seconds=10))
    return clock, queue, objects, calls, retry


def drain(queue):
    while (item := queue.get(timeout=0)) is not None:
        handlers._process(item)
        queue.done(item)


def test_a_queued_object_is_reconciled_from_the_cache_once(wired):
    clock, queue, objects, calls, _ = wired
    objects[("InferenceModel", "ns", "a")] = model("a")
    handlers.enqueue(model("a"))
    handlers.enqueue(model("a"), forced=True)
    drain(queue)
    assert calls == [("a", True)] and len(queue) == 0


def test_gone_or_deleting_objects_are_not_reconciled(wired):
    _, queue, objects, calls, _ = wired
    objects[("InferenceModel", "ns", "b")] = model("b", deleting=True)
    handlers.enqueue(model("a"))
    handlers.enqueue(model("b"))
    drain(queue)
    assert calls == []


def test_a_failure_comes_back_after_its_backoff_and_an_slo_model_on_its_period(wired):
    clock, queue, objects, calls, retry = wired
    objects[("InferenceModel", "ns", "f")] = model("f")
    objects[("InferenceModel", "ns", "s")] = model("s", slo={"targetMilliseconds": 50})
    objects[("InferenceModel", "ns", "h")] = model("h", slo={"targetMilliseconds": 50, "mode": "HPA"})
    retry["f"] = 30.0
    for name in "fsh":
        handlers.enqueue(model(name))
    drain(queue)
    assert len(queue) == 2  # f after its backoff, s on the scaler's period; h (HPA mode) not
    clock.now += 10
    drain(queue)
    assert calls[3:] == [("s", False)]
    clock.now += 20
    drain(queue)
    assert ("f", False) in calls[4:]
