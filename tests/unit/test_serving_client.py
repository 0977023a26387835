"""Where requests to a model go: its Service's ClusterIP, and its ready endpoints from EndpointSlices."""

import pytest
from kubernetes.client import (
    V1Endpoint,
    V1EndpointConditions,
    V1EndpointSlice,
    V1EndpointSliceList,
    V1ObjectMeta,
    V1Service,
    V1ServicePort,
    V1ServiceSpec,
)
from tensorkiln_client import triton
from tritonclient.utils import InferenceServerException


class FakeApis:
    def __init__(self, service: V1Service, slices: list[V1EndpointSlice]):
        self.service, self.slices, self.selectors = service, slices, []

    def __call__(self, api_client):
        return self

    def read_namespaced_service(self, name, namespace):
        return self.service

    def list_namespaced_endpoint_slice(self, namespace, label_selector):
        self.selectors.append(label_selector)
        return V1EndpointSliceList(items=self.slices)


def endpoint(ip: str, ready: bool | None) -> V1Endpoint:
    return V1Endpoint(addresses=[ip], conditions=None if ready is None else V1EndpointConditions(ready=ready))


def test_the_address_is_the_cluster_ip_and_the_grpc_port(monkeypatch):
    service = V1Service(
        spec=V1ServiceSpec(
            cluster_ip="10.96.3.4",
            ports=[V1ServicePort(port=8000, name="http"), V1ServicePort(port=8001, name="grpc")],
        )
    )
    monkeypatch.setattr(triton.client, "CoreV1Api", FakeApis(service, []))
    assert triton.service_address(None, "ns", "ocr") == "10.96.3.4:8001"
    assert triton.service_address(None, "ns", "ocr", "http") == "10.96.3.4:8000"


def test_ready_endpoints_are_those_the_endpoint_slices_mark_ready(monkeypatch):
    slices = [
        V1EndpointSlice(
            address_type="IPv4",
            metadata=V1ObjectMeta(name="ocr-a"),
            endpoints=[endpoint("10.244.0.11", True), endpoint("10.244.0.12", False)],
        ),
        # A nil ready condition means ready (the API's rule).
        V1EndpointSlice(
            address_type="IPv4", metadata=V1ObjectMeta(name="ocr-b"), endpoints=[endpoint("10.244.1.5", None)]
        ),
        V1EndpointSlice(address_type="IPv4", metadata=V1ObjectMeta(name="ocr-c"), endpoints=None),
    ]
    apis = FakeApis(V1Service(), slices)
    monkeypatch.setattr(triton.client, "DiscoveryV1Api", apis)
    assert triton.ready_endpoints(None, "ns", "ocr") == ["10.244.0.11", "10.244.1.5"]
    assert apis.selectors == ["kubernetes.io/service-name=ocr"]


def unavailable_then(answer, failures: int, status="StatusCode.UNAVAILABLE", message="connection refused"):
    calls = []

    def call():
        calls.append(1)
        if len(calls) <= failures:
            raise InferenceServerException(message, status=status)
        return answer

    return call, calls


def test_until_routed_retries_while_nothing_answers_at_the_cluster_ip(monkeypatch):
    monkeypatch.setattr(triton.time, "sleep", lambda s: None)
    call, calls = unavailable_then("ready", failures=3)
    assert triton.until_routed(call) == "ready"
    assert len(calls) == 4


def test_until_routed_retries_while_a_shutting_down_pod_has_unloaded_the_model(monkeypatch):
    monkeypatch.setattr(triton.time, "sleep", lambda s: None)
    unloaded = "Request for unknown model: 'ocr-cls' has no available versions"
    call, calls = unavailable_then("ready", failures=2, status="StatusCode.NOT_FOUND", message=unloaded)
    assert triton.until_routed(call) == "ready"
    assert len(calls) == 3


def test_until_routed_raises_other_errors_at_once_and_unavailable_after_the_grace(monkeypatch):
    monkeypatch.setattr(triton.time, "sleep", lambda s: None)
    unknown = "Request for unknown model: 'ocr-clss' is not found"
    call, calls = unavailable_then("ready", failures=1, status="StatusCode.NOT_FOUND", message=unknown)
    with pytest.raises(InferenceServerException, match="is not found"):
        triton.until_routed(call)
    assert len(calls) == 1
    call, calls = unavailable_then("ready", failures=10**6)
    with pytest.raises(InferenceServerException):
        triton.until_routed(call, grace_s=0)
    assert len(calls) == 1
