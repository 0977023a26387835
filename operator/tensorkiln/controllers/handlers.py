"""kopf handler registrations: each handler reads the event and queues the object it concerns.

Reconciliation is level-based and goes through one work queue (controllers.workqueue): a few
worker threads, one reconcile at a time per object, a failing object retried after its backoff,
an SLO model again on the scaler's period. create/update/resume handlers queue the object itself;
event handlers on Jobs, pods, CompileJobs and Deployments queue the object that owns them; and
one operator-wide resync loop queues every object, so that a missed event, a restart or a new
node pool converges. Reconciles and the resync read from the watch cache (controllers.cache),
so in steady state they make no GET or LIST. (kopf's per-object timers would put a finalizer on
every object, which would block deletion whenever the operator is down; the resync loop needs none.)
"""

import asyncio
import functools
import logging
import threading
import time
from datetime import UTC, datetime

import kopf
import urllib3
from kubernetes import client
from kubernetes.dynamic.exceptions import ForbiddenError, NotFoundError

from tensorkiln import apierrors, kube, peering
from tensorkiln.api import API_VERSION, GROUP, VERSION
from tensorkiln.builders.labels import COMPILE_JOB, MODEL
from tensorkiln.controllers import cache, compilejob, events, failures, inferencemodel, workqueue
from tensorkiln.controllers.scaler import Scaler
from tensorkiln.controllers.state import ClusterState
from tensorkiln.observability import logs
from tensorkiln.observability import metrics as own_metrics
from tensorkiln.registry import Registry, RegistryError, open_registry
from tensorkiln.scaling import metrics
from tensorkiln.settings import Settings

SETTINGS = Settings.from_env()
_state: ClusterState | None = None
_registry: Registry | None = None
_scaler: Scaler | None = None
_last_resync: float | None = None  # time.monotonic() when the resync loop last finished a pass

IM = (GROUP, VERSION, "inferencemodels")
CJ = (GROUP, VERSION, "compilejobs")
# Empty: all namespaces. Set by the runner before the operator starts.
WATCHED_NAMESPACES: list[str] = []
log = logging.getLogger(__name__)
CACHE = cache.WatchCache()
cache.register(CACHE)


def state() -> ClusterState:
    global _state
    if _state is None:
        _state = ClusterState(kube.api_client(), CACHE)
    return _state


def registry() -> Registry:
    global _registry
    if _registry is None:
        opened = open_registry(SETTINGS.registry_uri)
        opened.prepare()  # from now on a registry that is gone is unavailable, not empty
        _registry = opened
    return _registry


def scaler() -> Scaler:
    global _scaler
    if _scaler is None:
        prometheus = metrics.connect(SETTINGS.prometheus_url) if SETTINGS.prometheus_url else None
        _scaler = Scaler(prometheus, period=SETTINGS.slo_period_seconds)
    return _scaler


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_) -> None:
    # Our own annotation prefix from day one: renaming it later would orphan progress records.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="tensorkiln.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="tensorkiln.dev", key="last-handled-configuration"
    )
    settings.persistence.finalizer = "tensorkiln.dev/finalizer"
    # Bounded watches: a silently dead connection is replaced within minutes.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    # Events are posted deliberately (controllers.events), not from every log line.
    settings.posting.level = logging.WARNING
    settings.execution.max_workers = 8


@kopf.on.startup()
def open_engine_registry(**_) -> None:
    """Open (and prepare) the registry now: one that goes away later is unavailable, not empty."""
    try:
        registry()
    except RegistryError as error:  # a bad URI: every reconcile that needs the registry will say so
        log.error("engine registry %s: %s", SETTINGS.registry_uri, error)


@kopf.on.startup()
def serve_metrics(memo: kopf.Memo, **_) -> None:
    if not SETTINGS.metrics_port:
        return
    try:
        memo["metrics_server"] = own_metrics.serve(SETTINGS.metrics_port, SETTINGS.listen_address)
    except OSError as error:  # fail the start: a retry would not free the port
        where = f"{SETTINGS.listen_address}:{SETTINGS.metrics_port}"
        raise kopf.PermanentError(f"cannot serve metrics on {where}: {error}") from error


