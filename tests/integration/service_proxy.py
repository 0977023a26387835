"""A SIMULATION of kube-proxy for one Service, for tests that need the API server to reach a
webhook through its Service.

The local cluster has no kube-proxy, and its kube-apiserver (without --enable-aggregator-routing)
resolves a webhook's Service to the Service's ClusterIP, as in any cluster. Nor has a Service
of pods on local-0 any EndpointSlice: their 127.0.0.x addresses are in the loopback range, which
the API server refuses in EndpointSlices (serving.client). So this does what the EndpointSlice
controller and kube-proxy would together: it puts the ClusterIP on the loopback interface and
forwards the Service's port, connection by connection, to a ready pod the Service selects, at
the container port its targetPort names (re-read for each connection). TCP is passed through
untouched, so TLS is between the API server and the pod: server name, caBundle and certificate
are checked for real.
"""

import contextlib
import socket
import subprocess
import threading

from kubernetes import client


def _pump(source: socket.socket, target: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            target.sendall(data)
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


def ready_endpoint(api: client.ApiClient, namespace: str, service: str) -> tuple[str, int] | None:
    """(pod IP, container port) of a ready pod the Service selects, for the Service's first port:
    the endpoint the EndpointSlice controller would list."""
    core = client.CoreV1Api(api)
    spec = core.read_namespaced_service(service, namespace).spec
    target = spec.ports[0].target_port
    selector = ",".join(f"{k}={v}" for k, v in spec.selector.items())
    for pod in core.list_namespaced_pod(namespace, label_selector=selector).items:
        ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
        if not (ready and pod.status.pod_ip) or pod.metadata.deletion_timestamp:
            continue
        if isinstance(target, int):
            return pod.status.pod_ip, target
        for container in pod.spec.containers:
            for port in container.ports or []:
                if port.name == target:
                    return pod.status.pod_ip, port.container_port
    return None


@contextlib.contextmanager
def service_proxy(api: client.ApiClient, namespace: str, service: str):
    """Forward the Service's ClusterIP and (first) port to its ready endpoints while inside."""
    spec = client.CoreV1Api(api).read_namespaced_service(service, namespace).spec
    cluster_ip, service_port = spec.cluster_ip, spec.ports[0]
    added = subprocess.run(["ip", "addr", "add", f"{cluster_ip}/32", "dev", "lo"], capture_output=True, text=True)
    if added.returncode and "File exists" not in added.stderr:
        raise RuntimeError(f"cannot add {cluster_ip} to lo: {added.stderr}")
    listener = socket.create_server((cluster_ip, service_port.port))

    def accept() -> None:
        while True:
            try:
                incoming, _ = listener.accept()
            except OSError:  # closed on exit
                return
            target = ready_endpoint(api, namespace, service)
            if target is None:
                incoming.close()
                continue
            outgoing = socket.create_connection(target, timeout=5)
            outgoing.settimeout(None)
            for a, b in ((incoming, outgoing), (outgoing, incoming)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield cluster_ip
    finally:
        listener.close()
        subprocess.run(["ip", "addr", "del", f"{cluster_ip}/32", "dev", "lo"], capture_output=True)
