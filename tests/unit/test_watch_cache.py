"""The watch cache (tensorkiln.cluster.cache) and ClusterState's reads through it.

Here the stores are filled by hand, as the informers' first listings would fill them. The informers
themselves (listing, then following every change) are tested on the real API server in
tests/integration/test_watch_cache.py; no reads in steady state in tests/integration/test_rbac_audit.py.
"""

import pytest
from tensorkiln.builders.labels import COMPILE_JOB, MANAGED_BY, MODEL
from tensorkiln.cluster import cache
from tensorkiln.cluster.state import ClusterState

KIND = {k.kind: k for k in cache.KINDS}


def obj(kind, name, namespace="ns", rv="10", labels=None, created="2026-12-01T10:00:00Z", **extra):
    meta = {"name": name, "resourceVersion": rv, "creationTimestamp": created, "labels": labels or {}}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"kind": kind, "metadata": meta, **extra}


def filled(*objects) -> cache.WatchCache:
    """A cache whose stores hold `objects`, as the informers would after their first listings."""
    watch_cache = cache.WatchCache()
    for o in objects:
        watch_cache.stores[o["kind"]].put(o)
    watch_cache.mark_filled()
    return watch_cache


def test_kept_drops_managed_fields_and_copies():
    body = obj("Deployment", "d", spec={"replicas": 1})
    body["metadata"]["managedFields"] = [{"manager": "tensorkiln"}]
    copy = cache.kept(body)
    assert "managedFields" not in copy["metadata"]
    body["spec"]["replicas"] = 5
    assert copy["spec"]["replicas"] == 1


