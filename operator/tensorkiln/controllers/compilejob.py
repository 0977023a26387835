"""CompileJob reconciler: a registry hit, or one batch/v1 Job per (CompileJob, options), mirrored back.

observe (the cache's Jobs and pods, the registry: reads only) -> decide (pure: the Jobs to delete and
create, the status) -> apply (the writes, the registry backoff's bookkeeping) -> commit (the status)."""

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from kubernetes import client
from tensorkiln_api.registry import EngineNotFound, Registry, RegistryError, RegistryUnavailable

from tensorkiln.builders import naming
from tensorkiln.builders.compilejob import cache_key
from tensorkiln.builders.job import build_job, job_name
from tensorkiln.builders.labels import RECOMPILE
from tensorkiln.cluster.state import ClusterState
from tensorkiln.controllers import recompiles
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
RECOMPILE_SLOTS = recompiles.RecompileSlots()  # the operator's, across its reconcile workers
QUEUED = "RecompileQueued"


def recompile_queued(compile_job: dict, in_flight: int, limit: int, now: datetime) -> dict:
    """A served target's compile waiting for a slot: Pending, the engine it replaces serving meanwhile."""
    generation = compile_job["metadata"].get("generation", 1)
    message = (
        f"{in_flight} recompiles of served models run, at most {limit} at once (maxConcurrentRecompiles): this one "
        "waits, and the engine it replaces keeps serving"
    )
    old = compile_job.get("status", {})
    return {
        "observedGeneration": generation,
        "phase": "Pending",
        "conditions": merge_conditions(
            old.get("conditions"), [condition("Compiled", None, QUEUED, message)], generation, now
        ),  # fmt: skip
    }


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


@dataclass(frozen=True)
class Observed:
    """What one CompileJob's reconcile read: its Jobs, the newest pod of the Job it wants, the registry."""

    compile_job: dict
    jobs: Mapping[str, dict]  # its Jobs, by name
    pod: dict | None  # the newest pod of the Job it wants
    simulated_nodes: frozenset[str]
    registry_waits: bool = False  # an unreachable registry's backoff holds it off: nothing was asked
    looked_up: bool = False  # the registry was asked for the engine (no Job yet, and a known key)
    cache_hit: Published | None = None
    published: Published | None = None  # the engine its compile pod reported, read back
    registry_error: RegistryUnavailable | None = None
    if_registry_fails: tuple[int, float] = (1, 0.0)  # (failures, next try in s) were this a failure
    served: bool = False  # its target's Deployment exists: a compile now is a recompile (controllers.recompiles)
    recompiles_running: frozenset[tuple[str, str]] = frozenset()  # read only when `served` and no Job yet


@dataclass(frozen=True)
class Decision:
    """What to write: superseded Jobs to delete, a Job to create, the status to commit, and whether
    the registry answered (resets its backoff) or failed (counts one more failure)."""

    status: dict
    delete_jobs: tuple[str, ...] = ()
    create_job: dict | None = None  # created once: a Job's pod template is immutable, so never re-applied
    registry: str | None = None  # "answered", "failed" or None (not asked)
    retry_after: str | None = None  # the cluster's fault the new Job is a retry after
    recompile: bool = False  # create_job recompiles a served target: it needs one of the bounded slots


