"""The operator's own Prometheus metrics, served on /metrics (TENSORKILN_METRICS_PORT, 0: off).

Every name here starts with `tensorkiln_`; the Grafana dashboard (observability.dashboard) and
its tests read NAMES. Recording never raises into a reconciler: metrics must not break control.

- reconciles, their duration and errors, by kind: every path (kopf handlers, owned-object
  events, the resync loop) goes through `reconciling()` in controllers.handlers;
- compile results by (namespace, model, hardware_class, result): Succeeded, Failed or CacheHit,
  counted when a CompileJob's phase moves to a final one;
- scale actions by (namespace, model, hardware_class, direction): `record_scale_action`, called
  by the scaler when it changes a Deployment's replicas;
- registry cache lookups by result (hit, miss): hit rate = hit / (hit + miss);
- watch reconnects by reason: kopf has no hook for them, so `WatchReconnectCounter` reads kopf's
  own log records of its watch streams (see its docstring for what is and is not counted);
- per target: the replicas and ready replicas the operator last reported in status, and the
  model's SLO target in milliseconds;
- the work queue's depth: objects waiting for a reconcile (due or not yet: backoffs, the SLO
  scaler's schedule), and how long the longest reconcile running now has run.
"""

import logging
import re
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from tensorkiln_api.inferencemodel import DEFAULT_MAX_REPLICAS

from tensorkiln.builders.labels import MODEL

log = logging.getLogger(__name__)

KINDS = ("InferenceModel", "CompileJob")
COMPILE_RESULTS = ("Succeeded", "Failed", "CacheHit")
DIRECTIONS = ("up", "down")
WATCH_RECONNECT_REASONS = ("expired", "inactive", "error")
_TARGET = ["namespace", "model", "hardware_class"]