@kopf.on.cleanup()
def stop_metrics(memo: kopf.Memo, **_) -> None:
    if memo.get("metrics_server"):
        memo["metrics_server"].shutdown()


@kopf.on.startup()
async def start_resync(memo: kopf.Memo, **_) -> None:
    memo["resync"] = asyncio.create_task(_resync_forever())


@kopf.on.cleanup()
async def stop_resync(memo: kopf.Memo, **_) -> None:
    memo["resync"].cancel()


@kopf.on.probe(id="resync")
def resync_probe(memo: kopf.Memo, **_) -> dict:
    """In /healthz: fails (HTTP 500) once the resync loop has died, as nothing would converge then."""
    task = memo.get("resync")
    if task is None or task.done():
        raise kopf.PermanentError("the resync loop is not running")
    return {"lastPassSecondsAgo": None if _last_resync is None else round(time.monotonic() - _last_resync, 1)}


async def _resync_forever() -> None:
    global _last_resync
    while True:
        await asyncio.sleep(SETTINGS.resync_seconds)
        try:
            # A peer first: it pauses kopf too, whose first listing then waits for it to leave.
            if await asyncio.to_thread(_paused):
                continue
            if not CACHE.filled:
                continue  # kopf's first listing is under way; its resume handlers queue every object
            await asyncio.to_thread(resync_all)
        except Exception:  # whatever went wrong, the loop must outlive it: nothing converges without it
            log.exception("resync pass failed; retrying at the next pass")
            continue
        _last_resync = time.monotonic()


_paused_by: list[str] = []


def _paused() -> bool:
    """Whether a peer operator acts now (kopf has paused our handlers too): skip this pass.
    Unknown (the API server unreachable) counts as paused: acting twice is the worse mistake."""
    global _paused_by
    if not peering.joined():
        return False
    try:
        peers = peering.paused_by(state().custom, WATCHED_NAMESPACES)
    except (client.ApiException, urllib3.exceptions.HTTPError, OSError) as error:
        log.warning("resync: cannot read the peering object, skipping this pass: %s", error)
        return True
    if peers != _paused_by:
        if peers:
            log.info("resync paused in favour of %s", ", ".join(peers))
        else:
            log.info("resync resumed: no peer acts")
        _paused_by = peers
    return bool(peers)


def _list(plural: str) -> list[dict]:
    kind = {"inferencemodels": "InferenceModel", "compilejobs": "CompileJob"}[plural]
    if CACHE.serves(kind):
        return CACHE.all(kind)
    custom = state().custom  # before kopf's first listing
    if not WATCHED_NAMESPACES:
        return custom.list_cluster_custom_object(GROUP, VERSION, plural)["items"]
    return [
        o
        for ns in WATCHED_NAMESPACES
        for o in custom.list_namespaced_custom_object(GROUP, VERSION, ns, plural)["items"]
    ]


