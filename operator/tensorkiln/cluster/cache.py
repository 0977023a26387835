"""What the reconcilers read, kept in memory from kopf's watches, so that a reconcile and the
periodic resync make no GET or LIST in steady state.

One kopf index per kind (`@kopf.index`). kopf fills every index from its initial listing before
it runs any other handler, and keeps it current from the same watch streams its handlers use.
Each object is kept once, without managedFields, under its (namespace, name), under the label
keys the reconcilers look up by (`CachedKind.by_labels`), and under `ALL`.

Owned kinds are kept only when they carry our managed-by label: a derived name taken by an object
that is not ours is found by a GET at the moment we would create ours (ClusterState.confirm).

Our own writes are remembered for a short while (`wrote`): while the index still holds an older
resourceVersion of the object, reads get what we wrote, so that the reconcile right after a write
does not act on the version before it (the watch event that brings it arrives a moment later).

Objects read from here are shared with the index: read-only.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import kopf

from tensorkiln.api import GROUP, VERSION
from tensorkiln.builders.labels import COMPILE_JOB, MANAGED_BY, MODEL

ALL = ()  # the index key under which every object of a kind is kept
JOB_NAME = "job-name"  # set by the Job controller on a Job's pods
WRITES_KEPT_SECONDS = 60.0  # far longer than a watch event takes to arrive


@dataclass(frozen=True)
class CachedKind:
    group: str
    version: str
    plural: str
    kind: str
    labels: Mapping[str, object] = field(default_factory=dict)  # kopf's label filter
    by_labels: tuple[str, ...] = ()  # label keys the reconcilers select by

    @property
    def index_id(self) -> str:
        return f"cached_{self.plural}"


KINDS = (
    CachedKind("", "v1", "nodes", "Node"),
    CachedKind(GROUP, VERSION, "inferencemodels", "InferenceModel"),
    CachedKind(GROUP, VERSION, "compilejobs", "CompileJob", by_labels=(MODEL,)),
    CachedKind("batch", "v1", "jobs", "Job", {COMPILE_JOB: kopf.PRESENT}, (COMPILE_JOB,)),
    # Compile pods and serving pods both carry the model label.
    CachedKind("", "v1", "pods", "Pod", {MODEL: kopf.PRESENT}, (MODEL, JOB_NAME)),
    CachedKind("apps", "v1", "deployments", "Deployment", MANAGED_BY),
    CachedKind("", "v1", "services", "Service", MANAGED_BY),
    CachedKind("", "v1", "configmaps", "ConfigMap", MANAGED_BY),
    CachedKind("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", MANAGED_BY),
    CachedKind("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", MANAGED_BY),
    # Not ours: what pvc:// sources and a PVC-backed registry name (the admission checks).
    CachedKind("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim"),
)


def kept(body: Mapping) -> dict:
    """The object as the cache keeps it: a copy of its own (kopf's event bodies are kopf's),
    without managedFields (the plan compares the desired-hash annotation, never managedFields)."""
    obj = copy.deepcopy(dict(body))
    obj["metadata"] = {k: v for k, v in obj.get("metadata", {}).items() if k != "managedFields"}
    return obj


def index_keys(kind: CachedKind, obj: dict) -> dict:
    """Every key `obj` is found under."""
    meta = obj["metadata"]
    namespace, labels = meta.get("namespace"), meta.get("labels") or {}
    keys = {ALL: obj, (namespace, meta["name"]): obj}
    for label in kind.by_labels:
        if label in labels:
            keys[(namespace, label, labels[label])] = obj
    return keys


def _version(obj: dict) -> int:
    """resourceVersion as a number (etcd's revision); -1 when it is not one."""
    try:
        return int(obj["metadata"].get("resourceVersion", ""))
    except ValueError:
        return -1


class WatchCache:
    """The indexes kopf fills (`attach`, from a startup handler), read from any thread."""

    def __init__(self) -> None:
        self._indexes: Mapping[str, Mapping] = {}
        self._filled = threading.Event()
        self._writes: dict[tuple[str, str | None, str], tuple[float, dict]] = {}
        self._writes_lock = threading.Lock()

    def attach(self, indexes: Mapping[str, Mapping]) -> None:
        self._indexes = {k.kind: indexes[k.index_id] for k in KINDS}

    def mark_filled(self) -> None:
        """kopf runs resource handlers only once every index holds its initial listing."""
        self._filled.set()

    @property
    def filled(self) -> bool:
        return self._filled.is_set()

    def serves(self, kind: str) -> bool:
        return self._filled.is_set() and kind in self._indexes

    def _values(self, kind: str, key: tuple) -> list[dict]:
        store = self._indexes[kind].get(key)
        # list() copies a Store in one C call, so kopf's loop updating it meanwhile is harmless.
        return list(store) if store is not None else []

    def get(self, kind: str, namespace: str | None, name: str) -> dict | None:
        found = self._values(kind, (namespace, name))
        # Two uids under one name: deleted and made again, the deletion's event still on its way.
        newest = max(found, key=lambda o: o["metadata"].get("creationTimestamp") or "", default=None)
        return self._fresher(kind, namespace, name, newest)

    def select(self, kind: str, namespace: str | None, label: str, value: str) -> list[dict]:
        return [
            self._fresher(kind, namespace, o["metadata"]["name"], o)
            for o in self._values(kind, (namespace, label, value))
        ]

    def all(self, kind: str) -> list[dict]:
        return [
            self._fresher(kind, o["metadata"].get("namespace"), o["metadata"]["name"], o)
            for o in self._values(kind, ALL)
        ]

    def wrote(self, obj: dict) -> None:
        """Remember what a write returned, until the watch brings that version or a newer one."""
        meta, now = obj["metadata"], time.monotonic()
        with self._writes_lock:
            for key in [k for k, (at, _) in self._writes.items() if now - at > WRITES_KEPT_SECONDS]:
                del self._writes[key]
            self._writes[(obj["kind"], meta.get("namespace"), meta["name"])] = (now, kept(obj))

    def _fresher(self, kind: str, namespace: str | None, name: str, indexed: dict | None) -> dict | None:
        """`indexed`, or what we wrote over it when that is newer. An object the index does not
        hold is absent, whatever we wrote: deleted since, or created and not yet seen (a creation
        is confirmed by a GET anyway: ClusterState.confirm)."""
        key = (kind, namespace, name)
        with self._writes_lock:
            written = self._writes.get(key)
            if written is None or indexed is None:
                return indexed
            if _version(indexed) >= _version(written[1]) or time.monotonic() - written[0] > WRITES_KEPT_SECONDS:
                del self._writes[key]  # the watch has caught up, or never will
                return indexed
            return written[1]


def register(cache: WatchCache, registry: kopf.OperatorRegistry) -> None:
    """kopf index handlers for every kind in KINDS, and the startup handler that hands the
    indexes to `cache`."""
    for cached in KINDS:

        def index(body, cached=cached, **_) -> dict:
            return index_keys(cached, kept(body))

        labels = dict(cached.labels) or None
        kopf.index(cached.group, cached.version, cached.plural, id=cached.index_id, labels=labels, registry=registry)(
            index
        )

    @kopf.on.startup(registry=registry)
    def attach_cache(**kwargs) -> None:  # kopf passes every index by its handler's id
        cache.attach(kwargs)

    # The first resource event comes after every initial listing; once filled, the filter keeps
    # the handler (and kopf's log line for it) off every later node event.
    @kopf.on.event("", "v1", "nodes", when=lambda **_: not cache.filled, registry=registry)
    async def cache_filled(**_) -> None:
        cache.mark_filled()