RECONCILES = Counter(
    "tensorkiln_reconciles", "Reconciles run (handlers, owned-object events and resync alike).", ["kind"]
)
RECONCILE_ERRORS = Counter("tensorkiln_reconcile_errors", "Reconciles that raised an exception.", ["kind"])
RECONCILE_DURATION = Histogram(
    "tensorkiln_reconcile_duration_seconds",
    "Wall time of one reconcile, API calls included.",
    ["kind"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
COMPILES = Counter(
    "tensorkiln_compile_results",
    "CompileJobs that reached a final phase: Succeeded (a compile ran), Failed, or CacheHit (no Job ran).",
    [*_TARGET, "result"],
)
SCALE_ACTIONS = Counter(
    "tensorkiln_scale_actions", "Replica changes the SLO scaler made, by direction (up, down).", [*_TARGET, "direction"]
)
REGISTRY_LOOKUPS = Counter(
    "tensorkiln_registry_lookups",
    "Engine registry cache lookups before a compile, by result (hit, miss, error: the registry unreachable or "
    "refusing); hit rate = hit / (hit + miss).",
    ["result"],
)
WATCH_RECONNECTS = Counter(
    "tensorkiln_watch_reconnects",
    "Watch streams re-opened (kopf's, and the watch cache's informers') after an expired resourceVersion (410), "
    "inactivity or a failed request.",
    ["reason"],
)
TARGET_REPLICAS = Gauge(
    "tensorkiln_target_replicas", "Serving replicas of a target, as last reported in status.", _TARGET
)
TARGET_READY_REPLICAS = Gauge(
    "tensorkiln_target_ready_replicas", "Ready serving replicas of a target, as last reported in status.", _TARGET
)
TARGET_MAX_REPLICAS = Gauge(
    "tensorkiln_target_max_replicas",
    "The most serving replicas a target may run (spec.slo.maxReplicas, or its default); replicas at it while the "
    "SLO is missed: capped.",
    _TARGET,
)
SLO_TARGET = Gauge(
    "tensorkiln_slo_target_milliseconds", "The model's latency SLO target (spec.slo.targetMilliseconds).", _TARGET
)
# spec.slo.placement LeastCost (status.targets[].slo): what each target costs, carries and can carry.
TARGET_COST = Gauge(
    "tensorkiln_target_cost_per_hour", "What a target's replicas cost an hour (status costPerHour).", _TARGET
)
TARGET_LOAD_SHARE = Gauge(
    "tensorkiln_target_load_share", "Share of the model's load placed on a target, 0 to 1 (status loadShare).", _TARGET
)
TARGET_CAPACITY = Gauge(
    "tensorkiln_target_capacity_per_replica",
    "Requests/s one replica of a target sustains under the SLO (status capacityPerReplica).",
    _TARGET,
)
_PLACEMENT_GAUGES = (
    (TARGET_COST, "costPerHour"),
    (TARGET_LOAD_SHARE, "loadShare"),
    (TARGET_CAPACITY, "capacityPerReplica"),
)
WORKQUEUE_DEPTH = Gauge(
    "tensorkiln_workqueue_depth", "Objects in the reconcile work queue (due now or later: backoffs, SLO schedule)."
)
WORKQUEUE_LONGEST_RUNNING = Gauge(
    "tensorkiln_workqueue_longest_running_seconds", "How long the longest reconcile running now has been running."
)
LEADING = Gauge(
    "tensorkiln_operator_leading",
    "1 on the operator replica that holds the leader-election Lease (it reconciles), 0 on a standby.",
)

# Exposition names (counters get `_total`, histograms `_bucket`/`_sum`/`_count`).
NAMES = frozenset(
    {
        "tensorkiln_reconciles_total",
        "tensorkiln_reconcile_errors_total",
        "tensorkiln_reconcile_duration_seconds_bucket",
        "tensorkiln_reconcile_duration_seconds_sum",
        "tensorkiln_reconcile_duration_seconds_count",
        "tensorkiln_compile_results_total",
        "tensorkiln_scale_actions_total",
        "tensorkiln_registry_lookups_total",
        "tensorkiln_watch_reconnects_total",
        "tensorkiln_target_replicas",
        "tensorkiln_target_ready_replicas",
        "tensorkiln_target_max_replicas",
        "tensorkiln_slo_target_milliseconds",
        "tensorkiln_target_cost_per_hour",
        "tensorkiln_target_load_share",
        "tensorkiln_target_capacity_per_replica",
        "tensorkiln_workqueue_depth",
        "tensorkiln_workqueue_longest_running_seconds",
        "tensorkiln_operator_leading",
    }
)

# Series that exist (at 0) from the start, so rates and ratios have data before the first event.
for _kind in KINDS:
    RECONCILES.labels(_kind)
    RECONCILE_ERRORS.labels(_kind)
    RECONCILE_DURATION.labels(_kind)
for _result in ("hit", "miss", "error"):
    REGISTRY_LOOKUPS.labels(_result)
for _reason in WATCH_RECONNECT_REASONS:
    WATCH_RECONNECTS.labels(_reason)


@contextmanager
def reconciling(kind: str) -> Iterator[None]:
    """Count and time one reconcile of `kind`; an exception counts as an error and propagates."""
    started = time.perf_counter()
    try:
        yield
    except Exception:
        RECONCILE_ERRORS.labels(kind).inc()
        raise
    finally:
        RECONCILES.labels(kind).inc()
        RECONCILE_DURATION.labels(kind).observe(time.perf_counter() - started)


def compile_result(status: dict) -> str | None:
    """Succeeded, Failed or CacheHit for a CompileJob status in a final phase; None otherwise."""
    phase = status.get("phase")
    if phase == "Succeeded":
        return "CacheHit" if status.get("cacheHit") else "Succeeded"
    return "Failed" if phase == "Failed" else None


def record_compile_transition(compile_job: dict, old: dict, new: dict) -> None:
    """Count a compile result when a reconcile moved the CompileJob's phase to a final one."""
    result = compile_result(new)
    if result is None or old.get("phase") == new.get("phase"):
        return
    meta = compile_job["metadata"]
    model = meta.get("labels", {}).get(MODEL, "")
    hardware_class = compile_job.get("spec", {}).get("hardware", {}).get("className", "")
    COMPILES.labels(meta["namespace"], model, hardware_class, result).inc()


def record_scale_action(namespace: str, model: str, hardware_class: str, direction: str) -> None:
    """One replica change of a target by the SLO scaler; direction: "up" or "down"."""
    SCALE_ACTIONS.labels(namespace, model, hardware_class, str(direction).lower()).inc()


def record_registry_lookup(key: object | None, hit: object | None) -> None:
    """A registry cache lookup for `key` found `hit` (None: a miss); no key, no lookup happened."""
    if key is not None:
        REGISTRY_LOOKUPS.labels("miss" if hit is None else "hit").inc()


def record_registry_error() -> None:
    """A lookup the registry did not answer (unreachable, or refusing the operator's credentials)."""
    REGISTRY_LOOKUPS.labels("error").inc()


_targets_lock = threading.Lock()
_targets: dict[tuple[str, str], set[str]] = {}  # (namespace, model) -> hardware classes with gauges


def _drop(namespace: str, model: str, classes: Iterable[str]) -> None:
    for hardware_class in classes:
        for gauge in (TARGET_REPLICAS, TARGET_READY_REPLICAS, TARGET_MAX_REPLICAS, SLO_TARGET,
                      *(g for g, _ in _PLACEMENT_GAUGES)):  # fmt: skip
            try:
                gauge.remove(namespace, model, hardware_class)
            except KeyError:
                pass


def record_targets(model: dict, status: dict) -> None:
    """Per-target gauges from an InferenceModel and the status a reconcile just computed."""
    namespace, name = model["metadata"]["namespace"], model["metadata"]["name"]
    slo = model.get("spec", {}).get("slo") or {}
    slo_ms = slo.get("targetMilliseconds")
    most = slo.get("maxReplicas") or max(DEFAULT_MAX_REPLICAS, slo.get("minReplicas", 1))  # SLO._derive_unset
    classes = set()
    for target in status.get("targets", []):
        hardware_class = target["hardwareClass"]
        classes.add(hardware_class)
        TARGET_REPLICAS.labels(namespace, name, hardware_class).set(target.get("replicas", 0))
        TARGET_READY_REPLICAS.labels(namespace, name, hardware_class).set(target.get("readyReplicas", 0))
        TARGET_MAX_REPLICAS.labels(namespace, name, hardware_class).set(most)
        if slo_ms is not None:
            SLO_TARGET.labels(namespace, name, hardware_class).set(slo_ms)
        for gauge, field in _PLACEMENT_GAUGES:
            value = (target.get("slo") or {}).get(field)
            if value is not None:
                gauge.labels(namespace, name, hardware_class).set(value)
            else:  # placement PerClass again, or a class that lost its price
                try:
                    gauge.remove(namespace, name, hardware_class)
                except KeyError:
                    pass
    with _targets_lock:
        gone = _targets.get((namespace, name), set()) - classes
        _targets[(namespace, name)] = classes
    _drop(namespace, name, gone)


def retain_models(existing: Iterable[tuple[str, str]]) -> None:
    """Drop the gauges of InferenceModels that no longer exist (called after a full listing)."""
    keep = set(existing)
    with _targets_lock:
        gone = {key: _targets.pop(key) for key in list(_targets) if key not in keep}
    for (namespace, name), classes in gone.items():
        _drop(namespace, name, classes)


class WatchReconnectCounter(logging.Filter):
    """Counts kopf's watch-stream reconnects from its own log records (kopf 1.45 has no hook).

    Installed as a filter on kopf's watching logger, whose level it lowers to DEBUG so that the
    records exist; records below `threshold` (the level the operator logs at) are counted, then
    dropped, so the output is unchanged. Counted, by reason:

    - expired: the API server ended a watch with 410 Gone (resourceVersion too old); kopf lists again;
    - inactive: no event, not even a bookmark, within settings.watching.inactivity_timeout;
    - error: a watch request failed (connection refused, 5xx, timeout) and is retried or escalated.

    Not counted: the routine end of every watch at settings.watching.server_timeout, and a stream
    cut mid-way, which kopf re-opens without a log record.
    """

    LOGGER = "kopf._cogs.clients.watching"
    PATTERNS = (
        ("expired", re.compile(r"^Restarting the watch-stream for ")),
        ("inactive", re.compile(r"^Watch-stream for .* is inactive, reconnecting")),
        ("error", re.compile(r"^Request attempt \S+ failed")),
    )

    def __init__(self, threshold: int):
        super().__init__()
        self.threshold = threshold

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
            reason = next((reason for reason, pattern in self.PATTERNS if pattern.search(message)), None)
            if reason:
                WATCH_RECONNECTS.labels(reason).inc()
        except Exception:  # counting must never lose the record
            pass
        return record.levelno >= self.threshold

    @classmethod
    def install(cls, threshold: int | None = None) -> "WatchReconnectCounter":
        """Idempotent; `threshold` defaults to the root logger's level."""
        logger = logging.getLogger(cls.LOGGER)
        for existing in logger.filters:
            if isinstance(existing, cls):
                return existing
        counter = cls(logging.getLogger().getEffectiveLevel() if threshold is None else threshold)
        logger.addFilter(counter)
        logger.setLevel(logging.DEBUG)
        return counter


def serve(port: int, addr: str) -> WSGIServer:
    """Serve /metrics of the default registry on a daemon thread; OSError when the port is taken."""
    server, _thread = start_http_server(port, addr=addr, registry=REGISTRY)
    log.info("serving Prometheus metrics on http://%s:%d/metrics", addr, server.server_port)
    return server
