"""Finding a model's ready Triton pods behind its Service (the local cluster has no Service routing)."""

from datetime import UTC, datetime

from kubernetes.client import (
    V1Container,
    V1ContainerPort,
    V1ObjectMeta,
    V1Pod,
    V1PodCondition,
    V1PodSpec,
    V1PodStatus,
    V1Service,
    V1ServicePort,
    V1ServiceSpec,
)
from tensorkiln.serving import client


def pod(name: str, ip: str | None, ready: bool, deleting: bool = False) -> V1Pod:
    return V1Pod(
        metadata=V1ObjectMeta(name=name, deletion_timestamp=datetime.now(UTC) if deleting else None),
        spec=V1PodSpec(
            containers=[V1Container(name="triton", ports=[V1ContainerPort(container_port=8001, name="grpc")])]
        ),
        status=V1PodStatus(pod_ip=ip, conditions=[V1PodCondition(type="Ready", status=str(ready))]),
    )


class FakeCore:
    def __init__(self, service: V1Service, pods: list[V1Pod]):
        self.service, self.pods, self.selectors = service, pods, []

    def __call__(self, api_client):
        return self

    def read_namespaced_service(self, name, namespace):
        return self.service

    def list_namespaced_pod(self, namespace, label_selector):
        self.selectors.append(label_selector)
        return type("PodList", (), {"items": self.pods})


def test_endpoints_are_the_ready_pods_grpc_addresses(monkeypatch):
    service = V1Service(
        spec=V1ServiceSpec(
            selector={"tensorkiln.dev/target": "cpu", "app.kubernetes.io/name": "ocr"},
            ports=[
                V1ServicePort(port=8000, name="http", target_port="http"),
                V1ServicePort(port=8001, name="grpc", target_port="grpc"),
            ],
        )
    )
    pods = [
        pod("b", "127.0.0.11", ready=True),
        pod("a", "127.0.0.10", ready=True),
        pod("starting", "127.0.0.12", ready=False),
        pod("leaving", "127.0.0.13", ready=True, deleting=True),
        pod("unscheduled", None, ready=False),
    ]
    core = FakeCore(service, pods)
    monkeypatch.setattr(client.client, "CoreV1Api", core)

    assert client.endpoints(None, "ns", "ocr") == ["127.0.0.10:8001", "127.0.0.11:8001"]
    assert core.selectors == ["app.kubernetes.io/name=ocr,tensorkiln.dev/target=cpu"]


def test_a_service_without_selector_has_no_pods_to_find(monkeypatch):
    monkeypatch.setattr(client.client, "CoreV1Api", FakeCore(V1Service(spec=V1ServiceSpec()), []))
    assert client.endpoints(None, "ns", "external") == []
