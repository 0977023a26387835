"""The CompileJob reconciler's decisions (controllers.compilejob.decide, pure), from observed states, as
the actions it lists: the Jobs it deletes and creates, the status it commits, what it tells the
registry's backoff. No cluster, no registry: each case states what observe would have read."""

from datetime import UTC, datetime

import pytest
from registry_fixtures import make_engine
from tensorkiln.builders.job import job_name
from tensorkiln.controllers.compilejob import Decision, Observed, decide
from tensorkiln.settings import Settings
from tensorkiln.status.compilejob import CLUSTER_RETRY_BUDGET, Published
from tensorkiln_api.registry import RegistryUnavailable

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
SETTINGS = Settings(registry_uri="file:///registry")


def compile_job(status: dict | None = None, generation: int = 1) -> dict:
    body = {
        "apiVersion": "tensorkiln.dev/v1alpha1",
        "kind": "CompileJob",
        "metadata": {"name": "m-cpu", "namespace": "ns", "uid": "uid-1", "generation": generation},
        "spec": {
            "modelName": "m",
            "modelDigest": "ab" * 32,
            "optionsHash": "0123456789abcdef",
            "source": {"uri": "https://models.example/m.onnx"},
            "hardware": {"className": "cpu", "kind": "CPU", "nodeSelector": {}},
            "registry": {"uri": "file:///registry"},
            "image": "compiler",
            "retries": 1,
            "deadlineSeconds": 600,
        },
    }
    if status is not None:
        body["status"] = status
    return body


def job(body: dict, *conditions: tuple[str, str]) -> dict:
    return {
        "metadata": {"name": job_name(body), "namespace": "ns"},
        "status": {"conditions": [{"type": t, "status": "True", "reason": r} for t, r in conditions]},
    }


def observed(body: dict, jobs: list[dict] = (), pod: dict | None = None, **read) -> Observed:
    return Observed(body, {j["metadata"]["name"]: j for j in jobs}, pod, frozenset(), **read)


def actions(decision: Decision) -> list[str]:
    """The decision as the reconciler's actions, in the order apply takes them."""
    listed = [f"delete Job {name}" for name in decision.delete_jobs]
    if decision.create_job is not None:
        listed.append(f"create Job {decision.create_job['metadata']['name']}")
    if decision.registry:
        listed.append(f"registry {decision.registry}")
    compiled = next((c for c in decision.status.get("conditions", []) if c["type"] == "Compiled"), {})
    listed.append(f"status {decision.status.get('phase')} {compiled.get('reason')}")
    return listed


@pytest.fixture
def hit(tmp_path) -> Published:
    manifest = make_engine(tmp_path).manifest
    return Published(manifest, manifest.digest(), f"file:///registry/engines/{manifest.digest()}")


def test_a_new_compile_job_with_a_registry_miss_creates_its_job():
    body = compile_job()
    decision = decide(observed(body, looked_up=True), SETTINGS, NOW)
    assert actions(decision) == [f"create Job {job_name(body)}", "registry answered", "status Pending Pending"]
    assert decision.create_job["kind"] == "Job" and decision.status["jobName"] == job_name(body)


def test_a_registry_hit_succeeds_without_a_job(hit):
    decision = decide(observed(compile_job(), looked_up=True, cache_hit=hit), SETTINGS, NOW)
    assert actions(decision) == ["registry answered", "status Succeeded CacheHit"]


def compiled_in(hit: Published, namespace: str | None) -> Published:
    """The hit as a real compile of `namespace` published it (None: a manifest older than the field)."""
    return Published(
        hit.manifest.model_copy(update={"origin": "compiled", "namespace": namespace}), hit.digest, hit.uri
    )


def test_an_engine_this_namespace_compiled_is_reused_without_a_job(hit):
    decision = decide(observed(compile_job(), looked_up=True, cache_hit=compiled_in(hit, "ns")), SETTINGS, NOW)
    assert actions(decision) == ["registry answered", "status Succeeded CacheHit"]


@pytest.mark.parametrize("publisher", ["team-b", None], ids=["another namespace", "not recorded"])
def test_another_namespaces_engine_waits_for_this_namespaces_compile_pod_to_fetch_the_source(hit, publisher):
    """The pod fetches spec.source.uri with this namespace's credentials, checks the digest, then finds the
    engine in the registry and reports it (tensorkiln_compiler.pipeline.run): access proven, nothing compiled."""
    body = compile_job()
    decision = decide(observed(body, looked_up=True, cache_hit=compiled_in(hit, publisher)), SETTINGS, NOW)
    assert actions(decision) == [f"create Job {job_name(body)}", "registry answered", "status Pending Pending"]


