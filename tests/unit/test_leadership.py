"""Leader election (tensorkiln.leadership) as the controller sees it: a standby reconciles nothing,
an elected replica queues every object it holds, and the client's lock writes nothing once the
operator stops. The election against a real API server: tests/integration/test_leader_election.py."""

import types

import pytest
from kubernetes import client
from tensorkiln.cluster.cache import WatchCache
from tensorkiln.controllers import handlers
from tensorkiln.controllers.workqueue import WorkQueue
from tensorkiln.leadership import Leadership, Timings, _StoppableLeaseLock
from tensorkiln.settings import Settings


def model(name):
    return {"apiVersion": "tensorkiln.dev/v1alpha1", "kind": "InferenceModel",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"}, "spec": {}}  # fmt: skip


def controller_with(leadership: Leadership, filled: bool = True):
    cache = WatchCache()
    if filled:
        cache.mark_filled()
    objects = {}
    state = types.SimpleNamespace(get=lambda version, kind, ns, name: objects.get((kind, ns, name)))
    context = types.SimpleNamespace(settings=Settings(), namespaces=[], cache=cache, state=state, leadership=leadership)
    controller = handlers.Controller(context, WorkQueue())
    calls = []
    controller.inference_model = lambda body, forced=False: calls.append(body["metadata"]["name"])
    return controller, objects, calls


def drain(controller):
    while (item := controller.queue.get(timeout=0)) is not None:
        controller.process(item)
        controller.queue.done(item)


def test_without_a_lease_the_operator_leads_alone():
    alone = Leadership()
    assert alone.leading()
    alone.release()  # nothing to hand back
    assert alone.leading()


def test_a_standby_reconciles_nothing_and_once_elected_queues_every_object_it_holds():
    leadership = Leadership(lease="tk", namespace="tk-system", identity="pod-b")  # campaigning, not elected
    controller, objects, calls = controller_with(leadership)
    for name in ("a", "b"):
        objects[("InferenceModel", "ns", name)] = model(name)
        controller.cache.stores["InferenceModel"].put(model(name))
    controller.enqueue(model("a"))  # an event seen by the standby's informers
    controller.first_pass()
    drain(controller)
    assert calls == []

    leadership.elected()  # the client's callback on winning the Lease
    controller.elected()  # what it calls back (start(on_elected=controller.elected))
    drain(controller)
    assert sorted(calls) == ["a", "b"]

    leadership.deposed()  # not renewed in time
    controller.enqueue(model("a"))
    drain(controller)
    assert sorted(calls) == ["a", "b"]


def test_elected_before_the_cache_is_filled_leaves_the_first_pass_to_queue():
    leadership = Leadership(lease="tk", namespace="tk-system", identity="pod-b")
    controller, objects, calls = controller_with(leadership, filled=False)
    objects[("InferenceModel", "ns", "a")] = model("a")
    controller.cache.stores["InferenceModel"].put(model("a"))
    leadership.elected()
    controller.elected()
    assert len(controller.queue) == 0
    controller.cache.mark_filled()
    controller.first_pass()
    drain(controller)
    assert calls == ["a"]


class RecordingLeases:
    def __init__(self):
        self.writes = []

    def create_namespaced_lease(self, namespace, body):
        self.writes.append(("create", namespace))
        return body

    def replace_namespaced_lease(self, name, namespace, body):
        self.writes.append(("replace", name))
        return body


def test_the_lock_writes_nothing_once_the_operator_stops():
    import threading

    from kubernetes.leaderelection.leaderelectionrecord import LeaderElectionRecord

    stopped = threading.Event()
    lock = _StoppableLeaseLock(client.ApiClient(), "tk", "tk-system", "pod-a", stopped)
    leases = lock.api_instance = RecordingLeases()
    record = LeaderElectionRecord("pod-a", "8", "2026-12-08 01:00:00", "2026-12-08 01:00:00")
    assert lock.create("tk", "tk-system", record)
    lock.lease_reference = client.V1Lease(metadata=client.V1ObjectMeta(name="tk"), spec=client.V1LeaseSpec())
    assert lock.update("tk", "tk-system", record)
    stopped.set()
    assert not lock.create("tk", "tk-system", record) and not lock.update("tk", "tk-system", record)
    assert leases.writes == [("create", "tk-system"), ("replace", "tk")]


@pytest.mark.parametrize(
    ("timings", "problem"),
    [
        (Timings(6, 6, 2), "leaseDurationSeconds must exceed renewDeadlineSeconds"),
        (Timings(8, 2, 2), "renewDeadlineSeconds must exceed 1.2 x retryPeriodSeconds"),
        (Timings(8, 6, 0), "every leader-election period must be at least 1 s"),
    ],
)
def test_timings_the_client_would_exit_on_are_named(timings, problem):
    assert problem in timings.problems()
    assert Timings().problems() == []
