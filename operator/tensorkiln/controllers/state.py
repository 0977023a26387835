"""Reading cluster state as plain camelCase dicts, the form the pure functions take."""

import threading
import time

from kubernetes import client
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

from tensorkiln import kube
from tensorkiln.api import GROUP, VERSION
from tensorkiln.builders import labels
from tensorkiln.hardware.classes import is_simulated
from tensorkiln.registry import EngineManifest, Registry


class ClusterState:
    """Thin read/write access shared by the reconcilers (thread-safe: kopf runs sync handlers in threads)."""

    NODE_TTL_SECONDS = 2.0

    def __init__(self, api: client.ApiClient):
        self.api = api
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.dynamic = DynamicClient(api)
        self._nodes: list[dict] = []
        self._nodes_at = float("-inf")
        self._lock = threading.Lock()
        self._manifests: dict[str, EngineManifest] = {}

    def _plain(self, obj) -> dict:
        return self.api.sanitize_for_serialization(obj)

    def nodes(self) -> list[dict]:
        """All nodes, listed at most every NODE_TTL_SECONDS: many models reconcile at once."""
        with self._lock:
            if time.monotonic() - self._nodes_at > self.NODE_TTL_SECONDS:
                self._nodes = [self._plain(n) for n in self.core.list_node().items]
                self._nodes_at = time.monotonic()
            return self._nodes

    def simulated_nodes(self) -> set[str]:
        return {n["metadata"]["name"] for n in self.nodes() if is_simulated(n)}

    def compile_jobs(self, namespace: str, model: str) -> list[dict]:
        listing = self.custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace, "compilejobs", label_selector=f"{labels.MODEL}={model}"
        )
        return listing["items"]

    def jobs(self, namespace: str, compile_job: str) -> list[dict]:
        listing = self.batch.list_namespaced_job(namespace, label_selector=f"{labels.COMPILE_JOB}={compile_job}")
        return [self._plain(j) for j in listing.items]

    def pods(self, namespace: str, labels_: dict[str, str]) -> list[dict]:
        selector = ",".join(f"{k}={v}" for k, v in labels_.items())
        return [self._plain(p) for p in self.core.list_namespaced_pod(namespace, label_selector=selector).items]

    def newest_pod(self, namespace: str, job_name: str) -> dict | None:
        pods = self.core.list_namespaced_pod(namespace, label_selector=f"job-name={job_name}").items
        if not pods:
            return None
        return self._plain(max(pods, key=lambda p: p.metadata.creation_timestamp))

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
        try:
            return self.dynamic.resources.get(api_version=api_version, kind=kind).get(name, namespace).to_dict()
        except NotFoundError:
            return None

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        try:
            self.dynamic.resources.get(api_version=api_version, kind=kind).delete(name, namespace)
        except NotFoundError:
            pass

    def scale_deployment(self, namespace: str, name: str, replicas: int) -> dict:
        """Set replicas through the scale subresource, as an autoscaler does; returns the Deployment."""
        self.apps.patch_namespaced_deployment_scale(
            name, namespace, {"spec": {"replicas": replicas}}, field_manager=kube.FIELD_MANAGER
        )
        return self._plain(self.apps.read_namespaced_deployment(name, namespace))

    def apply(self, obj: dict) -> dict:
        return kube.apply(self.dynamic, obj).to_dict()

    def apply_status(self, obj: dict, status: dict) -> None:
        """Write status; an object deleted since it was read has nothing left to report."""
        body = {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "metadata": {"name": obj["metadata"]["name"], "namespace": obj["metadata"]["namespace"]},
            "status": status,
        }
        try:
            kube.apply(self.dynamic, body, subresource="status")
        except NotFoundError:
            pass
