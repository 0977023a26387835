"""Clients of TensorKiln's Triton pods: where to send requests, and gRPC inference.

`endpoints` finds the ready pods behind a model's Service and returns their gRPC addresses.
On the local cluster a Service cannot route: every pod of local-0 has a loopback IP, and the
API server refuses EndpointSlices with such addresses (`endpoints[0].addresses[0]: Invalid
value: "127.0.0.10": may not be in the loopback range`), so clients discover the ready pods
themselves and spread requests over them. In a real cluster, clients use the Service's
ClusterIP (or its DNS name) and kube-proxy does this.

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
from tritonclient.utils import np_to_triton_dtype

GRPC_PORT = 8001


def endpoints(api_client: client.ApiClient, namespace: str, service_name: str) -> list[str]:
    """`ip:port` gRPC addresses of the ready pods the Service selects, sorted."""
    core = client.CoreV1Api(api_client)
    service = core.read_namespaced_service(service_name, namespace)
    if not service.spec.selector:  # a Service without selector has hand-made endpoints, not pods
        return []
    selector = ",".join(f"{key}={value}" for key, value in sorted(service.spec.selector.items()))
    target = next((p.target_port for p in service.spec.ports or [] if p.name == "grpc"), None) or GRPC_PORT
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    return sorted(f"{pod.status.pod_ip}:{_port(pod, target)}" for pod in pods if _ready(pod))


def infer(address: str, model_name: str, inputs: dict[str, np.ndarray], timeout_s: float | None = None) -> dict:
    """Run `model_name` at `address` (host:port) on `inputs`; every output, by name."""
    tensors = []
    for name, array in inputs.items():
        tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    result = grpc_client(address).infer(model_name, tensors, client_timeout=timeout_s)
    return {output.name: result.as_numpy(output.name) for output in result.get_response().outputs}


@functools.cache
def grpc_client(address: str) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(address)  # one channel per address, shared by all threads


def _ready(pod: client.V1Pod) -> bool:
    conditions = pod.status.conditions or []
    return (
        pod.metadata.deletion_timestamp is None
        and bool(pod.status.pod_ip)
        and any(c.type == "Ready" and c.status == "True" for c in conditions)
    )


def _port(pod: client.V1Pod, target: int | str) -> int:
    """A Service's targetPort: a number, or the name of a container port."""
    if isinstance(target, int) or str(target).isdigit():
        return int(target)
    ports = [port for container in pod.spec.containers for port in container.ports or []]
    return next((port.container_port for port in ports if port.name == target), GRPC_PORT)


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
