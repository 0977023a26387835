"""What the reconcilers read, kept in memory from watches, so that a reconcile and the periodic
resync make no GET or LIST in steady state.

One informer per kind (tensorkiln.cluster.informer) lists and then watches it, and keeps it in that
kind's `KindStore`: each object once, without managedFields, by (namespace, name) and under the
label values the reconcilers select by (`CachedKind.by_labels`). Memory at a thousand models is
mostly this cache, so objects are kept as compact JSON and parsed at each read (`CachedKind.packed`:
a parsed object takes about five times the memory of its JSON, and parsing one costs tens of
microseconds), and Pods, the most numerous kind, with only the fields the reconcilers read
(`CachedKind.only`). The JSON is deflated with the kind's first object as zlib's preset dictionary:
objects of one kind, built by the same builders, share most of their text, so an object of 1-6 kB
keeps a fifth to a tenth of it (plain zlib: a half), for a few microseconds more per read. The cache serves
once every kind has its first listing.

Owned kinds are kept only when they carry our managed-by label: a derived name taken by an object
that is not ours is found by a GET at the moment we would create ours (ClusterState.confirm).

Our own writes are remembered for a short while (`wrote`): while the store still holds an older
resourceVersion of the object, reads get what we wrote, so that the reconcile right after a write
does not act on the version before it (the watch event that brings it arrives a moment later).

Objects read from here are the reader's own, except Nodes (`packed=False`: few, and read at every
reconcile), which are shared with the store: read-only.
"""

from __future__ import annotations

import copy
import json
import threading
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from tensorkiln_api import GROUP, VERSION

from tensorkiln.builders.labels import COMPILE_JOB, MANAGED_BY, MODEL

JOB_NAME = "job-name"  # set by the Job controller on a Job's pods
NODE_NAME = "spec.nodeName"  # the index of pods by the node they are bound to (CachedKind.by_node)
WRITES_KEPT_SECONDS = 60.0  # far longer than a watch event takes to arrive
# Of a container, what the least-cost offers (hardware.pools: what each pod takes from its node) read.
CONTAINER_REQUESTS = {"resources": ("requests",)}
# What status.compilejob (placement, termination report), status.serving (why pods do not start) and
# hardware.pools (what is bound to a node and what it requests) read.
POD_FIELDS_READ = {
    "metadata": ("name", "namespace", "uid", "labels", "creationTimestamp", "resourceVersion", "deletionTimestamp"),
    "spec": {"nodeName": None, "containers": CONTAINER_REQUESTS, "initContainers": CONTAINER_REQUESTS},
    "status": ("phase", "conditions", "containerStatuses", "initContainerStatuses"),
}
# What `only` keeps of a mapping: the keys named (each whole), or by key what to keep of its value
# (None: the value whole; a list is kept item by item).
Keep = tuple[str, ...] | Mapping[str, "Keep | None"]


@dataclass(frozen=True)
class CachedKind:
    group: str
    version: str
    plural: str
    kind: str
    selector: str = ""  # label selector of the objects kept
    by_labels: tuple[str, ...] = ()  # label keys the reconcilers select by
    only: Mapping[str, Keep] = field(default_factory=dict)  # section -> what of it is kept; other sections whole
    by_node: bool = False  # also selected by spec.nodeName (NODE_NAME), across namespaces
    namespaced: bool = True
    packed: bool = True  # kept as JSON, parsed at each read

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


OURS = ",".join(f"{k}={v}" for k, v in MANAGED_BY.items())
KINDS = (
    CachedKind("", "v1", "nodes", "Node", namespaced=False, packed=False),
    CachedKind(GROUP, VERSION, "inferencemodels", "InferenceModel"),
    CachedKind(GROUP, VERSION, "compilejobs", "CompileJob", by_labels=(MODEL,)),
    CachedKind("batch", "v1", "jobs", "Job", COMPILE_JOB, (COMPILE_JOB,)),
    # Compile pods and serving pods both carry the model label.
    CachedKind("", "v1", "pods", "Pod", MODEL, (MODEL, JOB_NAME), POD_FIELDS_READ, by_node=True),
    CachedKind("apps", "v1", "deployments", "Deployment", OURS),
    CachedKind("", "v1", "services", "Service", OURS),
    CachedKind("", "v1", "configmaps", "ConfigMap", OURS),
    CachedKind("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", OURS),
    CachedKind("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", OURS),
    # Not ours: what pvc:// sources and a PVC-backed registry name (the admission checks).
    CachedKind("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim"),
)


