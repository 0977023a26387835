"""Reading cluster state as plain camelCase dicts, the form the pure functions take.

In the operator, reads come from its watch cache (tensorkiln.cluster.cache) once kopf has filled it;
without one (the CLI, tests, the moments before the first listing) they go to the API server."""

import threading
import time

from kubernetes import client
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError
from tensorkiln_api import GROUP, VERSION
from tensorkiln_api.registry import EngineManifest, Registry

from tensorkiln import kube
from tensorkiln.builders import labels
from tensorkiln.cluster.cache import JOB_NAME, NODE_NAME, WatchCache
from tensorkiln.hardware.classes import is_simulated


class ClusterState:
    """Thin read/write access shared by the reconcilers (thread-safe: kopf runs sync handlers in threads)."""

    NODE_TTL_SECONDS = 2.0

    def __init__(self, api: client.ApiClient, cache: WatchCache | None = None):
        self.api = api
        self.cache = cache
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self._dynamic: DynamicClient | None = None
        self._nodes: list[dict] = []
        self._nodes_at = float("-inf")
        self._lock = threading.Lock()
        self._manifests: dict[str, EngineManifest] = {}

    @property
    def dynamic(self) -> DynamicClient:
        """Made on first use: making one asks the API server for its discovery documents, which an
        operator starting before the API server is reachable must not do yet."""
        with self._lock:
            if self._dynamic is None:
                self._dynamic = DynamicClient(self.api)
            return self._dynamic

    def _plain(self, obj) -> dict:
        return self.api.sanitize_for_serialization(obj)

    def _cached(self, kind: str) -> bool:
        return self.cache is not None and self.cache.serves(kind)

    def nodes(self) -> list[dict]:
        """All nodes; without the cache listed at most every NODE_TTL_SECONDS (many models reconcile at once)."""
        if self._cached("Node"):
            return self.cache.all("Node")
        with self._lock:
            if time.monotonic() - self._nodes_at > self.NODE_TTL_SECONDS:
                self._nodes = [self._plain(n) for n in self.core.list_node().items]
                self._nodes_at = time.monotonic()
            return self._nodes

    def simulated_nodes(self) -> set[str]:
        return {n["metadata"]["name"] for n in self.nodes() if is_simulated(n)}

    def compile_jobs(self, namespace: str, model: str) -> list[dict]:
        if self._cached("CompileJob"):
            return self.cache.select("CompileJob", namespace, labels.MODEL, model)
        listing = self.custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace, "compilejobs", label_selector=f"{labels.MODEL}={model}"
        )
        return listing["items"]

    def jobs(self, namespace: str, compile_job: str) -> list[dict]:
        if self._cached("Job"):
            return self.cache.select("Job", namespace, labels.COMPILE_JOB, compile_job)
        listing = self.batch.list_namespaced_job(namespace, label_selector=f"{labels.COMPILE_JOB}={compile_job}")
        return [self._plain(j) for j in listing.items]

    def pods(self, namespace: str, labels_: dict[str, str]) -> list[dict]:
        if self._cached("Pod") and labels.MODEL in labels_:
            found = self.cache.select("Pod", namespace, labels.MODEL, labels_[labels.MODEL])
            return [p for p in found if labels_.items() <= (p["metadata"].get("labels") or {}).items()]
        selector = ",".join(f"{k}={v}" for k, v in labels_.items())
        return [self._plain(p) for p in self.core.list_namespaced_pod(namespace, label_selector=selector).items]

    def pods_on(self, nodes: list[str]) -> list[dict] | None:
        """Our pods (compile and serving, every namespace) bound to `nodes`, from the cache only: None
        when it does not serve pods (what nodes run is never listed from the API server for this)."""
        if not self._cached("Pod"):
            return None
        return [pod for node in nodes for pod in self.cache.select("Pod", None, NODE_NAME, node)]

    def newest_pod(self, namespace: str, job_name: str) -> dict | None:
        if self._cached("Pod"):
            pods = self.cache.select("Pod", namespace, JOB_NAME, job_name)
        else:
            listing = self.core.list_namespaced_pod(namespace, label_selector=f"{JOB_NAME}={job_name}").items
            pods = [self._plain(p) for p in listing]
        return max(pods, key=lambda p: p["metadata"]["creationTimestamp"], default=None)

    def delete_job(self, namespace: str, name: str) -> None:
        try:
            self.batch.delete_namespaced_job(name, namespace, propagation_policy="Background")
        except client.ApiException as error:
            if error.status != 404:
                raise

    def manifest(self, registry: Registry, digest: str) -> EngineManifest:
        """An engine's manifest; cached, as a digest names immutable content."""
        if digest not in self._manifests:
            self._manifests[digest] = registry.manifest(digest)
        return self._manifests[digest]

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict | None:
        """From the cache where it serves `kind` (which holds only our labelled owned objects:
        see `confirm`), else from the API server."""
        if self._cached(kind):
            return self.cache.get(kind, namespace, name)
        return self.read(api_version, kind, namespace, name)

    def read(self, api_version: str, kind: str, namespace: str, name: str) -> dict | None:
        """From the API server, always."""
        try:
            return self.dynamic.resources.get(api_version=api_version, kind=kind).get(name, namespace).to_dict()
        except NotFoundError:
            return None

    def confirm(self, observed: dict[str, dict | None], desired: list[dict]) -> dict[str, dict | None]:
        """`observed` (by kind), with what the API server holds under each desired name the cache
        has nothing under: we are about to create it, and the cache would not show an object that
        is not ours (owned.check_owner must see it). Only creations cost this GET."""
        confirmed = dict(observed)
        for obj in desired:
            if confirmed.get(obj["kind"]) is None and self._cached(obj["kind"]):
                meta = obj["metadata"]
                confirmed[obj["kind"]] = self.read(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        return confirmed

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        try:
            self.dynamic.resources.get(api_version=api_version, kind=kind).delete(name, namespace)
        except NotFoundError:
            pass

    def _wrote(self, obj: dict) -> dict:
        if self.cache is not None:
            self.cache.wrote(obj)
        return obj

    def scale_deployment(self, deployment: dict, replicas: int) -> dict:
        """Set replicas through the scale subresource, as an autoscaler does; returns the
        Deployment with them (its status catches up in the watch event that follows)."""
        meta = deployment["metadata"]
        scale = self.apps.patch_namespaced_deployment_scale(
            meta["name"], meta["namespace"], {"spec": {"replicas": replicas}}, field_manager=kube.FIELD_MANAGER
        )
        scaled = {
            **deployment,
            "metadata": {**meta, "resourceVersion": scale.metadata.resource_version},
            "spec": {**deployment["spec"], "replicas": replicas},
        }
        return self._wrote(scaled)

    def apply(self, obj: dict) -> dict:
        return self._wrote(kube.apply(self.dynamic, obj).to_dict())

    def apply_status(self, obj: dict, status: dict) -> None:
        """Write status; an object deleted since it was read has nothing left to report."""
        body = {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "metadata": {"name": obj["metadata"]["name"], "namespace": obj["metadata"]["namespace"]},
            "status": status,
        }
        try:
            self._wrote(kube.apply(self.dynamic, body, subresource="status").to_dict())
        except NotFoundError:
            pass