def resync_all() -> None:
    """Queue every InferenceModel and CompileJob: the queue runs each, one failing object never
    stops the others, and one already queued is not queued twice."""
    for plural in ("inferencemodels", "compilejobs"):
        try:
            objects = _list(plural)
        except client.ApiException as error:
            log.warning("resync: cannot list %s: %s", plural, error.reason)
            continue
        except (urllib3.exceptions.HTTPError, OSError) as error:  # the API server unreachable (restarting)
            log.warning("resync: cannot list %s: %s", plural, error)
            continue
        if plural == "inferencemodels":
            own_metrics.retain_models((o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects)
            key, running = QUEUE.longest_running()
            if running > STUCK_SECONDS:
                log.warning("the reconcile of %s %s/%s has run for %.0f s", *key, running)
        for obj in objects:
            if not obj["metadata"].get("deletionTimestamp"):
                enqueue(obj)


def _plain(body) -> dict:
    """kopf's Body is a read-only mapping over the raw object; the reconcilers take dicts."""
    return dict(body)


# Every reconcile goes through this queue (controllers.workqueue): one at a time per object, at
# most `reconcile_workers` at once, retried after its backoff, SLO models again on their period.
QUEUE = workqueue.WorkQueue()
own_metrics.WORKQUEUE_DEPTH.set_function(lambda: len(QUEUE))
own_metrics.WORKQUEUE_LONGEST_RUNNING.set_function(lambda: QUEUE.longest_running()[1])
STUCK_SECONDS = 120  # a reconcile running longer is reported at every resync pass
_forced: set[tuple[str, str, str]] = set()  # spec changed since queued: try despite a backoff
_forced_guard = threading.Lock()


def _from_kopf(body, forced: bool = False) -> None:
    """What every resource handler does: kopf runs none before every index holds its first
    listing, so from the first one on the cache serves (and no reconcile reads the API)."""
    CACHE.mark_filled()
    enqueue(body, forced)


def enqueue(body, forced: bool = False, after: float = 0.0) -> None:
    meta = body["metadata"]
    item = (body["kind"], meta["namespace"], meta["name"])
    if forced:
        with _forced_guard:
            _forced.add(item)
    QUEUE.add(item, after)


def _process(item: tuple[str, str, str]) -> None:
    """One queued object, as the cache has it now (gone or being deleted: nothing to do)."""
    kind, namespace, name = item
    with _forced_guard:
        forced = item in _forced
        _forced.discard(item)
    if _paused_by:
        return  # a peer acts; the resync queues everything again once it leaves
    body = state().get(API_VERSION, kind, namespace, name)
    if body is None or body["metadata"].get("deletionTimestamp"):
        return
    reconcile = _inference_model if kind == "InferenceModel" else _compile_job
    retry_in = reconcile(body, forced)
    if retry_in is not None:
        QUEUE.add(item, retry_in)
    elif kind == "InferenceModel" and _scaled_by_operator(body):
        QUEUE.add(item, SETTINGS.slo_period_seconds)  # the scaler's own schedule


def _scaled_by_operator(model: dict) -> bool:
    slo = model.get("spec", {}).get("slo")
    return slo is not None and slo.get("mode", "Operator") == "Operator"


@kopf.on.startup()
def start_workers(memo: kopf.Memo, **_) -> None:
    memo["workers"] = QUEUE.run_workers(SETTINGS.reconcile_workers, _process)


@kopf.on.cleanup()
def stop_workers(**_) -> None:
    QUEUE.shutdown()


def _observed(kind: str):
    """Every reconcile of `kind`, whichever path calls it: counted and timed, its logs about the object."""

    def decorate(reconcile_one):
        @functools.wraps(reconcile_one)
        def run(body) -> None:
            with logs.about(body), own_metrics.reconciling(kind):
                reconcile_one(body)

        return run

    return decorate


FAILURES = failures.FailureTracker()


def _guarded(body, forced: bool, reconcile_one, condition_type: str) -> float | None:
    """Reconcile one object; a failure goes to its status (controllers.failures), never up.
    Returns the seconds until it should be tried again (its backoff), None when it succeeded.
    Within its backoff it is not tried, unless `forced` (its spec changed)."""
    obj = _plain(body)
    key = f"{obj['kind']} {obj['metadata']['namespace']}/{obj['metadata']['name']}"
    wait = FAILURES.wait_left(key, time.monotonic())
    if not forced and wait > 0:
        return wait
    try:
        reconcile_one(obj)
    except Exception as error:
        if _gone(error):
            with logs.about(obj):
                log.info("reconcile of %s skipped: %s", key, error.summary())
            return None
        return _reconcile_failed(obj, key, error, condition_type)
    FAILURES.succeeded(key)
    return None


def _gone(error: Exception) -> bool:
    """Deleted since read, or its namespace is terminating: nothing left to converge or report."""
    if isinstance(error, NotFoundError):
        return True
    return isinstance(error, ForbiddenError) and "because it is being terminated" in str(error.body)


def _reconcile_failed(obj: dict, key: str, error: Exception, condition_type: str) -> float:
    recorded = FAILURES.failed(key, error, time.monotonic())
    message = apierrors.describe(error)
    line = "reconcile of %s failed (attempt %d; next try in %.0f s): %s"
    with logs.about(obj):
        if recorded.traceback:  # the first failure of its kind in this process
            log.error(line, key, recorded.attempts, recorded.retry_in, message, exc_info=error)
        else:
            log.warning(line, key, recorded.attempts, recorded.retry_in, message)
        try:
            status = failures.failed_status(obj, condition_type, message, datetime.now(UTC))
            if status != obj.get("status"):
                state().apply_status(obj, status)
            if recorded.new_message:
                events.post(state().core, obj, "Warning", failures.REASON, message)
        except Exception as unreported:  # e.g. its namespace is terminating: the log line is all there is
            log.warning("status of %s not written: %s", key, apierrors.describe(unreported))
    return recorded.retry_in


def _inference_model(body, forced: bool = False) -> float | None:
    return _guarded(body, forced, _reconcile_inference_model, "Ready")


@_observed("InferenceModel")
def _reconcile_inference_model(model: dict) -> None:
    new = inferencemodel.reconcile(state(), model, SETTINGS, registry(), scaler())
    own_metrics.record_targets(model, new)


@kopf.on.resume(*IM)
@kopf.on.create(*IM)
@kopf.on.update(*IM, field="spec")
def inference_model_changed(body, **_) -> None:
    _from_kopf(body, forced=True)


def _compile_job(body, forced: bool = False) -> float | None:
    # A CompileJob has no Ready; its `Reconciled` condition appears only while reconciling it fails.
    return _guarded(body, forced, _reconcile_compile_job, compilejob.RECONCILED)


@_observed("CompileJob")
def _reconcile_compile_job(body: dict) -> None:
    old, new = compilejob.reconcile(state(), body, registry(), SETTINGS)
    own_metrics.record_compile_transition(body, old, new)
    if old.get("phase") != new.get("phase"):
        failed = new.get("phase") == "Failed"
        message = new.get("message") or next(
            (c["message"] for c in new.get("conditions", []) if c["type"] == "Compiled"), ""
        )
        events.post(state().core, dict(body), "Warning" if failed else "Normal", f"Compile{new['phase']}", message)


@kopf.on.resume(*CJ)
@kopf.on.create(*CJ)
@kopf.on.update(*CJ, field="spec")
def compile_job_changed(body, **_) -> None:
    _from_kopf(body, forced=True)


@kopf.on.event("batch", "v1", "jobs", labels={COMPILE_JOB: kopf.PRESENT})
@kopf.on.event("", "v1", "pods", labels={COMPILE_JOB: kopf.PRESENT})
def compile_workload_event(body, type, **_) -> None:
    if type is None:
        return  # initial listing: resume handlers cover it
    meta = body["metadata"]
    _from_kopf(
        {"kind": "CompileJob", "metadata": {"namespace": meta["namespace"], "name": meta["labels"][COMPILE_JOB]}}
    )


@kopf.on.event(*CJ)
@kopf.on.event("apps", "v1", "deployments", labels={"app.kubernetes.io/component": "serving", MODEL: kopf.PRESENT})
def owned_object_event(body, type, **_) -> None:
    """A CompileJob or Triton Deployment moved: reconcile its InferenceModel now, not at the next resync."""
    if type is None:
        return
    owner = next((o for o in body["metadata"].get("ownerReferences", []) if o["kind"] == "InferenceModel"), None)
    if owner is None:
        return
    _from_kopf(
        {"kind": "InferenceModel", "metadata": {"namespace": body["metadata"]["namespace"], "name": owner["name"]}}
    )