def _trim(value, keep: Keep | None):
    """Of `value`, what `keep` names (None: all of it); a list item by item."""
    if keep is None:
        return value
    if isinstance(value, list):
        return [_trim(item, keep) for item in value]
    if not isinstance(value, Mapping):
        return value
    wanted = dict.fromkeys(keep) if isinstance(keep, tuple) else keep
    return {k: _trim(v, wanted[k]) for k, v in value.items() if k in wanted}


def kept(body: Mapping, only: Mapping[str, Keep] | None = None, copy_: bool = True) -> dict:
    """The object as the cache keeps it: without managedFields (the plan compares the desired-hash
    annotation, never managedFields), of the sections in `only` just what it names, and (with
    `copy_`) a copy of its own."""
    obj = dict(body)
    obj["metadata"] = {k: v for k, v in obj.get("metadata", {}).items() if k != "managedFields"}
    for section, keep in (only or {}).items():
        obj[section] = _trim(obj.get(section, {}), keep)
    return copy.deepcopy(obj) if copy_ else obj  # of what is kept only


def _key(obj: dict) -> tuple[str | None, str]:
    meta = obj["metadata"]
    return meta.get("namespace"), meta["name"]


class KindStore:
    """One kind's objects, by (namespace, name) and by (namespace, label, value) for the label
    keys the kind is selected by; written by its informers' threads, read from any thread."""

    def __init__(self, kind: CachedKind):
        self.kind = kind
        # (namespace, name) -> (its label keys, the object: JSON bytes when the kind is packed)
        self._objects: dict[tuple[str | None, str], tuple[list[tuple], bytes | dict]] = {}
        self._by_label: dict[tuple, dict[tuple[str | None, str], None]] = {}  # an ordered set of names
        self._lock = threading.Lock()
        self._zdict: bytes | None = None  # the first object's JSON, for as long as the store lives

    def _label_keys(self, obj: dict) -> list[tuple]:
        namespace, labels = obj["metadata"].get("namespace"), obj["metadata"].get("labels") or {}
        keys = [(namespace, label, labels[label]) for label in self.kind.by_labels if label in labels]
        if self.kind.by_node and (node := obj.get("spec", {}).get("nodeName")):
            keys.append((None, NODE_NAME, node))  # any namespace: what a node runs
        return keys

    def pack(self, body: dict) -> bytes | dict:
        """`body` as the store holds it: trimmed as `kept` trims it (not copied) and, for a packed
        kind, deflated JSON."""
        obj = kept(body, self.kind.only, copy_=False)
        if not self.kind.packed:
            return obj
        text = json.dumps(obj, separators=(",", ":")).encode()
        if self._zdict is None:
            with self._lock:  # one dictionary, whichever informer thread puts first
                self._zdict = self._zdict or text
        deflate = zlib.compressobj(1, zdict=self._zdict)
        return deflate.compress(text) + deflate.flush()

    def unpack(self, kept_: bytes | dict) -> dict:
        if not self.kind.packed:
            return kept_
        return json.loads(zlib.decompressobj(zdict=self._zdict).decompress(kept_))

    def _drop(self, key: tuple[str | None, str]) -> bool:
        before = self._objects.pop(key, None)
        if before is not None:
            for label_key in before[0]:
                self._by_label.get(label_key, {}).pop(key, None)
        return before is not None

    def put(self, body: dict) -> None:
        """Keep `body`, which the caller hands over (an informer's freshly parsed object: no copy
        needed), as `kept` trims it."""
        key, label_keys, packed = _key(body), self._label_keys(body), self.pack(body)
        with self._lock:
            self._drop(key)
            self._objects[key] = (label_keys, packed)
            for label_key in label_keys:
                self._by_label.setdefault(label_key, {})[key] = None

    def remove(self, body: dict) -> None:
        with self._lock:
            self._drop(_key(body))

    def replace(self, bodies: list[dict], namespace: str | None = None) -> list[tuple[str, dict]]:
        """Hold exactly `bodies` (a fresh listing) in `namespace` (None: in every namespace), the
        other namespaces' objects untouched (each watched namespace has an informer of its own
        over this one store); returns the changes as (event type, object), for a listing that
        follows a broken watch."""
        listed = {_key(b) for b in bodies}
        changes = []
        for body in bodies:
            before = self.get(*_key(body))
            self.put(body)
            if before is None or before["metadata"].get("resourceVersion") != body["metadata"].get("resourceVersion"):
                changes.append(("ADDED" if before is None else "MODIFIED", body))
        with self._lock:
            gone = [
                (key, self._objects[key][1])
                for key in self._objects
                if key not in listed and (namespace is None or key[0] == namespace)
            ]
            for key, _ in gone:
                self._drop(key)
        return changes + [("DELETED", self.unpack(obj)) for _, obj in gone]

    def get(self, namespace: str | None, name: str) -> dict | None:
        found = self._objects.get((namespace, name))
        return None if found is None else self.unpack(found[1])

    def select(self, namespace: str | None, label: str, value: str) -> list[dict]:
        with self._lock:
            found = [self._objects[key][1] for key in self._by_label.get((namespace, label, value), {})]
        return [self.unpack(obj) for obj in found]

    def all(self) -> list[dict]:
        with self._lock:
            found = [obj for _, obj in self._objects.values()]
        return [self.unpack(obj) for obj in found]


