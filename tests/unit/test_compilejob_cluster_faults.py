"""Compile failures that are the cluster's fault are retried in a new Job, within a budget; the
model's own failures stay final. The reconciler's actions are listed, cert-manager style."""

import copy
import json
from datetime import UTC, datetime

import pytest
from tensorkiln.builders.job import job_name
from tensorkiln.controllers import compilejob
from tensorkiln.controllers.backoff import Backoff
from tensorkiln.settings import Settings
from tensorkiln.status.compilejob import CLUSTER_RETRY_BUDGET, cluster_fault
from tensorkiln_api.registry.filesystem import FilesystemRegistry

from .test_compilejob_registry_backoff import compile_job

NOW = datetime(2026, 12, 4, 12, tzinfo=UTC)


def job(name: str, condition: str, reason: str = "") -> dict:
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "status": {"failed": 1, "conditions": [{"type": condition, "status": "True", "reason": reason}]},
    }


def pod(ran_s: float | None, message: str = "", **status) -> dict:
    terminated = {"exitCode": 1, "message": message}
    if ran_s is not None:
        terminated |= {"startedAt": "2026-12-04T10:00:00Z", "finishedAt": f"2026-12-04T10:00:{ran_s:02.0f}Z"}
    return {"status": {"containerStatuses": [{"name": "compiler", "state": {"terminated": terminated}}], **status}}


REPORT = json.dumps({"error": {"reason": "DigestMismatch", "message": "wrong digest"}})
CJ = {"spec": {"deadlineSeconds": 600}}


@pytest.mark.parametrize(
    "the_job, the_pod, fault",
    [
        (job("j", "Failed", "DeadlineExceeded"), pod(30), "deadline (600 s) passed while the compiler could not run"),
        (job("j", "Failed", "DeadlineExceeded"), pod(None), "(it never ran)"),
        (job("j", "Failed", "BackoffLimitExceeded"), None, "the compile pod is gone"),
        # A cluster stopped past the deadline: the Job controller deleted the pod when it resumed.
        (job("j", "Failed", "DeadlineExceeded"), None, "the Job's deadline (600 s) passed and the compile pod is gone"),
        (job("j", "Failed", "BackoffLimitExceeded"), pod(5, reason="Evicted", message="low memory"), "evicted"),
        (job("j", "Complete"), pod(5), "the registry holds no engine the compiler reported"),
    ],
)
def test_the_clusters_faults(the_job, the_pod, fault):
    assert fault in cluster_fault(CJ, the_job, the_pod, None)


@pytest.mark.parametrize(
    "the_job, the_pod",
    [
        (job("j", "Failed", "PodFailurePolicy"), pod(5, REPORT)),  # the compiler's report: the model's
        (job("j", "Failed", "BackoffLimitExceeded"), pod(5)),  # a crash, a kill for memory
        (job("j", "Failed", "DeadlineExceeded"), {**pod(None), "status": {"containerStatuses": [
            {"name": "compiler", "state": {"terminated": {"startedAt": "2026-12-04T10:00:00Z",
                                                          "finishedAt": "2026-12-04T10:09:50Z"}}}]}}),  # used it up
        (job("j", "Running"), pod(None)),  # not finished
    ],
)  # fmt: skip
def test_the_models_faults_and_unfinished_jobs_are_not_the_clusters(the_job, the_pod):
    assert cluster_fault(CJ, the_job, the_pod, None) is None


class State:
    """What compilejob.reconcile reads and writes, in memory, with its actions in order."""

    def __init__(self, jobs, pod):
        self.jobs_by_name, self.pod, self.actions = {j["metadata"]["name"]: j for j in jobs}, pod, []

    def jobs(self, namespace, name):
        return list(self.jobs_by_name.values())

    def delete_job(self, namespace, name):
        self.actions.append(("delete Job", name))

    def apply(self, obj):
        self.actions.append(("create Job", obj["metadata"]["name"]))
        return obj

    def newest_pod(self, namespace, job_name):
        return self.pod

    def simulated_nodes(self):
        return set()

    def apply_status(self, obj, status):
        self.actions.append(("status", status["phase"], status.get("clusterRetries", 0)))


def reconcile(tmp_path, body, state):
    registry = FilesystemRegistry(tmp_path / "registry")
    registry.prepare()
    return compilejob.reconcile(state, body, registry, Settings(registry_uri=registry.uri), Backoff())[1]


def test_a_deadline_passed_in_an_outage_starts_a_new_job_then_the_budget_ends_it(tmp_path):
    body = compile_job("file:///registry")
    first = job_name(body)
    state = State([job(first, "Failed", "DeadlineExceeded")], pod(None))
    status = reconcile(tmp_path, body, state)
    second = status["jobName"]
    assert state.actions == [("delete Job", first), ("create Job", second), ("status", "Pending", 1)]
    compiled = next(c for c in status["conditions"] if c["type"] == "Compiled")
    assert compiled["reason"] == "RetryingAfterClusterFault" and "retry 1 of 3" in compiled["message"]
    stalled = next(c for c in status["conditions"] if c["type"] == "Stalled")
    assert stalled["status"] == "False"  # retrying: GitOps tools wait

    spent = copy.deepcopy(body)
    spent["status"] = {**status, "clusterRetries": CLUSTER_RETRY_BUDGET}
    last = job_name(spent)
    state = State([job(last, "Failed", "DeadlineExceeded")], pod(None))
    status = reconcile(tmp_path, spent, state)
    assert state.actions == [("status", "Failed", CLUSTER_RETRY_BUDGET)]  # no Job more: the budget is spent
    assert next(c for c in status["conditions"] if c["type"] == "Stalled")["status"] == "True"


def test_a_failure_of_the_models_own_starts_nothing(tmp_path):
    body = compile_job("file:///registry")
    state = State([job(job_name(body), "Failed", "PodFailurePolicy")], pod(5, REPORT))
    status = reconcile(tmp_path, body, state)
    assert state.actions == [("status", "Failed", 0)]
    assert status["reason"] == "DigestMismatch"
