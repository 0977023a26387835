"""`tensorkiln infer MODEL --input FILE`: one request to a served InferenceModel, its outputs
(top-k for a classifier) and its latency.

The request goes to `--address` (host:port of Triton's gRPC endpoint, e.g. a `kubectl
port-forward` from outside the cluster), else to the model's Service: its ClusterIP, which
kube-proxy routes to a ready Triton pod (from a node or a pod of the cluster). Tensor names,
shapes and types come from Triton's metadata for the model (request).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from kubernetes import client as kube_client
from kubernetes import config as kube_config
from tritonclient.utils import InferenceServerException

from . import request, triton


def load_kube_config() -> None:
    """$KUBECONFIG as it is now, else ~/.kube/config, else the pod's ServiceAccount. The client library
    reads $KUBECONFIG once, when it is imported: a caller that sets it later (a test session, a script)
    would otherwise get ~/.kube/config, or no configuration at all where that file does not exist."""
    path = os.environ.get("KUBECONFIG")
    kube_config.load_config(**({"config_file": path} if path else {}))


def address_of(model: str, namespace: str) -> str:
    """The model's Service, once it has a ready endpoint."""
    load_kube_config()
    api = kube_client.ApiClient()
    try:
        address = triton.service_address(api, namespace, model)
    except kube_client.ApiException as error:
        if error.status == 404:
            raise request.RequestError(f"no Service {namespace}/{model}: is InferenceModel {model} served?") from None
        raise
    if not triton.ready_endpoints(api, namespace, model):
        raise request.RequestError(
            f"no ready Triton pod behind Service {namespace}/{model}: `kubectl get im {model} -n {namespace}` says why"
        )
    return address


def run(
    model: str, namespace: str, path: Path, address: str | None, top: int, labels: list[str] | None = None
) -> list[str]:
    """The lines to print; RequestError for input that does not fit or a model not served."""
    address = address or address_of(model, namespace)
    server = triton.grpc_client(address)
    try:
        metadata = triton.until_routed(lambda: server.get_model_metadata(model, as_json=True))
        config = server.get_model_config(model, as_json=True)["config"]
    except InferenceServerException as error:
        raise request.RequestError(f"Triton at {address} does not serve {model!r}: {error.message()}") from None
    specs = [request.ServedTensor.from_metadata(entry) for entry in metadata["inputs"]]
    inputs = request.inputs_from(path, specs, batching=int(config.get("max_batch_size", 0)) > 0)
    started = time.perf_counter()
    try:
        outputs = triton.infer(address, model, inputs)
    except InferenceServerException as error:
        raise request.RequestError(f"Triton at {address} refused the request: {error.message()}") from None
    latency_ms = (time.perf_counter() - started) * 1000
    lines = [f"{namespace}/{model} at {address}: {latency_ms:.1f} ms (one request, client side)"]
    for name, value in outputs.items():
        lines += request.describe_output(name, value, top, labels)
    return lines