def _version(obj: dict) -> int:
    """resourceVersion as a number (etcd's revision); -1 when it is not one."""
    try:
        return int(obj["metadata"].get("resourceVersion", ""))
    except ValueError:
        return -1


class WatchCache:
    """Every cached kind's store, filled by the informers (tensorkiln.cluster.informer); serves
    once each kind has its first listing, and from any thread."""

    def __init__(self) -> None:
        self.stores = {k.kind: KindStore(k) for k in KINDS}
        self._filled = threading.Event()
        # by kind, by (namespace, name): (when, its resourceVersion, what the write returned, packed)
        self._writes: dict[str, dict[tuple[str | None, str], tuple[float, int, bytes]]] = {}
        self._writes_lock = threading.Lock()
        self._purged = 0.0

    def mark_filled(self) -> None:
        """Serve from now on: every store holds its kind's first listing."""
        self._filled.set()

    @property
    def filled(self) -> bool:
        return self._filled.is_set()

    def serves(self, kind: str) -> bool:
        return self._filled.is_set() and kind in self.stores

    def get(self, kind: str, namespace: str | None, name: str) -> dict | None:
        return self._fresher(kind, [self.stores[kind].get(namespace, name)])[0]

    def select(self, kind: str, namespace: str | None, label: str, value: str) -> list[dict]:
        return self._fresher(kind, self.stores[kind].select(namespace, label, value))

    def all(self, kind: str) -> list[dict]:
        return self._fresher(kind, self.stores[kind].all())

    def wrote(self, obj: dict) -> None:
        """Remember what a write returned, until the watch brings that version or a newer one; packed
        as its kind's store packs (a thousand models converging have thousands of writes in flight)."""
        store = self.stores.get(obj["kind"])
        if store is None or not store.kind.packed:  # not read from here, or never written (Nodes)
            return
        meta, now = obj["metadata"], time.monotonic()
        with self._writes_lock:
            if now - self._purged > 1.0:  # not at every write: thousands may be remembered
                for written in self._writes.values():
                    for key in [k for k, (at, *_) in written.items() if now - at > WRITES_KEPT_SECONDS]:
                        del written[key]
                self._purged = now
            packed = store.pack(obj)
            key = (meta.get("namespace"), meta["name"])
            self._writes.setdefault(obj["kind"], {})[key] = (now, _version(obj), packed)

    def echoes(self, kind: str, obj: dict) -> bool:
        """Whether `obj`, just seen by a watch, is exactly what one of our writes returned (its
        resourceVersion): the echo of our own write, which tells its owner nothing new."""
        meta = obj["metadata"]
        with self._writes_lock:
            ours = self._writes.get(kind, {}).get((meta.get("namespace"), meta["name"]))
        return ours is not None and ours[1] == _version(obj) >= 0

    def _fresher(self, kind: str, stored: list[dict | None]) -> list[dict | None]:
        """Each of `stored`, or what we wrote over it when that is newer. An object the store does
        not hold is absent, whatever we wrote: deleted since, or created and not yet seen (a
        creation is confirmed by a GET anyway: ClusterState.confirm)."""
        with self._writes_lock:
            written = self._writes.get(kind)
            if not written:
                return stored
            now, fresher = time.monotonic(), []
            for obj in stored:
                key = None if obj is None else (obj["metadata"].get("namespace"), obj["metadata"]["name"])
                ours = written.get(key)
                if ours is None:
                    fresher.append(obj)
                elif _version(obj) >= ours[1] or now - ours[0] > WRITES_KEPT_SECONDS:
                    del written[key]  # the watch has caught up, or never will
                    fresher.append(obj)
                else:
                    fresher.append(self.stores[kind].unpack(ours[2]))
            return fresher
