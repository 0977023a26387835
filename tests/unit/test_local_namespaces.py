"""Deleting a test namespace of the local cluster: its pods go at once, after the namespace is
terminating, so the namespace controller has no grace period to wait out; its volume goes with its
claim. The caller waits for the pods, which hold what the next test needs, or for the whole namespace."""

from types import SimpleNamespace

import pytest
from tensorkiln_local import install


def listing(*names):
    return SimpleNamespace(items=[SimpleNamespace(metadata=SimpleNamespace(name=n)) for n in names])


class Core:
    """Its pods are gone at the second look, the namespace at the fourth."""

    def __init__(self):
        self.calls, self.pod_looks, self.namespace_looks = [], 0, 0

    def delete_namespace(self, name):
        self.calls.append(("delete namespace", name))

    def delete_collection_namespaced_pod(self, namespace, grace_period_seconds):
        self.calls.append(("delete pods", namespace, grace_period_seconds))

    def delete_persistent_volume(self, name):
        self.calls.append(("delete volume", name))

    def list_namespaced_pod(self, namespace):
        self.pod_looks += 1
        return listing("compile-pod") if self.pod_looks < 2 else listing()

    def list_namespace(self):
        self.namespace_looks += 1
        return listing("t-1") if self.namespace_looks < 4 else listing()


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch):
    monkeypatch.setattr(install.processes.time, "sleep", lambda s: None)


EXPECTED_CALLS = [
    ("delete namespace", "t-1"),
    ("delete pods", "t-1", 0),
    ("delete volume", install.registry_claim("t-1")[0]["metadata"]["name"]),
]


def test_the_namespace_then_its_pods_at_once_then_its_volume_waiting_for_the_pods_only():
    core = Core()
    install.delete_namespace(core, "t-1")
    assert core.calls == EXPECTED_CALLS
    assert (core.pod_looks, core.namespace_looks) == (2, 0)


def test_until_gone_waits_for_the_namespace_itself():
    core = Core()
    install.delete_namespace(core, "t-1", until_gone=True)
    assert core.calls == EXPECTED_CALLS
    assert core.namespace_looks == 4
