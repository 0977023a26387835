"""A CompileJob facing an unreachable registry: a RegistryUnavailable condition, no Job, and a
retry with backoff (a regression of the fault suite, e2e/faults/test_registry_outage.py).

Before: nothing said the registry was unreachable (the filesystem registry read a missing root
as empty: a cache miss and a new compile), and the only retry was every resync, unbounded.
"""

from types import SimpleNamespace

from tensorkiln.controllers import compilejob
from tensorkiln.controllers.backoff import Backoff
from tensorkiln.settings import Settings
from tensorkiln_api.registry.filesystem import FilesystemRegistry

KEY_DIGEST = "ab" * 32


def test_backoff_doubles_to_its_cap_and_a_success_resets_it():
    backoff = Backoff(first=5, cap=20)
    assert backoff.wait_left("cj", 100.0) == 0
    assert [backoff.failed("cj", 100.0) for _ in range(4)] == [(1, 5), (2, 10), (3, 20), (4, 20)]
    assert backoff.wait_left("cj", 110.0) == 10
    assert backoff.wait_left("other", 110.0) == 0
    backoff.succeeded("cj")
    assert backoff.wait_left("cj", 110.0) == 0


class FakeState:
    """What compilejob.reconcile reads and writes, in memory."""

    def __init__(self):
        self.applied, self.statuses = [], []

    def jobs(self, namespace, name):
        return []

    def apply(self, obj):
        self.applied.append(obj)
        return obj

    def newest_pod(self, namespace, job_name):
        return None

    def get(self, api_version, kind, namespace, name):
        return None  # no Deployment: the model's first compile

    def simulated_nodes(self):
        return set()

    def apply_status(self, obj, status):
        self.statuses.append(status)


def compile_job(registry_uri: str) -> dict:
    return {
        "apiVersion": "tensorkiln.dev/v1alpha1",
        "kind": "CompileJob",
        "metadata": {"name": "m-cpu", "namespace": "ns", "uid": "uid-1", "generation": 1},
        "spec": {
            "modelName": "m",
            "modelDigest": KEY_DIGEST,
            "optionsHash": "0123456789abcdef",
            "source": {"uri": "https://models.example/m.onnx"},
            "hardware": {"className": "cpu", "kind": "CPU", "nodeSelector": {}},
            "registry": {"uri": registry_uri},
            "image": "compiler",
            "retries": 1,
            "deadlineSeconds": 600,
        },
    }


def test_an_unreachable_registry_is_a_condition_and_no_job_then_retried_with_backoff(tmp_path, monkeypatch):
    registry = FilesystemRegistry(tmp_path / "registry")
    registry.prepare()
    registry.root.rmdir()  # gone
    state, backoff = FakeState(), Backoff(first=5, cap=80)
    clock = [1000.0]
    monkeypatch.setattr(compilejob, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    body = compile_job(registry.uri)

    _, status = compilejob.reconcile(state, body, registry, Settings(registry_uri=registry.uri), backoff)
    compiled = next(c for c in status["conditions"] if c["type"] == "Compiled")
    assert (compiled["status"], compiled["reason"]) == ("Unknown", "RegistryUnavailable")
    assert "root is missing" in compiled["message"] and "attempt 1 failed, next in 5 s" in compiled["message"]
    assert state.applied == [], "no compile Job while the cache cannot be asked"

    body["status"] = status
    clock[0] += 2  # within the backoff: the registry is not asked, nothing is written
    assert compilejob.reconcile(state, body, registry, Settings(registry_uri=registry.uri), backoff)[1] == status
    clock[0] += 4
    _, status = compilejob.reconcile(state, body, registry, Settings(registry_uri=registry.uri), backoff)
    assert "attempt 2 failed, next in 10 s" in next(c["message"] for c in status["conditions"])

    registry.root.mkdir()  # back: the next try after the backoff is a miss, and the Job is created
    body["status"] = status
    clock[0] += 10
    _, status = compilejob.reconcile(state, body, registry, Settings(registry_uri=registry.uri), backoff)
    assert [o["kind"] for o in state.applied] == ["Job"]
    assert backoff.wait_left("uid-1", clock[0]) == 0
