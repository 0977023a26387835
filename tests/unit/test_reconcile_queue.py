"""How controllers.handlers runs a queued object: read from the cache, reconciled (forced past a
backoff when its spec changed), queued again after a failure's backoff or the SLO scaler's period."""

import copy
from types import SimpleNamespace

import pytest
from tensorkiln.cluster.cache import WatchCache
from tensorkiln.controllers import handlers
from tensorkiln.controllers.workqueue import WorkQueue
from tensorkiln.hardware.classes import discover
from tensorkiln.leadership import Leadership
from tensorkiln.settings import Settings


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
def wired():
    """A controller whose queue runs on a fake clock, its cache `objects`, its reconciler recording
    and returning `retry`."""
    clock = Clock()
    objects, calls, retry = {}, [], {}
    state = SimpleNamespace(get=lambda version, kind, ns, name: objects.get((kind, ns, name)))
    watch_cache = WatchCache()
    watch_cache.mark_filled()  # the informers have their first listings
    context = SimpleNamespace(
        settings=Settings(slo_period_seconds=10), namespaces=[], cache=watch_cache, state=state, leadership=Leadership()
    )
    controller = handlers.Controller(context, WorkQueue(clock))

    def reconcile(body, forced=False):
        calls.append((body["metadata"]["name"], forced))
        return retry.get(body["metadata"]["name"])

    controller.inference_model = reconcile
    return clock, controller, objects, calls, retry


def drain(controller):
    while (item := controller.queue.get(timeout=0)) is not None:
        controller.process(item)
        controller.queue.done(item)


def test_a_queued_object_is_reconciled_from_the_cache_once(wired):
    clock, controller, objects, calls, _ = wired
    objects[("InferenceModel", "ns", "a")] = model("a")
    controller.enqueue(model("a"))
    controller.enqueue(model("a"), forced=True)
    drain(controller)
    assert calls == [("a", True)] and len(controller.queue) == 0


def test_gone_or_deleting_objects_are_not_reconciled(wired):
    _, controller, objects, calls, _ = wired
    objects[("InferenceModel", "ns", "b")] = model("b", deleting=True)
    controller.enqueue(model("a"))
    controller.enqueue(model("b"))
    drain(controller)
    assert calls == []


def test_a_failure_comes_back_after_its_backoff_and_an_slo_model_on_its_period(wired):
    clock, controller, objects, calls, retry = wired
    objects[("InferenceModel", "ns", "f")] = model("f")
    objects[("InferenceModel", "ns", "s")] = model("s", slo={"targetMilliseconds": 50})
    objects[("InferenceModel", "ns", "h")] = model("h", slo={"targetMilliseconds": 50, "mode": "HPA"})
    retry["f"] = 30.0
    for name in "fsh":
        controller.enqueue(model(name))
    drain(controller)
    assert len(controller.queue) == 2  # f after its backoff, s on the scaler's period; h (HPA mode) not
    clock.now += 10
    drain(controller)
    assert calls[3:] == [("s", False)]
    clock.now += 20
    drain(controller)
    assert ("f", False) in calls[4:]


def test_nothing_is_reconciled_before_the_cache_serves(wired):
    clock, controller, objects, calls, _ = wired
    controller.cache._filled.clear()  # the informers' first listings are not all in
    objects[("InferenceModel", "ns", "a")] = model("a")
    controller.enqueue(model("a"), forced=True)
    drain(controller)
    assert calls == [] and len(controller.queue) == 1  # back in the queue, and still forced
    controller.cache.mark_filled()
    clock.now += handlers.NOT_FILLED_RETRY_SECONDS
    drain(controller)
    assert calls == [("a", True)]


def test_cached_events_queue_the_object_that_owns_what_moved(wired):
    _, controller, *_ = wired
    owner = [{"kind": "InferenceModel", "name": "m", "uid": "u", "controller": True}]
    compile_pod = {"metadata": {"namespace": "ns", "name": "p", "labels": {"tensorkiln.dev/compile-job": "m--cpu"}}}
    serving = {"metadata": {"namespace": "ns", "name": "m--cpu", "labels": {"app.kubernetes.io/component": "serving"},
                            "ownerReferences": owner, "resourceVersion": "5"}}  # fmt: skip

    def queued():
        found = []
        while (item := controller.queue.get(timeout=0)) is not None:
            found.append(item)
            controller.queue.done(item)
        return found

    controller.cached_event("Pod", "MODIFIED", compile_pod)
    controller.cached_event("Deployment", "MODIFIED", serving)
    assert queued() == [("CompileJob", "ns", "m--cpu"), ("InferenceModel", "ns", "m")]
    # Someone else's edit or deletion of an owned object reconciles its model at once ...
    edited = {"metadata": {"namespace": "ns", "name": "m--cpu", "labels": {}, "ownerReferences": owner,
                           "resourceVersion": "7"}}  # fmt: skip
    controller.cached_event("Service", "MODIFIED", edited)
    assert queued() == [("InferenceModel", "ns", "m")]
    controller.cached_event("ConfigMap", "DELETED", edited)
    assert queued() == [("InferenceModel", "ns", "m")]
    # ... the echo of our own write does not.
    controller.cache.wrote({"kind": "Service", **edited})
    controller.cached_event("Service", "MODIFIED", edited)
    assert queued() == []