def test_pods_are_kept_with_only_the_fields_the_reconcilers_read():
    (pods,) = [k for k in cache.KINDS if k.kind == "Pod"]
    body = obj(
        "Pod", "p", labels={MODEL: "m"}, apiVersion="v1",
        spec={"nodeName": "n1", "containers": [{"name": "c", "image": "i", "env": [{"name": "A", "value": "1"}],
              "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}],
              "volumes": [{"name": "v", "emptyDir": {}}]},
        status={"phase": "Running", "containerStatuses": [{"name": "c", "ready": True}], "podIP": "10.0.0.1"},
    )  # fmt: skip
    body["metadata"]["annotations"] = {"big": "x" * 1000}
    body["metadata"]["managedFields"] = [{"manager": "kubelet"}]
    kept = cache.kept(body, pods.only)
    # of the containers only what they request (what a node's pods take: hardware.pools)
    assert kept["spec"] == {"nodeName": "n1", "containers": [{"resources": {"requests": {"nvidia.com/gpu": "1"}}}]}
    assert kept["status"] == {"phase": "Running", "containerStatuses": [{"name": "c", "ready": True}]}
    assert set(kept["metadata"]) == {"name", "namespace", "labels", "creationTimestamp", "resourceVersion"}
    assert (kept["kind"], kept["apiVersion"]) == ("Pod", "v1")


def test_a_store_keeps_one_object_a_name_found_by_its_labels_until_it_changes_or_goes():
    store = cache.KindStore(KIND["Pod"])
    store.put(obj("Pod", "p", rv="1", labels={MODEL: "m", "job-name": "j", "other": "x"}))
    assert [p["metadata"]["name"] for p in store.select("ns", MODEL, "m")] == ["p"]
    assert store.select("ns", "other", "x") == []  # not a label the reconcilers select by
    store.put(obj("Pod", "p", rv="2", labels={MODEL: "n"}))
    assert store.select("ns", MODEL, "m") == [] and store.select("ns", "job-name", "j") == []
    assert store.get("ns", "p")["metadata"]["resourceVersion"] == "2"
    store.remove(obj("Pod", "p"))
    assert store.get("ns", "p") is None and store.select("ns", MODEL, "n") == [] and store.all() == []


def test_pods_are_found_by_the_node_they_are_bound_to_in_every_namespace():
    store = cache.KindStore(KIND["Pod"])
    store.put(obj("Pod", "a", labels={MODEL: "m"}, spec={"nodeName": "n1"}))
    store.put(obj("Pod", "b", namespace="other", labels={MODEL: "k"}, spec={"nodeName": "n1"}))
    store.put(obj("Pod", "pending", labels={MODEL: "m"}, spec={}))
    assert sorted(p["metadata"]["name"] for p in store.select(None, cache.NODE_NAME, "n1")) == ["a", "b"]
    store.put(obj("Pod", "a", rv="11", labels={MODEL: "m"}, spec={"nodeName": "n2"}))
    assert [p["metadata"]["name"] for p in store.select(None, cache.NODE_NAME, "n1")] == ["b"]
    state = ReadsCounted(filled(obj("Pod", "c", labels={MODEL: "m"}, spec={"nodeName": "n3"})))
    assert [p["metadata"]["name"] for p in state.pods_on(["n3", "n4"])] == ["c"] and state.reads == []
    assert ReadsCounted(cache.WatchCache()).pods_on(["n3"]) is None  # not filled: never listed for this


def test_packed_kinds_hand_each_reader_its_own_object_nodes_are_shared():
    store = cache.KindStore(KIND["Deployment"])
    store.put(obj("Deployment", "d", labels=MANAGED_BY, spec={"replicas": 1}))
    store.get("ns", "d")["spec"]["replicas"] = 5
    assert store.get("ns", "d")["spec"]["replicas"] == 1 and store.all() == [store.get("ns", "d")]
    nodes = cache.KindStore(KIND["Node"])
    nodes.put(obj("Node", "n", namespace=None))
    assert nodes.get(None, "n") is nodes.all()[0]  # read at every reconcile: never parsed again


def test_a_relisting_replaces_the_store_and_says_what_changed():
    store = cache.KindStore(KIND["CompileJob"])
    for name, rv in (("same", "1"), ("changed", "1"), ("gone", "1")):
        store.put(obj("CompileJob", name, rv=rv))
    changes = store.replace([obj("CompileJob", "same", rv="1"), obj("CompileJob", "changed", rv="7"),
                             obj("CompileJob", "new", rv="8")])  # fmt: skip
    assert sorted((t, o["metadata"]["name"]) for t, o in changes) == [
        ("ADDED", "new"), ("DELETED", "gone"), ("MODIFIED", "changed")
    ]  # fmt: skip
    assert sorted(o["metadata"]["name"] for o in store.all()) == ["changed", "new", "same"]


def test_a_namespace_s_listing_leaves_the_other_namespaces_alone():
    """One informer per watched namespace fills the kind's one store: the listing of one namespace
    once dropped every other namespace's objects, and a model there was never reconciled."""
    store = cache.KindStore(KIND["InferenceModel"])
    store.put(obj("InferenceModel", "a", namespace="one"))
    store.put(obj("InferenceModel", "b", namespace="two"))
    changes = store.replace([obj("InferenceModel", "c", namespace="two")], namespace="two")
    assert sorted((t, o["metadata"]["name"]) for t, o in changes) == [("ADDED", "c"), ("DELETED", "b")]
    assert sorted(o["metadata"]["name"] for o in store.all()) == ["a", "c"]


def test_owned_kinds_are_cached_only_with_our_managed_by_label():
    for kind in ("Deployment", "Service", "ConfigMap", "PodDisruptionBudget", "HorizontalPodAutoscaler"):
        assert KIND[kind].selector == "app.kubernetes.io/managed-by=tensorkiln"
    assert KIND["Job"].selector == COMPILE_JOB and KIND["Pod"].selector == MODEL


def test_get_select_and_all():
    a = obj("CompileJob", "a", labels={MODEL: "m"})
    b = obj("CompileJob", "b", labels={MODEL: "m"})
    c = obj("CompileJob", "c", labels={MODEL: "other"})
    watch_cache = filled(a, b, c)
    assert watch_cache.get("CompileJob", "ns", "a")["metadata"]["name"] == "a"
    assert watch_cache.get("CompileJob", "ns", "zzz") is None
    assert watch_cache.get("CompileJob", "elsewhere", "a") is None
    assert sorted(o["metadata"]["name"] for o in watch_cache.select("CompileJob", "ns", MODEL, "m")) == ["a", "b"]
    assert len(watch_cache.all("CompileJob")) == 3


def test_a_write_is_read_back_until_the_watch_brings_it_or_a_newer_one():
    watch_cache = filled(obj("CompileJob", "a", rv="10", status={"phase": "Running"}))
    watch_cache.wrote(obj("CompileJob", "a", rv="12", status={"phase": "Succeeded"}))
    assert watch_cache.get("CompileJob", "ns", "a")["status"]["phase"] == "Succeeded"
    assert watch_cache.all("CompileJob")[0]["status"]["phase"] == "Succeeded"
    # the watch catches up (and goes further): the index's word again
    caught_up = filled(obj("CompileJob", "a", rv="13", status={"phase": "Succeeded", "x": 1}))
    caught_up._writes = watch_cache._writes
    assert caught_up.get("CompileJob", "ns", "a")["status"] == {"phase": "Succeeded", "x": 1}
    assert caught_up._writes == {"CompileJob": {}}


def test_what_the_index_does_not_hold_is_absent_whatever_we_wrote():
    watch_cache = filled()
    watch_cache.wrote(obj("Deployment", "d", rv="3", labels=MANAGED_BY))  # created, or deleted since
    assert watch_cache.get("Deployment", "ns", "d") is None


def test_an_old_write_the_watch_never_brought_is_dropped(monkeypatch):
    watch_cache = filled(obj("CompileJob", "a", rv="10"))
    clock = iter([0.0, cache.WRITES_KEPT_SECONDS + 1])
    monkeypatch.setattr(cache.time, "monotonic", lambda: next(clock))
    watch_cache.wrote(obj("CompileJob", "a", rv="12"))
    assert watch_cache.get("CompileJob", "ns", "a")["metadata"]["resourceVersion"] == "10"


def test_nothing_is_served_before_every_informer_has_its_first_listing():
    watch_cache = cache.WatchCache()
    assert not watch_cache.serves("Deployment")
    watch_cache.mark_filled()
    assert watch_cache.serves("Deployment") and not watch_cache.serves("Secret")


class ReadsCounted(ClusterState):
    """ClusterState whose API reads are recorded: what the cache does not answer."""

    def __init__(self, watch_cache, in_the_api=()):  # no clients: every API call would fail loudly
        self.cache = watch_cache
        self.reads, self.in_the_api = [], {(o["kind"], o["metadata"]["name"]): o for o in in_the_api}

    def read(self, api_version, kind, namespace, name):
        self.reads.append((kind, name))
        return self.in_the_api.get((kind, name))


def test_cluster_state_reads_from_the_cache_and_confirms_only_creations():
    ours = obj("Service", "m--cpu", labels=MANAGED_BY)
    foreign = obj("ConfigMap", "m--cpu")  # made by hand: not in the cache
    state = ReadsCounted(filled(ours), in_the_api=[foreign])
    assert state.get("v1", "Service", "ns", "m--cpu") is not None
    assert state.get("v1", "ConfigMap", "ns", "m--cpu") is None
    assert state.reads == []
    desired = [{"apiVersion": "v1", "kind": k, "metadata": {"name": "m--cpu", "namespace": "ns"}}
               for k in ("Service", "ConfigMap", "Deployment")]  # fmt: skip
    observed = {"Service": ours, "ConfigMap": None, "Deployment": None, "PodDisruptionBudget": None}
    confirmed = state.confirm(observed, desired)
    assert state.reads == [("ConfigMap", "m--cpu"), ("Deployment", "m--cpu")]  # not the PDB: not desired
    assert confirmed["ConfigMap"] is foreign and confirmed["Deployment"] is None


def test_cluster_state_selects_pods_by_every_label_asked_for():
    serving = obj("Pod", "s", labels={MODEL: "m", "tensorkiln.dev/hardware-class": "cpu"})
    other_class = obj("Pod", "t", labels={MODEL: "m", "tensorkiln.dev/hardware-class": "gpu"})
    compile_pod = obj("Pod", "c", labels={MODEL: "m", "job-name": "j"}, created="2026-12-01T11:00:00Z")
    older = obj("Pod", "c0", labels={MODEL: "m", "job-name": "j"}, created="2026-12-01T09:00:00Z")
    state = ReadsCounted(filled(serving, other_class, compile_pod, older))
    assert [p["metadata"]["name"] for p in state.pods("ns", {MODEL: "m", "tensorkiln.dev/hardware-class": "cpu"})] == [
        "s"
    ]
    assert state.newest_pod("ns", "j")["metadata"]["name"] == "c"
    assert state.newest_pod("ns", "none") is None
    assert state.reads == []


@pytest.mark.parametrize("kind", ["Node", "InferenceModel", "CompileJob"])
def test_listings_come_from_the_cache(kind):
    listed = obj(kind, "x", namespace=None if kind == "Node" else "ns")
    state = ReadsCounted(filled(listed))
    if kind == "Node":
        assert state.nodes() == [cache.kept(listed)]
    else:
        assert state.cache.all(kind) == [cache.kept(listed)]


def test_objects_are_kept_deflated_against_the_kinds_first_object():
    store = cache.KindStore(KIND["Deployment"])
    template = {"replicas": 1, "template": {"spec": {"containers": [{"name": "triton", "args": ["x" * 40] * 50}]}}}
    for i in range(3):
        store.put(obj("Deployment", f"model-{i}", labels=MANAGED_BY, spec=template))
    stored = [packed for _, packed in store._objects.values()]
    assert all(len(packed) < 100 for packed in stored[1:])  # about 2 kB of JSON each
    assert [d["metadata"]["name"] for d in store.all()] == ["model-0", "model-1", "model-2"]
    assert store.get("ns", "model-2")["spec"] == template
