"""Clients of TensorKiln's Triton pods: where to send requests, and gRPC inference.

Requests go to a model's Service (its ClusterIP and gRPC port): kube-proxy routes each connection
to a ready pod, the one the EndpointSlice controller lists. `ready_endpoints` reads those
EndpointSlices, to tell "no ready pod" from a connection error and to reach one pod's metrics.

`infer` uses `tritonclient.grpc`, whose client is thread-safe (tritonclient.http's is
gevent-based and must not be shared between threads); one client per address is kept.
"""

from __future__ import annotations

import functools
import re
import time
import urllib.request

import numpy as np
import tritonclient.grpc as grpcclient
from kubernetes import client
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

GRPC_PORT = 8001
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
# A Service whose first pod just became ready routes once kube-proxy has synced: a second or two,
# longer on a loaded node.
ROUTING_GRACE_S = 30.0


def service_address(api_client: client.ApiClient, namespace: str, service_name: str, port_name: str = "grpc") -> str:
    """`clusterIP:port` of the Service's port `port_name`."""
    spec = client.CoreV1Api(api_client).read_namespaced_service(service_name, namespace).spec
    port = next((p.port for p in spec.ports or [] if p.name == port_name), GRPC_PORT)
    return f"{spec.cluster_ip}:{port}"


def ready_endpoints(api_client: client.ApiClient, namespace: str, service_name: str) -> list[str]:
    """Addresses of the Service's ready, not terminating endpoints (its EndpointSlices), sorted."""
    slices = client.DiscoveryV1Api(api_client).list_namespaced_endpoint_slice(
        namespace, label_selector=f"{SERVICE_NAME_LABEL}={service_name}"
    )
    return sorted(
        address
        for endpoint_slice in slices.items
        for endpoint in endpoint_slice.endpoints or []
        if endpoint.conditions is None or endpoint.conditions.ready is not False
        for address in endpoint.addresses
    )


def until_routed(call, grace_s: float = ROUTING_GRACE_S):
    """`call()`, retried for up to `grace_s` while the Service has not yet routed it to a serving pod:
    UNAVAILABLE (nothing answers at the ClusterIP yet), or a model with no version loaded (a pod
    still shutting down, which kube-proxy routes to until its next sync, has unloaded it). Any other
    error, such as a model name the server does not know, or the last one, is raised."""
    deadline = time.monotonic() + grace_s
    while True:
        try:
            return call()
        except InferenceServerException as error:
            if not _not_routed_yet(error) or time.monotonic() >= deadline:
                raise
            time.sleep(0.5)


def _not_routed_yet(error: InferenceServerException) -> bool:
    unloaded = error.status() == "StatusCode.NOT_FOUND" and "has no available versions" in str(error.message())
    return error.status() == "StatusCode.UNAVAILABLE" or unloaded


def infer(address: str, model_name: str, inputs: dict[str, np.ndarray], timeout_s: float | None = None) -> dict:
    """Run `model_name` at `address` (host:port) on `inputs`; every output, by name."""
    return infer_on(grpc_client(address), model_name, inputs, timeout_s)


def infer_on(
    triton: grpcclient.InferenceServerClient, model_name: str, inputs: dict[str, np.ndarray], timeout_s=None
) -> dict:
    """`infer` over a given client (connection)."""
    tensors = []
    for name, array in inputs.items():
        tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    result = triton.infer(model_name, tensors, client_timeout=timeout_s)
    return {output.name: result.as_numpy(output.name) for output in result.get_response().outputs}


@functools.cache
def grpc_client(address: str) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(address)  # one channel per address, shared by all threads


def new_connection(address: str) -> grpcclient.InferenceServerClient:
    """A client with a TCP connection of its own (gRPC shares one per target otherwise): through a
    Service, kube-proxy picks a pod per connection, so several connections spread over its pods."""
    return grpcclient.InferenceServerClient(address, channel_args=[("grpc.use_local_subchannel_pool", 1)])


def settled_counters(ip: str, model: str) -> dict[str, float]:
    """A model's nv_inference_* counters from Triton's metrics endpoint (:8002), once they settle:
    Triton counts a request after its response is sent, so the last one may lag."""
    pattern = re.compile(rf'^(nv_inference_\w+)\{{model="{re.escape(model)}",version="1"\}} (\S+)$', re.MULTILINE)
    previous = None
    for _ in range(50):
        with urllib.request.urlopen(f"http://{ip}:8002/metrics", timeout=5) as reply:
            current = {name: float(value) for name, value in pattern.findall(reply.read().decode())}
        if current == previous:
            return current
        previous = current
        time.sleep(0.1)
    raise RuntimeError(f"Triton's counters for {model} kept changing with no requests in flight")
