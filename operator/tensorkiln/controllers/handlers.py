"""The operator's controller: what queues each object, and its reconciles (kopf runs the startup
and cleanup handlers, the probes and the admission webhook; it watches no object).

Reconciliation is level-based and goes through one work queue (controllers.workqueue): a few
worker threads, one reconcile at a time per object, a failing object retried after its backoff,
an SLO model again on the scaler's period. The watch cache's informers (tensorkiln.cluster.informer)
tell `cached_event` of every change: an InferenceModel or CompileJob queues itself, a Job, pod or
anything a model owns queues its owner, a node that changes the pools queues every model. Once
every informer has its first listing, every object is queued (a start or a restart), and one
operator-wide resync loop queues every object again now and then, so that a missed event
converges. Reconciles and the resync read from the watch cache (tensorkiln.cluster.cache), and
none runs before it holds every kind's first listing, so in steady state and at a restart they make
no GET or LIST.

Of several replicas (the chart's Deployment), only the one that leads (tensorkiln.leadership)
reconciles; the others keep their caches filled and drop what they would queue. Elected, a replica
queues every object, as at a start.

Why not kopf's create/update/resume handlers, which queued models and CompileJobs before: kopf
writes its own annotations on every object it handles (two more patches per model), keeps a
stream per object, and watches both kinds a second time. (kopf's per-object timers would also put
a finalizer on every object, which would block deletion whenever the operator is down.)

`register` puts the handlers of one Controller, over the runner's OperatorContext, into a kopf
registry; importing this module registers nothing.
"""

import asyncio
import functools
import logging
import threading
import time
from datetime import UTC, datetime

import kopf
from kubernetes.dynamic.exceptions import ForbiddenError, NotFoundError
from tensorkiln_api import API_VERSION
from tensorkiln_api.registry import RegistryError

from tensorkiln import apierrors, memory
from tensorkiln.builders.labels import COMPILE_JOB
from tensorkiln.cluster.informer import start_informers
from tensorkiln.controllers import compilejob, events, failures, inferencemodel, recompiles, workqueue
from tensorkiln.controllers.context import OperatorContext
from tensorkiln.controllers.observed import scaled_by_operator
from tensorkiln.hardware.classes import discovery_key
from tensorkiln.observability import logs
from tensorkiln.observability import metrics as own_metrics

NOT_FILLED_RETRY_SECONDS = 1.0  # a reconcile queued before the cache serves waits this long, again
# What a model owns: a change to one by anyone else (a status, an edit, a deletion) reconciles the model.
MODEL_OWNED = {"Deployment", "Service", "ConfigMap", "PodDisruptionBudget", "HorizontalPodAutoscaler"}
STUCK_SECONDS = 120  # a reconcile running longer is reported at every resync pass
log = logging.getLogger(__name__)


def configure(settings: kopf.OperatorSettings, **_) -> None:
    # Bounded watches (kopf watches only the peering object): a silently dead connection is replaced within minutes.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    # Events are posted deliberately (controllers.events), not from every log line.
    settings.posting.level = logging.WARNING
    settings.execution.max_workers = 8


def _plain(body) -> dict:
    """kopf's Body is a read-only mapping over the raw object; the reconcilers take dicts."""
    return dict(body)


def _gone(error: Exception) -> bool:
    """Deleted since read, or its namespace is terminating: nothing left to converge or report."""
    if isinstance(error, NotFoundError):
        return True
    return isinstance(error, ForbiddenError) and "because it is being terminated" in str(error.body)


def _observed(kind: str):
    """Every reconcile of `kind`, whichever path calls it: counted and timed, its logs about the object."""

    def decorate(reconcile_one):
        @functools.wraps(reconcile_one)
        def run(self, body) -> float | None:
            with logs.about(body), own_metrics.reconciling(kind):
                return reconcile_one(self, body)

        return run

    return decorate


