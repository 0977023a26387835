"""The watch cache (tensorkiln.cluster.cache) and ClusterState's reads through it.

kopf's indexes are Mappings of key -> Store (an iterable of values); here plain dicts of lists stand
in for them, filled with exactly what the index handlers return. The cluster-side behaviour (kopf
filling the indexes, no reads in steady state) is tested on the real API server in
tests/integration/test_watch_cache.py.
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
    """A cache whose indexes hold `objects` as kopf would after running the index handlers."""
    indexes = {k.index_id: {} for k in cache.KINDS}
    for o in objects:
        kind = KIND[o["kind"]]
        for key, value in cache.index_keys(kind, cache.kept(o)).items():
            indexes[kind.index_id].setdefault(key, []).append(value)
    watch_cache = cache.WatchCache()
    watch_cache.attach(indexes)
    watch_cache.mark_filled()
    return watch_cache


def test_kept_drops_managed_fields_and_copies():
    body = obj("Deployment", "d", spec={"replicas": 1})
    body["metadata"]["managedFields"] = [{"manager": "tensorkiln"}]
    copy = cache.kept(body)
    assert "managedFields" not in copy["metadata"]
    body["spec"]["replicas"] = 5
    assert copy["spec"]["replicas"] == 1


def test_index_keys_by_name_by_the_kinds_labels_and_all():
    pod = obj("Pod", "p", labels={MODEL: "m", "job-name": "j", "other": "x"})
    assert set(cache.index_keys(KIND["Pod"], pod)) == {(), ("ns", "p"), ("ns", MODEL, "m"), ("ns", "job-name", "j")}
    node = obj("Node", "n1", namespace=None)
    assert set(cache.index_keys(KIND["Node"], node)) == {(), (None, "n1")}


def test_owned_kinds_are_cached_only_with_our_managed_by_label():
    for kind in ("Deployment", "Service", "ConfigMap", "PodDisruptionBudget", "HorizontalPodAutoscaler"):
        assert KIND[kind].labels == MANAGED_BY
    assert KIND["Job"].labels == {COMPILE_JOB: cache.kopf.PRESENT}


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


def test_two_uids_under_one_name_give_the_newest():
    old = obj("Deployment", "d", rv="5", labels=MANAGED_BY, created="2026-12-01T09:00:00Z")
    new = obj("Deployment", "d", rv="9", labels=MANAGED_BY, created="2026-12-01T10:00:00Z")
    assert filled(old, new).get("Deployment", "ns", "d")["metadata"]["resourceVersion"] == "9"


def test_a_write_is_read_back_until_the_watch_brings_it_or_a_newer_one():
    watch_cache = filled(obj("CompileJob", "a", rv="10", status={"phase": "Running"}))
    watch_cache.wrote(obj("CompileJob", "a", rv="12", status={"phase": "Succeeded"}))
    assert watch_cache.get("CompileJob", "ns", "a")["status"]["phase"] == "Succeeded"
    assert watch_cache.all("CompileJob")[0]["status"]["phase"] == "Succeeded"
    # the watch catches up (and goes further): the index's word again
    caught_up = filled(obj("CompileJob", "a", rv="13", status={"phase": "Succeeded", "x": 1}))
    caught_up._writes = watch_cache._writes
    assert caught_up.get("CompileJob", "ns", "a")["status"] == {"phase": "Succeeded", "x": 1}
    assert caught_up._writes == {}


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


def test_nothing_is_served_before_kopf_has_filled_the_indexes():
    watch_cache = cache.WatchCache()
    watch_cache.attach({k.index_id: {} for k in cache.KINDS})
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
