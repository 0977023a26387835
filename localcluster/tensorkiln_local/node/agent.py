"""The agent: registers the Node, keeps it alive, and runs the pods bound to it.

Threads: the caller's thread waits for the stop event; `heartbeat` renews the node Lease every
10 s and the node status every 30 s (and registers the Node again if someone deleted it);
`pods` lists the pods bound to this node and then watches them. The watch ends every RESYNC_S
and the next round starts with a full list, so reconciliation is level-based: a missed event
converges at the next list, pods that left the API are stopped, and IPs and directories of
pods that no longer exist are released. Each pod is run by its own `PodWorker`.

With the cluster's CA (`ca`: certificate and key), the agent also serves the kubelet endpoint the
API server proxies `kubectl logs` to (kubelet_server.py), on a free port of HOST_IP that the node
status advertises; without it the port is 0 and `kubectl logs` cannot reach this node.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
import time
from ipaddress import IPv4Address
from pathlib import Path

from kubernetes.client.exceptions import ApiException

from .cgroups import Unavailable, open_memory_cgroups
from .ipam import FIRST, LAST, IpAllocator
from .kube import Kube, delete_pod_now, describe, is_status, retry
from .kubelet_server import KubeletServer, server_context
from .node import HOST_IP, LEASE_NAMESPACE, MachineFacts, lease_object, node_object, node_status
from .podspec import CONFIG_ERROR, PlanError
from .runtime import sweep
from .status import TERMINAL_PHASES, timestamp
from .worker import NodeEnv, PodWorker

log = logging.getLogger(__name__)

LEASE_RENEW_S = 10
NODE_STATUS_S = 30
RESYNC_S = 30
WORKER_JOIN_S = 15
CONTROLLER_TAINT_PREFIX = "node.kubernetes.io/"  # not-ready, unreachable, unschedulable: not ours


class KubeResolver:
    """podspec.Resolver over the API; API trouble becomes a retryable PlanError."""

    def __init__(self, kube: Kube):
        self._kube = kube

    def lookup(self, kind: str, namespace: str | None, name: str) -> dict | None:
        path = f"/api/v1/namespaces/{namespace}/{kind}/{name}" if namespace else f"/api/v1/{kind}/{name}"
        try:
            return self._kube.get_or_none(path)
        except Exception as exc:
            where = f"{namespace}/{name}" if namespace else name
            raise PlanError(CONFIG_ERROR, f"reading {kind} {where}: {describe(exc)}", permanent=False) from exc

    def service_account_token(self, pod: dict, audience: str | None, expiration_seconds: int) -> str:
        meta = pod["metadata"]
        account = pod["spec"].get("serviceAccountName") or "default"
        spec = {
            "expirationSeconds": expiration_seconds,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
        }
        if audience:
            spec["audiences"] = [audience]
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        try:
            reply = self._kube.call(
                "POST", f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{account}/token", body=body
            )
        except Exception as exc:
            raise PlanError(
                CONFIG_ERROR, f"service account token for {account}: {describe(exc)}", permanent=False
            ) from exc
        return reply["status"]["token"]


class Agent:
    def __init__(
        self,
        kube: Kube,
        node_name: str,
        state_dir: Path,
        ca: tuple[Path, Path] | None = None,
        pod_ips: tuple[IPv4Address, IPv4Address] = (FIRST, LAST),
    ):
        self.kube = kube
        self.ca = ca
        self.node_name = node_name
        self.state_dir = state_dir
        self.env = NodeEnv(
            kube=kube,
            resolver=KubeResolver(kube),
            ipam=IpAllocator(state_dir / "ipam.json", *pod_ips),
            node_name=node_name,
            state_dir=state_dir,
            search_path=f"{os.path.dirname(sys.executable)}:{os.environ.get('PATH', os.defpath)}",
            apiserver=kube.server,
        )
        self._workers: dict[str, PodWorker] = {}
        self._node_uid = ""
        self._ready_since = ""
        self._memory_limits = (False, "not checked yet")
        self._stop = threading.Event()
        self._kubelet: KubeletServer | None = None

    def run(self, stop: threading.Event) -> None:
        self._stop = stop
        if leftovers := sweep(self.state_dir):
            log.info("killed %d process sessions left by a previous agent", leftovers)
        self._enforce_memory_limits()
        self._serve_kubelet_endpoint()
        if not retry(self._register, what="registering the node", stop=stop):
            return
        for target, name in ((self._heartbeat, "heartbeat"), (self._pods, "pods")):
            threading.Thread(target=target, name=name, daemon=True).start()
        stop.wait()
        workers = [w for w in self._workers.values() if not w.finished.is_set()]
        log.info("stopping: killing the processes of %d pods", len(workers))
        for worker in workers:
            worker.stop("shutdown")
        for worker in workers:
            worker.join(WORKER_JOIN_S)
        if self._kubelet is not None:
            self._kubelet.stop()

    def _serve_kubelet_endpoint(self) -> None:
        if self.ca is None:
            log.warning("no cluster CA given (--ca-cert/--ca-key): no kubelet endpoint, `kubectl logs` will fail")
            return
        context = server_context(*self.ca, self.node_name, [HOST_IP], self.state_dir / "pki")
        self._kubelet = KubeletServer(self.state_dir, self._pod_on_node, context, host=HOST_IP)
        self._kubelet.start()
        log.info("kubelet endpoint (container logs) on https://%s:%d", HOST_IP, self._kubelet.port)

    def _pod_on_node(self, namespace: str, name: str) -> dict | None:
        """The pod, read from the API (its status names the containers' runs), if it is bound here."""
        pod = self.kube.get_or_none(f"/api/v1/namespaces/{namespace}/pods/{name}")
        return pod if pod is not None and pod["spec"].get("nodeName") == self.node_name else None

    def _enforce_memory_limits(self) -> None:
        """Memory cgroups for the containers' limits, or the reason there are none (node condition)."""
        try:
            memory = open_memory_cgroups(self.node_name)
        except (Unavailable, OSError, ValueError) as exc:
            self._memory_limits = (False, f"container memory limits are not enforced: {exc}")
            log.warning("%s", self._memory_limits[1])
            return
        if leftovers := memory.sweep():
            log.info("removed %d memory cgroups left by a previous agent", leftovers)
        self.env = dataclasses.replace(self.env, memory=memory)
        self._memory_limits = (True, memory.describe())
        log.info("%s", memory.describe())

    # -- node ---------------------------------------------------------------------------------

    def _register(self) -> None:
        facts = MachineFacts.probe(self.state_dir)
        body = node_object(self.node_name, facts)
        try:
            node = self.kube.call("POST", "/api/v1/nodes", body=body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            node = self._adopt_existing_node(body)
        self._node_uid = node["metadata"]["uid"]
        ready = next((c for c in (node.get("status") or {}).get("conditions", []) if c["type"] == "Ready"), {})
        # Still Ready from before an agent restart: the condition did not transition.
        self._ready_since = ready["lastTransitionTime"] if ready.get("status") == "True" else timestamp()
        self._post_status(facts)
        log.info("node %s registered (uid %s)", self.node_name, self._node_uid)

    def _adopt_existing_node(self, body: dict) -> dict:
        """Make an existing Node describe this machine, keeping what controllers and users own."""
        node = self.kube.call("GET", f"/api/v1/nodes/{self.node_name}")
        stale_annotations = {
            key: None for key in node["metadata"].get("annotations", {}) if key.startswith("kwok.x-k8s.io/")
        }
        taints = [t for t in node["spec"].get("taints", []) if t["key"].startswith(CONTROLLER_TAINT_PREFIX)]
        patch = {
            "metadata": {
                "labels": body["metadata"]["labels"],
                "annotations": {**stale_annotations, **body["metadata"]["annotations"]},
            },
            "spec": {"taints": taints or None},
        }
        return self.kube.call("PATCH", f"/api/v1/nodes/{self.node_name}", body=patch, patch="merge")

    def _post_status(self, facts: MachineFacts | None = None) -> None:
        facts = facts or MachineFacts.probe(self.state_dir)
        status = node_status(
            self.node_name,
            facts,
            now=timestamp(),
            ready_since=self._ready_since,
            memory_limits=self._memory_limits,
            kubelet_port=self._kubelet.port if self._kubelet else 0,
        )
        self.kube.call("PATCH", f"/api/v1/nodes/{self.node_name}/status", body={"status": status}, patch="strategic")

    def _renew_lease(self) -> None:
        lease = lease_object(self.node_name, self._node_uid, renew_time=timestamp(micro=True))
        leases = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases"
        try:
            self.kube.call("PATCH", f"{leases}/{self.node_name}", body=lease, patch="merge")
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.kube.call("POST", leases, body=lease)

    def _heartbeat(self) -> None:
        next_status = time.monotonic() + NODE_STATUS_S  # _register just sent it
        while True:
            try:
                self._renew_lease()
                if time.monotonic() >= next_status:
                    self._post_status()
                    next_status = time.monotonic() + NODE_STATUS_S
            except Exception as exc:
                if is_status(exc, 404):  # the Node was deleted: register it again
                    log.warning("node %s is gone, registering it again", self.node_name)
                    retry(self._register, what="registering the node", stop=self._stop)
                else:
                    log.warning("heartbeat failed: %s", describe(exc))
            if self._stop.wait(LEASE_RENEW_S):
                return

    # -- pods ---------------------------------------------------------------------------------

    def _pods(self) -> None:
        while retry(self._list_and_watch, what="pod list/watch", stop=self._stop):
            pass

    def _list_and_watch(self) -> None:
        """One round: a full list (the level to converge on), then events until the watch ends."""
        selector = {"fieldSelector": f"spec.nodeName={self.node_name}"}
        listed_at = time.monotonic()
        pods = self.kube.call("GET", "/api/v1/pods", query=selector)
        self._sync(pods["items"], listed_at)
        query = {**selector, "resourceVersion": pods["metadata"]["resourceVersion"]}
        for event in self.kube.watch("/api/v1/pods", query, RESYNC_S):
            if self._stop.is_set():
                return
            if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                self._handle(event["object"], deleted=event["type"] == "DELETED")

    def _sync(self, pods: list[dict], listed_at: float) -> None:
        """Converge on a full list: start what is missing, stop and forget what is gone."""
        for pod in pods:
            self._handle(pod)
        live = {pod["metadata"]["uid"] for pod in pods}
        for uid, worker in list(self._workers.items()):
            if uid not in live and worker.created < listed_at:  # a newer worker may postdate the list
                self._forget(uid)
        known = live | set(self._workers)
        pod_dirs = {p.name for p in (self.state_dir / "pods").glob("*")}
        for uid in (self.env.ipam.uids() | pod_dirs) - known:
            self.env.release(uid)

    def _handle(self, pod: dict, *, deleted: bool = False) -> None:
        try:
            self._dispatch(pod, deleted)
        except Exception:  # one odd pod object must not stop the others from converging
            log.exception("pod %s/%s: cannot handle it", pod["metadata"].get("namespace"), pod["metadata"].get("name"))

    def _dispatch(self, pod: dict, deleted: bool) -> None:
        uid = pod["metadata"]["uid"]
        worker = self._workers.get(uid)
        if deleted:
            self._forget(uid)
        elif worker is not None and not worker.finished.is_set():
            worker.observe(pod)
        elif pod["metadata"].get("deletionTimestamp"):
            # Nothing runs (finished, or never started here): just let the object go.
            try:
                delete_pod_now(self.kube, pod["metadata"])
            except Exception as exc:
                log.warning("pod %s: delete failed (retried at the next list): %s", uid, describe(exc))
                return
            self._forget(uid)
        elif worker is None and (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES:
            log.info("pod %s/%s: starting", pod["metadata"]["namespace"], pod["metadata"]["name"])
            worker = PodWorker(pod, self.env)
            self._workers[uid] = worker
            worker.start()

    def _forget(self, uid: str) -> None:
        worker = self._workers.pop(uid, None)
        if worker is not None and not worker.finished.is_set():
            worker.stop("gone")  # it kills its processes and releases the pod itself
        else:
            self.env.release(uid)