def test_a_node_added_removed_or_relabelled_queues_every_model_a_heartbeat_none(wired):
    _, controller, *_ = wired
    controller.cache.stores["InferenceModel"].put(model("a"))
    controller.cache.stores["InferenceModel"].put(model("b"))

    def queued():
        found = []
        while (item := controller.queue.get(timeout=0)) is not None:
            found.append(item[2])
            controller.queue.done(item)
        return sorted(found)

    node = {"metadata": {"name": "n1", "labels": {"nvidia.com/gpu.product": "NVIDIA-L4"}}}
    controller.cached_event("Node", "MODIFIED", node)  # first seen after a restart: remembered only
    controller.cached_event("Node", "MODIFIED", node)  # a heartbeat
    assert queued() == []
    controller.cached_event("Node", "MODIFIED", {"metadata": {"name": "n1", "labels": {}}})
    assert queued() == ["a", "b"]
    controller.cached_event("Node", "ADDED", {"metadata": {"name": "n2", "labels": {}}})
    assert queued() == ["a", "b"]
    controller.cached_event("Node", "DELETED", {"metadata": {"name": "n2", "labels": {}}})
    assert queued() == ["a", "b"]


# --- which node changes queue every model: those of what hardware discovery reads (classes.discovery_key)

HEARTBEAT = {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-12-07T10:00:00Z", "reason": "KubeletReady"}
NODES = {
    "cpu": {
        "metadata": {"name": "n1", "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
                     "labels": {"kubernetes.io/hostname": "n1", "kubernetes.io/arch": "amd64"}},
        "spec": {"taints": [{"key": "team", "value": "ml", "effect": "PreferNoSchedule"}]},
        "status": {"capacity": {"cpu": "8", "memory": "32Gi"}, "allocatable": {"cpu": "7", "memory": "30Gi"},
                   "conditions": [HEARTBEAT]},
    },
    "gpu": {  # GPUs without GPU Feature Discovery's product label: class nvidia-gpu-unlabelled
        "metadata": {"name": "g1", "labels": {"kubernetes.io/hostname": "g1", "kubernetes.io/arch": "amd64"}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {"capacity": {"cpu": "32", "nvidia.com/gpu": "4"},
                   "allocatable": {"cpu": "31", "nvidia.com/gpu": "4"}, "conditions": [HEARTBEAT]},
    },
}  # fmt: skip


def changed(base: str, *edits: tuple[tuple[str, ...], object]) -> dict:
    """NODES[base] with each (path, value) edit set (None: removed). No resourceVersion, in these nodes
    either: the handler does not read it, and classes.discover remembers no node without one."""
    node = copy.deepcopy(NODES[base])
    for path, value in edits:
        parent = node
        for key in path[:-1]:
            parent = parent.setdefault(key, {})
        if value is None:
            parent.pop(path[-1], None)
        else:
            parent[path[-1]] = value
    return node


def tainted(base: str, *taints: dict) -> dict:
    return changed(base, (("spec", "taints"), NODES[base]["spec"]["taints"] + list(taints)))


LABELS, TAINTS = ("metadata", "labels"), ("spec", "taints")
CAPACITY, ALLOCATABLE = ("status", "capacity"), ("status", "allocatable")
QUEUES = {
    "a label added (NFD's CPU flags)": (
        "cpu",
        changed("cpu", ((*LABELS, "feature.node.kubernetes.io/cpu-cpuid.AVX2"), "true")),
    ),
    "GPU Feature Discovery labels the product": ("gpu", changed("gpu", ((*LABELS, "nvidia.com/gpu.product"), "L4"))),
    "tainted NoSchedule": ("cpu", tainted("cpu", {"key": "dedicated", "value": "ml", "effect": "NoSchedule"})),
    "tainted NoExecute": ("cpu", tainted("cpu", {"key": "dedicated", "effect": "NoExecute"})),
    "a taint's effect changed": ("gpu", changed("gpu", (TAINTS, [{"key": "nvidia.com/gpu", "effect": "NoExecute"}]))),
    "a taint's value changed": ("gpu", changed("gpu", (TAINTS, [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]))),
    "cordoned": ("cpu", changed("cpu", (("spec", "unschedulable"), True))),
    "the device plugin offers GPUs": (
        "cpu",
        changed("cpu", ((*CAPACITY, "nvidia.com/gpu"), "1"), ((*ALLOCATABLE, "nvidia.com/gpu"), "1")),
    ),
    "its GPUs are gone": (
        "gpu",
        changed("gpu", ((*CAPACITY, "nvidia.com/gpu"), "0"), ((*ALLOCATABLE, "nvidia.com/gpu"), None)),
    ),
}
QUEUES_NOTHING = {
    "a heartbeat": (
        "cpu",
        changed("cpu", (("status", "conditions"), [{**HEARTBEAT, "lastHeartbeatTime": "2026-12-07T10:00:40Z"}])),
    ),
    "allocatable CPU and memory changed": ("cpu", changed("cpu", (ALLOCATABLE, {"cpu": "6", "memory": "28Gi"}))),
    "status images and nodeInfo written": (
        "cpu",
        changed(
            "cpu",
            (("status", "images"), [{"names": ["busybox"]}]),
            (("status", "nodeInfo"), {"kubeletVersion": "v1.35.0"}),
        ),
    ),
    "a node-lifecycle NoSchedule taint": (
        "cpu",
        tainted(
            "cpu", {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule", "timeAdded": "2026-12-07T10:01:00Z"}
        ),
    ),
    "a node-lifecycle NoExecute taint": (
        "cpu",
        tainted("cpu", {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}),
    ),
    "a PreferNoSchedule taint": ("cpu", tainted("cpu", {"key": "spot", "effect": "PreferNoSchedule"})),
    "unschedulable: false written": ("cpu", changed("cpu", (("spec", "unschedulable"), False))),
    "spec.providerID set": ("cpu", changed("cpu", (("spec", "providerID"), "kind://docker/kind/n1"))),
    "an annotation changed": (
        "cpu",
        changed("cpu", (("metadata", "annotations"), {"node.alpha.kubernetes.io/ttl": "15"})),
    ),
    "more GPUs": ("gpu", changed("gpu", ((*CAPACITY, "nvidia.com/gpu"), "8"), ((*ALLOCATABLE, "nvidia.com/gpu"), "8"))),
    "no GPU allocatable, still some capacity": ("gpu", changed("gpu", ((*ALLOCATABLE, "nvidia.com/gpu"), "0"))),
}


def queued_models(controller) -> list[str]:
    found = []
    while (item := controller.queue.get(timeout=0)) is not None:
        found.append(item[2])
        controller.queue.done(item)
    return sorted(found)


@pytest.mark.parametrize(("base", "after"), QUEUES.values(), ids=list(QUEUES))
def test_a_node_change_in_what_discovery_reads_queues_every_model_and_so_does_its_undoing(wired, base, after):
    _, controller, *_ = wired
    for name in "ab":
        controller.cache.stores["InferenceModel"].put(model(name))
    controller.cached_event("Node", "MODIFIED", NODES[base])  # first seen after a restart: remembered only
    assert queued_models(controller) == []
    controller.cached_event("Node", "MODIFIED", after)
    assert queued_models(controller) == ["a", "b"]
    controller.cached_event("Node", "MODIFIED", NODES[base])
    assert queued_models(controller) == ["a", "b"]


@pytest.mark.parametrize(("base", "after"), QUEUES_NOTHING.values(), ids=list(QUEUES_NOTHING))
def test_heartbeats_and_changes_discovery_does_not_read_queue_nothing(wired, base, after):
    _, controller, *_ = wired
    controller.cache.stores["InferenceModel"].put(model("a"))
    controller.cached_event("Node", "MODIFIED", NODES[base])
    controller.cached_event("Node", "MODIFIED", after)
    controller.cached_event("Node", "MODIFIED", NODES[base])
    assert queued_models(controller) == []
    assert discover([after]) == discover([NODES[base]])  # and indeed the classes are the same


def test_models_and_compile_jobs_queue_themselves_past_a_backoff_when_their_spec_is_new(wired):
    _, controller, *_ = wired

    def queued():
        found = []
        while (item := controller.queue.get(timeout=0)) is not None:
            found.append((item, item in controller._forced))
            controller._forced.discard(item)  # as process() does
            controller.queue.done(item)
        return found

    def body(kind, rv, generation, observed=None):
        status = {"observedGeneration": observed} if observed else {}
        meta = {"namespace": "ns", "name": "m", "resourceVersion": rv, "generation": generation}
        return {"kind": kind, "metadata": meta, "status": status}

    new = body("InferenceModel", "1", 1)
    controller.cached_event("InferenceModel", "ADDED", new)
    assert queued() == [(("InferenceModel", "ns", "m"), True)]
    # The echo of our own status write: nothing new.
    reported = body("InferenceModel", "2", 1, observed=1)
    controller.cache.wrote(reported)
    controller.cached_event("InferenceModel", "MODIFIED", reported)
    assert queued() == []
    # Someone else's change that is not a spec (a label): reconciled, within its backoff.
    controller.cached_event("InferenceModel", "MODIFIED", body("InferenceModel", "3", 1, observed=1))
    assert queued() == [(("InferenceModel", "ns", "m"), False)]
    # A CompileJob the model's reconcile just made is our own write, and still new to its reconcile.
    made = body("CompileJob", "4", 1)
    controller.cache.wrote(made)
    controller.cached_event("CompileJob", "ADDED", made)
    assert queued() == [(("CompileJob", "ns", "m"), True)]
    controller.cached_event("InferenceModel", "DELETED", new)
    assert queued() == []


def test_the_first_listing_queues_every_object_once(wired):
    _, controller, *_ = wired
    controller.cache.stores["InferenceModel"].put(model("a"))
    controller.first_pass()
    items = []
    while (item := controller.queue.get(timeout=0)) is not None:
        items.append(item)
        controller.queue.done(item)
    assert items == [("InferenceModel", "ns", "a")]