def observe(
    state: ClusterState, compile_job: dict, registry: Registry, settings: Settings, backoff: Backoff
) -> Observed:
    """Reads only: the cache's Jobs and pods, then the registry unless its backoff holds the CompileJob off."""
    meta = compile_job["metadata"]
    namespace, wanted = meta["namespace"], job_name(compile_job)
    jobs = {j["metadata"]["name"]: j for j in state.jobs(namespace, meta["name"])}
    found = Observed(
        compile_job, jobs, state.newest_pod(namespace, wanted), frozenset(state.simulated_nodes()),
        registry_waits=backoff.wait_left(_backoff_key(compile_job), time.monotonic()) > 0,
        if_registry_fails=backoff.if_failing(_backoff_key(compile_job)),
    )  # fmt: skip
    if found.registry_waits or (wanted not in jobs and _settled(compile_job)):
        return found
    if wanted not in jobs:
        spec = compile_job["spec"]
        target = naming.target_name(spec["modelName"], spec["hardware"]["className"])
        if state.get("apps/v1", "Deployment", namespace, target) is not None:
            found = replace(found, served=True, recompiles_running=recompiles.running(state.cache.all("Job")))
    try:
        key = cache_key(compile_job, settings) if wanted not in jobs else None
        if key is not None:
            hit = registry.lookup(key)
            found = replace(found, looked_up=True)
            if hit is not None:
                found = replace(found, cache_hit=Published(hit.manifest, hit.digest, registry.engine_uri(hit.digest)))
        return replace(found, published=_published(registry, reported_engine(found.pod)))
    except RegistryUnavailable as error:
        return replace(found, registry_error=error)


def _published(registry: Registry, engine: dict | None) -> Published | None:
    if engine is None:
        return None
    try:
        manifest = registry.manifest(engine["digest"])
    except EngineNotFound:
        return None
    return Published(manifest, engine["digest"], engine.get("uri") or registry.engine_uri(engine["digest"]))


def _settled(compile_job: dict) -> bool:
    status = compile_job.get("status", {})
    return (
        status.get("observedGeneration") == compile_job["metadata"].get("generation")
        and status.get("phase") in TERMINAL
    )


def _backoff_key(compile_job: dict) -> str:
    meta = compile_job["metadata"]
    return meta.get("uid") or f"{meta['namespace']}/{meta['name']}"


def reusable(published: Published, namespace: str, share_engines: bool) -> bool:
    """Whether a cached engine serves this namespace's CompileJob without a compile pod (pure). One that
    another namespace's compile published (or an older one that does not say) waits for this namespace's
    compile pod to fetch the source with its own credentials and check the digest: it then finds the
    engine and reports it, compiling nothing. Placeholders (a simulation, a test seed) hold no one's model."""
    manifest = published.manifest
    return share_engines or manifest.namespace == namespace or manifest.origin != "compiled"


def decide(observed: Observed, settings: Settings, now: datetime) -> Decision:
    """Pure: from what was observed, the Jobs to delete and create and the status to commit."""
    compile_job = observed.compile_job
    old_status, wanted = compile_job.get("status", {}), job_name(compile_job)
    superseded = tuple(sorted(observed.jobs.keys() - {wanted}))  # built for options it no longer has
    job = observed.jobs.get(wanted)
    if observed.registry_waits or (job is None and _settled(compile_job)):
        # A cache hit, or a finished Job cleaned up since: the result stands. Or the registry is not asked yet.
        return Decision(cleared(old_status, RECONCILED), superseded)
    if observed.registry_error is not None:
        failures, delay = observed.if_registry_fails
        status = _registry_unavailable(compile_job, observed.registry_error, failures, delay)
        return Decision(status, superseded, registry="failed")
    if job is None:
        hit = observed.cache_hit
        if hit is not None and reusable(hit, compile_job["metadata"]["namespace"], settings.share_engines):
            return Decision(cache_hit_status(compile_job, hit, now), superseded, registry="answered")
        refused = refused_compile_job_status(compile_job, settings.model_file_roots, now)
        if refused is not None:
            return Decision(refused, superseded, registry="answered")
        job = _job(compile_job, settings, recompile=observed.served)
        return Decision(_mirrored(observed, job, now), superseded, job, "answered", recompile=observed.served)
    status = _mirrored(observed, job, now)
    fault = cluster_fault(compile_job, job, observed.pod, observed.published) if status["phase"] == "Failed" else None
    if fault and status.get("clusterRetries", 0) < CLUSTER_RETRY_BUDGET:
        # Not the model's fault: compile again, in a Job of a new name (it holds the retry count).
        generation = compile_job["metadata"].get("generation", 1)
        retried = {**compile_job, "status": retrying_status(status, fault, generation, now)}
        retry_job = _job(retried, settings)
        status = {**retried["status"], "jobName": retry_job["metadata"]["name"]}
        return Decision(status, (*superseded, wanted), retry_job, "answered", retry_after=fault)
    return Decision(status, superseded, registry="answered")