def test_engines_shared_cluster_wide_are_reused_from_any_namespace(hit):
    shared = Settings(registry_uri="file:///registry", share_engines=True)
    decision = decide(observed(compile_job(), looked_up=True, cache_hit=compiled_in(hit, "team-b")), shared, NOW)
    assert actions(decision) == ["registry answered", "status Succeeded CacheHit"]


def test_an_unreachable_registry_creates_nothing_and_counts_a_failure():
    failed = RegistryUnavailable("the registry root is missing")
    decision = decide(observed(compile_job(), registry_error=failed, if_registry_fails=(2, 10.0)), SETTINGS, NOW)
    assert actions(decision) == ["registry failed", "status Pending RegistryUnavailable"]
    message = next(c["message"] for c in decision.status["conditions"] if c["type"] == "Compiled")
    assert "attempt 2 failed, next in 10 s" in message


def test_while_the_registry_backoff_holds_nothing_is_asked_or_written():
    body = compile_job({"phase": "Pending", "observedGeneration": 1, "conditions": []})
    decision = decide(observed(body, registry_waits=True), SETTINGS, NOW)
    assert actions(decision) == ["status Pending None"] and decision.status == body["status"]


def test_a_finished_compile_whose_job_was_cleaned_up_stands():
    body = compile_job({"phase": "Succeeded", "observedGeneration": 1, "conditions": []})
    assert actions(decide(observed(body), SETTINGS, NOW)) == ["status Succeeded None"]


def test_a_changed_spec_deletes_the_superseded_job_and_creates_the_new_one():
    old = compile_job({"phase": "Running", "observedGeneration": 1, "conditions": []})
    new = compile_job(old["status"], generation=2)
    new["spec"]["optionsHash"] = "fedcba9876543210"
    decision = decide(observed(new, [job(old)], looked_up=True), SETTINGS, NOW)
    assert actions(decision) == [
        f"delete Job {job_name(old)}", f"create Job {job_name(new)}", "registry answered", "status Pending Pending",
    ]  # fmt: skip


def test_a_spec_the_review_refuses_creates_no_job():
    body = compile_job()
    body["spec"]["source"]["uri"] = "file:///etc/passwd"  # outside the allowed model file roots
    assert actions(decide(observed(body, looked_up=True), SETTINGS, NOW)) == [
        "registry answered", "status Failed FileURINotAllowed",
    ]  # fmt: skip


def test_a_job_lost_with_its_node_is_retried_in_a_job_of_a_new_name():
    body = compile_job({"phase": "Running", "observedGeneration": 1, "conditions": []})
    lost = job(body, ("Failed", "BackoffLimitExceeded"))
    decision = decide(observed(body, [lost]), SETTINGS, NOW)
    retried = decision.create_job["metadata"]["name"]
    assert retried != job_name(body)
    assert actions(decision) == [
        f"delete Job {job_name(body)}", f"create Job {retried}", "registry answered", "status Pending RetryingAfterClusterFault",
    ]  # fmt: skip
    assert decision.status["clusterRetries"] == 1 and decision.status["jobName"] == retried
    assert "node was lost" in decision.retry_after


def test_no_retry_once_the_budget_is_spent():
    body = compile_job({"phase": "Running", "observedGeneration": 1, "clusterRetries": CLUSTER_RETRY_BUDGET})
    decision = decide(observed(body, [job(body, ("Failed", "BackoffLimitExceeded"))]), SETTINGS, NOW)
    assert actions(decision) == ["registry answered", "status Failed BackoffLimitExceeded"]


def test_the_models_own_failure_is_final():
    body = compile_job({"phase": "Running", "observedGeneration": 1, "conditions": []})
    report = '{"error": {"reason": "AccuracyGateFailed", "message": "cosine 0.91 < 0.99"}}'
    pod = {
        "metadata": {"name": "p"},
        "spec": {"nodeName": "local-0"},
        "status": {
            "containerStatuses": [{"name": "compiler", "state": {"terminated": {"exitCode": 1, "message": report}}}]
        },
    }
    decision = decide(observed(body, [job(body, ("Failed", "BackoffLimitExceeded"))], pod), SETTINGS, NOW)
    assert actions(decision) == ["registry answered", "status Failed AccuracyGateFailed"]