class Controller:
    """The operator's handlers over one context. Every reconcile goes through its queue: one at a
    time per object, at most `reconcile_workers` at once, retried after its backoff, SLO models
    again on their period."""

    def __init__(self, context: OperatorContext, queue: workqueue.WorkQueue | None = None):
        self.context = context
        self.settings = context.settings
        self.cache = context.cache
        self.queue = queue if queue is not None else workqueue.WorkQueue()
        self.failures = failures.FailureTracker()
        self.last_resync: float | None = None  # time.monotonic() when the resync loop last finished a pass
        self.leading = context.leadership.leading
        self._forced: set[tuple[str, str, str]] = set()  # spec changed since queued: try despite a backoff
        self._forced_guard = threading.Lock()
        self._node_keys: dict[str, tuple] = {}  # by node name: what discovery reads of it (classes.discovery_key)

    # -- startup and cleanup

    def start_cache(self, memo: kopf.Memo, **_) -> None:
        context = self.context
        memo["informers"] = start_informers(
            context.state.api, self.cache, context.namespaces, self.cached_event, self.first_pass
        )

    @staticmethod
    def stop_cache(memo: kopf.Memo, **_) -> None:
        for informer in memo.get("informers", []):
            informer.stop()

    def open_engine_registry(self, **_) -> None:
        """Open (and prepare) the registry now: one that goes away later is unavailable, not empty."""
        try:
            self.context.registry()
        except RegistryError as error:  # a bad URI: every reconcile that needs the registry will say so
            log.error("engine registry %s: %s", self.settings.registry_uri, error)

    def serve_metrics(self, memo: kopf.Memo, **_) -> None:
        if not self.settings.metrics_port:
            return
        try:
            memo["metrics_server"] = own_metrics.serve(self.settings.metrics_port, self.settings.listen_address)
        except OSError as error:  # fail the start: a retry would not free the port
            where = f"{self.settings.listen_address}:{self.settings.metrics_port}"
            raise kopf.PermanentError(f"cannot serve metrics on {where}: {error}") from error

    @staticmethod
    def stop_metrics(memo: kopf.Memo, **_) -> None:
        if memo.get("metrics_server"):
            memo["metrics_server"].shutdown()

    async def start_resync(self, memo: kopf.Memo, **_) -> None:
        memo["resync"] = asyncio.create_task(self.resync_forever())

    @staticmethod
    async def stop_resync(memo: kopf.Memo, **_) -> None:
        memo["resync"].cancel()

    def resync_probe(self, memo: kopf.Memo, **_) -> dict:
        """In /healthz: fails (HTTP 500) once the resync loop has died, as nothing would converge then."""
        task = memo.get("resync")
        if task is None or task.done():
            raise kopf.PermanentError("the resync loop is not running")
        return {
            "lastPassSecondsAgo": None if self.last_resync is None else round(time.monotonic() - self.last_resync, 1)
        }

    def start_workers(self, memo: kopf.Memo, **_) -> None:
        memo["workers"] = self.queue.run_workers(self.settings.reconcile_workers, self.process)

    def stop_workers(self, **_) -> None:
        self.queue.shutdown()

    def stand_for_leader(self, **_) -> None:
        self.context.leadership.start(on_elected=self.elected)

    def step_down(self, **_) -> None:
        """After the workers stopped: a standby takes over within its retry period."""
        self.context.leadership.release()

    # -- the resync loop

    def first_pass(self) -> None:
        """Once every informer has its first listing (an informer's thread): queue every object,
        as a start or a restart must, if this replica leads (else `elected` will)."""
        self._queue_everything("first pass")

    def elected(self) -> None:
        """This replica now leads (the election's thread): queue every object, once the cache
        holds them (else `first_pass` will)."""
        if self.cache.filled:
            self._queue_everything("election")

    def _queue_everything(self, why: str) -> None:
        try:
            if self.leading():
                self.resync_all()
        except Exception:  # the resync loop's next pass queues them
            log.exception("%s: queueing every object failed; the resync loop's next pass does", why)

    async def resync_forever(self) -> None:
        """Every resync_seconds, a pass while this replica leads. The first pass is `first_pass`,
        when the cache fills, or `elected`."""
        while True:
            await asyncio.sleep(self.settings.resync_seconds)
            if not (self.leading() and self.cache.filled):
                continue
            try:
                await asyncio.to_thread(self.resync_all)
            except Exception:  # whatever went wrong, the loop must outlive it: nothing converges without it
                log.exception("resync pass failed; retrying at the next pass")
                continue
            memory.release_free()  # what converging freed goes back to the system
            self.last_resync = time.monotonic()

    def resync_all(self) -> None:
        """Queue every InferenceModel and CompileJob (as the cache has them once the first
        listings are in, which resync_forever waits for): the queue runs each, one failing object
        never stops the others, and one already queued is not queued twice."""
        models = self.cache.all("InferenceModel")
        own_metrics.retain_models((o["metadata"]["namespace"], o["metadata"]["name"]) for o in models)
        key, running = self.queue.longest_running()
        if running > STUCK_SECONDS:
            log.warning("the reconcile of %s %s/%s has run for %.0f s", *key, running)
        self._enqueue_all([*models, *self.cache.all("CompileJob")])

    def _enqueue_all(self, objects: list[dict]) -> None:
        """Each of `objects` not being deleted, queued behind whatever events queue."""
        for obj in objects:
            if not obj["metadata"].get("deletionTimestamp"):
                self.enqueue(obj, background=True)

    # -- the queue

    def enqueue(self, body, forced: bool = False, background: bool = False) -> None:
        meta = body["metadata"]
        item = (body["kind"], meta["namespace"], meta["name"])
        if forced:
            with self._forced_guard:
                self._forced.add(item)
        self.queue.add(item, background=background)

    def process(self, item: tuple[str, str, str]) -> None:
        """One queued object, as the cache has it now (gone or being deleted: nothing to do)."""
        kind, namespace, name = item
        if not self.cache.filled:  # reading the API instead would cost a GET per object at a restart
            self.queue.add(item, NOT_FILLED_RETRY_SECONDS)
            return
        with self._forced_guard:
            forced = item in self._forced
            self._forced.discard(item)
        if not self.leading():
            return  # a standby: elected, it queues everything again
        body = self.context.state.get(API_VERSION, kind, namespace, name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return
        reconcile = self.inference_model if kind == "InferenceModel" else self.compile_job
        retry_in = reconcile(body, forced)
        if retry_in is not None:
            self.queue.add(item, retry_in)
        elif kind == "InferenceModel" and scaled_by_operator(body.get("spec", {})):
            self.queue.add(item, self.settings.slo_period_seconds)  # the scaler's own schedule

    # -- reconciles, each failure in its object's status

    def _guarded(self, body, forced: bool, reconcile_one, condition_type: str) -> float | None:
        """Reconcile one object; a failure goes to its status (controllers.failures), never up.
        Returns the seconds until it should be tried again (its backoff, or what a successful reconcile
        asked for), None when it is done. Within its backoff it is not tried, unless `forced` (its spec changed)."""
        obj = _plain(body)
        key = f"{obj['kind']} {obj['metadata']['namespace']}/{obj['metadata']['name']}"
        wait = self.failures.wait_left(key, time.monotonic())
        if not forced and wait > 0:
            return wait
        try:
            again = reconcile_one(obj)
        except Exception as error:
            if _gone(error):
                with logs.about(obj):
                    log.info("reconcile of %s skipped: %s", key, error.summary())
                return None
            return self._reconcile_failed(obj, key, error, condition_type)
        self.failures.succeeded(key)
        return again

    def _reconcile_failed(self, obj: dict, key: str, error: Exception, condition_type: str) -> float:
        recorded = self.failures.failed(key, error, time.monotonic())
        message = apierrors.describe(error)
        line = "reconcile of %s failed (attempt %d; next try in %.0f s): %s"
        state = self.context.state
        with logs.about(obj):
            if recorded.traceback:  # the first failure of its kind in this process
                log.error(line, key, recorded.attempts, recorded.retry_in, message, exc_info=error)
            else:
                log.warning(line, key, recorded.attempts, recorded.retry_in, message)
            try:
                status = failures.failed_status(obj, condition_type, message, datetime.now(UTC))
                if status != obj.get("status"):
                    state.apply_status(obj, status)
                if recorded.new_message:
                    events.post(state.core, obj, "Warning", failures.REASON, message)
            except Exception as unreported:  # e.g. its namespace is terminating: the log line is all there is
                log.warning("status of %s not written: %s", key, apierrors.describe(unreported))
        return recorded.retry_in

    def inference_model(self, body, forced: bool = False) -> float | None:
        return self._guarded(body, forced, self._reconcile_inference_model, "Ready")

    @_observed("InferenceModel")
    def _reconcile_inference_model(self, model: dict) -> None:
        context = self.context
        new = inferencemodel.reconcile(context.state, model, self.settings, context.registry(), context.scaler)
        own_metrics.record_targets(model, new)

    def compile_job(self, body, forced: bool = False) -> float | None:
        # A CompileJob has no Ready; its `Reconciled` condition appears only while reconciling it fails.
        return self._guarded(body, forced, self._reconcile_compile_job, compilejob.RECONCILED)

    @_observed("CompileJob")
    def _reconcile_compile_job(self, body: dict) -> float | None:
        """None, or the seconds after which a recompile waiting for a slot asks again."""
        state = self.context.state
        old, new = compilejob.reconcile(state, body, self.context.registry(), self.settings)
        own_metrics.record_compile_transition(body, old, new)
        if old.get("phase") != new.get("phase"):
            failed = new.get("phase") == "Failed"
            message = new.get("message") or next(
                (c["message"] for c in new.get("conditions", []) if c["type"] == "Compiled"), ""
            )
            events.post(state.core, dict(body), "Warning" if failed else "Normal", f"Compile{new['phase']}", message)
        compiled = next((c for c in new.get("conditions", []) if c["type"] == "Compiled"), {})
        return recompiles.WAIT_SECONDS if compiled.get("reason") == compilejob.QUEUED else None

    # -- events: queue what the event concerns

    def cached_event(self, kind: str, type_: str, obj: dict) -> None:
        """From an informer's thread: an InferenceModel or CompileJob moved, reconcile it; a compile
        Job or pod moved, reconcile its CompileJob; a CompileJob or an object a model owns moved,
        reconcile that InferenceModel (now, not at the next resync: an owned object edited or
        deleted by someone else is put right at once). The echo of our own write is left out (the
        reconcile that wrote it knew), unless it is a spec the object's reconcile has not seen: a
        CompileJob the model's reconcile just made or changed."""
        meta = obj["metadata"]
        labels = meta.get("labels") or {}
        if kind in ("InferenceModel", "CompileJob") and type_ != "DELETED":
            # Its spec changed (a generation not yet observed): tried at once, past any backoff.
            changed = meta.get("generation") != (obj.get("status") or {}).get("observedGeneration")
            if changed or not self.cache.echoes(kind, obj):
                self.enqueue(obj, forced=changed)
        if kind == "Node":
            self._node_moved(type_, obj)
        elif kind in ("Job", "Pod") and COMPILE_JOB in labels:
            self.enqueue(
                {"kind": "CompileJob", "metadata": {"namespace": meta["namespace"], "name": labels[COMPILE_JOB]}}
            )
        elif kind == "CompileJob" or (kind in MODEL_OWNED and (type_ == "DELETED" or not self.cache.echoes(kind, obj))):
            owner = next((o for o in meta.get("ownerReferences") or [] if o["kind"] == "InferenceModel"), None)
            if owner is not None:
                self.enqueue(
                    {"kind": "InferenceModel", "metadata": {"namespace": meta["namespace"], "name": owner["name"]}}
                )

    def _node_moved(self, type_: str, node: dict) -> None:
        """A node added or removed, or changed in what hardware discovery reads of it (its labels,
        the taints that keep pods off, cordoned or not, GPUs or none: classes.discovery_key), may
        change the hardware classes (a new pool, a pool gone): every model is queued, behind
        event-driven work. Heartbeats and other status changes, which change no such thing, queue
        nothing. A node first seen after a restart is only remembered."""
        name = node["metadata"]["name"]
        known = self._node_keys.get(name)
        key = None if type_ == "DELETED" else discovery_key(node)
        if key is None:
            self._node_keys.pop(name, None)
        else:
            self._node_keys[name] = key
        if type_ in ("ADDED", "DELETED") or (known is not None and known != key):
            self._enqueue_all(self.cache.all("InferenceModel"))


def register(registry: kopf.OperatorRegistry, context: OperatorContext) -> Controller:
    """Put one Controller's startup, cleanup and probe handlers (the start and stop of its watch
    cache's informers, workers and resync loop) into `registry`."""
    controller = Controller(context)
    own_metrics.WORKQUEUE_DEPTH.set_function(lambda: len(controller.queue))
    own_metrics.WORKQUEUE_LONGEST_RUNNING.set_function(lambda: controller.queue.longest_running()[1])
    own_metrics.LEADING.set_function(lambda: 1 if controller.leading() else 0)
    on = kopf.on
    on.startup(id="configure", registry=registry)(configure)
    on.startup(id="start_cache", registry=registry)(controller.start_cache)
    on.cleanup(id="stop_cache", registry=registry)(controller.stop_cache)
    on.startup(id="open_engine_registry", registry=registry)(controller.open_engine_registry)
    on.startup(id="serve_metrics", registry=registry)(controller.serve_metrics)
    on.cleanup(id="stop_metrics", registry=registry)(controller.stop_metrics)
    on.startup(id="start_resync", registry=registry)(controller.start_resync)
    on.cleanup(id="stop_resync", registry=registry)(controller.stop_resync)
    on.probe(id="resync", registry=registry)(controller.resync_probe)
    on.startup(id="start_workers", registry=registry)(controller.start_workers)
    on.cleanup(id="stop_workers", registry=registry)(controller.stop_workers)
    # Last: a replica stands for leader with its workers ready, and hands the Lease back after they stop.
    on.startup(id="stand_for_leader", registry=registry)(controller.stand_for_leader)
    on.cleanup(id="step_down", registry=registry)(controller.step_down)
    return controller
