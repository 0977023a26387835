"""CompileJob reconciler: a registry hit, or one batch/v1 Job per (CompileJob, options), mirrored back."""

import json
import logging
import time
from datetime import UTC, datetime

from kubernetes import client
from tensorkiln_api.registry import EngineNotFound, Registry, RegistryError, RegistryUnavailable

from tensorkiln.builders.compilejob import cache_key
from tensorkiln.builders.job import build_job, job_name
from tensorkiln.cluster.state import ClusterState
from tensorkiln.controllers.backoff import Backoff
from tensorkiln.controllers.failures import cleared
from tensorkiln.observability import metrics as own_metrics
from tensorkiln.review.checks import refused_compile_job_status
from tensorkiln.settings import Settings
from tensorkiln.status import gitops
from tensorkiln.status.compilejob import (
    CLUSTER_RETRY_BUDGET,
    Published,
    cache_hit_status,
    cluster_fault,
    compile_job_status,
    reported_engine,
    retrying_status,
)
from tensorkiln.status.conditions import condition, merge_conditions

log = logging.getLogger(__name__)

TERMINAL = ("Succeeded", "Failed")
RECONCILED = "Reconciled"  # set only while reconciling the CompileJob fails (handlers._guarded)


# How long a CompileJob waits before asking an unreachable registry again.
REGISTRY_BACKOFF = Backoff(first=5.0, cap=80.0)


def _published(registry: Registry, engine: dict | None) -> Published | None:
    if engine is None:
        return None
    try:
        manifest = registry.manifest(engine["digest"])
    except EngineNotFound:
        return None
    return Published(manifest, engine["digest"], engine.get("uri") or registry.engine_uri(engine["digest"]))


def _registry_unavailable(compile_job: dict, error: RegistryError, failures: int, delay: float) -> dict:
    generation = compile_job["metadata"].get("generation", 1)
    now = datetime.now(UTC)
    message = f"engine registry: {error}; attempt {failures} failed, next in {delay:.0f} s"
    desired = [condition("Compiled", None, "RegistryUnavailable", message)]
    old = compile_job.get("status", {})
    return {
        **old,
        "observedGeneration": generation,
        "phase": old.get("phase", "Pending"),
        "conditions": merge_conditions(old.get("conditions"), desired, generation, now),
    }


def _job_refused(compile_job: dict, error: client.ApiException) -> dict:
    """The API server refuses the compile Job the spec implies (e.g. a toleration key that is no
    qualified name): Failed until the spec changes, as no retry can help."""
    generation = compile_job["metadata"].get("generation", 1)
    try:
        message = json.loads(error.body).get("message") or error.reason
    except (TypeError, ValueError, AttributeError):
        message = error.reason
    message = f"the API server refuses the compile Job: {message}"[:4096]
    old = compile_job.get("status", {})
    return {
        "observedGeneration": generation,
        "phase": "Failed",
        "reason": "JobRefused",
        "message": message,
        "conditions": merge_conditions(
            old.get("conditions"), [condition("Compiled", False, "JobRefused", message)], generation, datetime.now(UTC)
        ),
    }


def reconcile(
    state: ClusterState,
    compile_job: dict,
    registry: Registry,
    settings: Settings,
    backoff: Backoff = REGISTRY_BACKOFF,
) -> tuple[dict, dict]:
    """Converge one CompileJob; returns (old status, new status) for the caller's Events."""
    meta = compile_job["metadata"]
    namespace = meta["namespace"]
    wanted = job_name(compile_job)
    old_status = compile_job.get("status", {})
    jobs = {j["metadata"]["name"]: j for j in state.jobs(namespace, meta["name"])}

    for name in jobs.keys() - {wanted}:
        # Built for options the CompileJob no longer has.
        state.delete_job(namespace, name)
        log.info("deleted superseded Job %s/%s", namespace, name)

    job = jobs.get(wanted)
    settled = old_status.get("observedGeneration") == meta.get("generation") and old_status.get("phase") in TERMINAL
    if job is None and settled:  # a cache hit, or a finished Job cleaned up since: the result stands
        return _write(state, compile_job, old_status, cleared(old_status, RECONCILED))
    backoff_key = meta.get("uid") or f"{namespace}/{meta['name']}"
    if backoff.wait_left(backoff_key, time.monotonic()) > 0:  # the registry was unreachable: not asked yet
        return _write(state, compile_job, old_status, cleared(old_status, RECONCILED))

    try:
        if job is None:
            key = cache_key(compile_job, settings)
            hit = registry.lookup(key) if key else None
            own_metrics.record_registry_lookup(key, hit)
            if hit is not None:
                status = cache_hit_status(
                    compile_job, Published(hit.manifest, hit.digest, registry.engine_uri(hit.digest)), datetime.now(UTC)
                )
                return _write(state, compile_job, old_status, status)
            refused = refused_compile_job_status(compile_job, settings.model_file_roots, datetime.now(UTC))
            if refused is not None:
                return _write(state, compile_job, old_status, refused)
            job, refused = _create_job(state, compile_job, settings.registry_secret)
            if refused is not None:
                return _write(state, compile_job, old_status, refused)
        pod = state.newest_pod(namespace, wanted)
        published = _published(registry, reported_engine(pod))
    except RegistryUnavailable as error:
        failures, delay = backoff.failed(backoff_key, time.monotonic())
        log.warning("registry unavailable (attempt %d, next in %.0f s): %s", failures, delay, error)
        return _write(state, compile_job, old_status, _registry_unavailable(compile_job, error, failures, delay))
    backoff.succeeded(backoff_key)

    now = datetime.now(UTC)
    status = compile_job_status(compile_job, job, pod, state.simulated_nodes(), now, published)
    fault = cluster_fault(compile_job, job, pod, published) if status["phase"] == "Failed" else None
    if fault and status.get("clusterRetries", 0) < CLUSTER_RETRY_BUDGET:
        # Not the model's fault: compile again, in a Job of a new name (it holds the retry count).
        log.warning("compile Job %s/%s failed for the cluster's fault: %s", namespace, wanted, fault)
        retried = {**compile_job, "status": retrying_status(status, fault, meta.get("generation", 1), now)}
        state.delete_job(namespace, wanted)
        job, refused = _create_job(state, retried, settings.registry_secret)
        status = refused or {**retried["status"], "jobName": job["metadata"]["name"]}
    return _write(state, compile_job, old_status, status)


def _create_job(state: ClusterState, compile_job: dict, registry_secret: str | None) -> tuple[dict, dict | None]:
    """Create the CompileJob's Job, once: a Job's pod template is immutable, so it is never re-applied.
    (the Job, None), or ({}, the JobRefused status) when the API server refuses the Job as invalid."""
    try:
        job = state.apply(build_job(compile_job, registry_secret))
    except client.ApiException as error:
        if error.status not in (400, 422):
            raise
        return {}, _job_refused(compile_job, error)
    log.info("created Job %s/%s", compile_job["metadata"]["namespace"], job["metadata"]["name"])
    return job, None


def _write(state: ClusterState, compile_job: dict, old_status: dict, status: dict) -> tuple[dict, dict]:
    generation = compile_job["metadata"].get("generation", 1)
    status = gitops.with_compile_job_conditions(status, old_status.get("conditions"), generation, datetime.now(UTC))
    if status != old_status:
        state.apply_status(compile_job, status)
    return old_status, status