def _job(compile_job: dict, settings: Settings, recompile: bool = False) -> dict:
    job = build_job(
        compile_job,
        settings.registry_secret,
        push_secret=settings.registry_push_secret,
        oci_insecure=settings.oci_insecure,
        image_pull_secrets=settings.image_pull_secrets,
        work_size_limit=settings.compile_work_size_limit,
        tmp_size_limit=settings.compile_tmp_size_limit,
    )
    if recompile:  # counted by controllers.recompiles
        job["metadata"]["labels"] = {**job["metadata"]["labels"], RECOMPILE: "true"}
    return job


def _mirrored(observed: Observed, job: dict, now: datetime) -> dict:
    """The status mirroring `job` (the one it wants: existing, or about to be created) and its pod."""
    nodes = set(observed.simulated_nodes)
    return compile_job_status(observed.compile_job, job, observed.pod, nodes, now, observed.published)


def reconcile(
    state: ClusterState,
    compile_job: dict,
    registry: Registry,
    settings: Settings,
    backoff: Backoff = REGISTRY_BACKOFF,
) -> tuple[dict, dict]:
    """Converge one CompileJob: observe, decide, apply, commit; returns (old status, new status) for the
    caller's Events."""
    observed = observe(state, compile_job, registry, settings, backoff)
    decision = decide(observed, settings, datetime.now(UTC))
    status = apply(state, observed, decision, backoff, settings.max_concurrent_recompiles)
    return commit(state, compile_job, status)


def apply(
    state: ClusterState, observed: Observed, decision: Decision, backoff: Backoff, max_recompiles: int = 0
) -> dict:
    """The writes; returns the status to commit: the decision's, JobRefused when the API server
    refuses the Job as invalid, or RecompileQueued when a recompile finds no free slot."""
    compile_job = observed.compile_job
    namespace = compile_job["metadata"]["namespace"]
    key = _backoff_key(compile_job)
    if decision.registry == "failed":
        own_metrics.record_registry_error()
        failures, delay = backoff.failed(key, time.monotonic())
        log.warning("registry unavailable (attempt %d, next in %.0f s): %s", failures, delay, observed.registry_error)
    elif decision.registry == "answered":
        backoff.succeeded(key)
    if observed.looked_up:
        own_metrics.record_registry_lookup(True, observed.cache_hit)
    for name in decision.delete_jobs:
        state.delete_job(namespace, name)
        log.info("deleted Job %s/%s: superseded or retried", namespace, name)
    if decision.create_job is None:
        return decision.status
    if decision.recompile:
        meta = compile_job["metadata"]
        free, in_flight = RECOMPILE_SLOTS.take(
            (meta["namespace"], meta["name"]), observed.recompiles_running, max_recompiles, time.monotonic()
        )
        if not free:
            return recompile_queued(compile_job, in_flight, max_recompiles, datetime.now(UTC))
    if decision.retry_after:
        log.warning("compile Job %s/%s failed for the cluster's fault: %s", namespace, job_name(compile_job),
                    decision.retry_after)  # fmt: skip
    try:
        created = state.apply(decision.create_job)
    except client.ApiException as error:
        if error.status not in (400, 422):
            raise
        return _job_refused(compile_job, error)
    log.info("created Job %s/%s", namespace, created["metadata"]["name"])
    return decision.status


def commit(state: ClusterState, compile_job: dict, status: dict) -> tuple[dict, dict]:
    """Write the status (with its GitOps conditions) unless unchanged; (old status, new status)."""
    old_status = compile_job.get("status", {})
    generation = compile_job["metadata"].get("generation", 1)
    status = gitops.with_compile_job_conditions(status, old_status.get("conditions"), generation, datetime.now(UTC))
    if status != old_status:
        state.apply_status(compile_job, status)
    return old_status, status
