"""kopf handler registrations: each handler reads the event, calls a reconciler, nothing more.

Reconciliation is level-based. create/update/resume handlers react promptly, timers re-run
every object so that a missed event, a restart or a new node pool converges, and event
handlers on Jobs, pods and CompileJobs forward progress to the object that owns them.
"""

import logging

import kopf
from kubernetes import client

from tensorkiln import kube
from tensorkiln.api import GROUP, VERSION
from tensorkiln.builders.labels import COMPILE_JOB
from tensorkiln.controllers import compilejob, inferencemodel
from tensorkiln.controllers.state import ClusterState
from tensorkiln.settings import Settings

SETTINGS = Settings.from_env()
_state: ClusterState | None = None

IM = (GROUP, VERSION, "inferencemodels")
CJ = (GROUP, VERSION, "compilejobs")
# Job progress arrives through events; the timer is only the safety net.
COMPILE_JOB_RESYNC_SECONDS = 60


def state() -> ClusterState:
    global _state
    if _state is None:
        _state = ClusterState(kube.api_client())
    return _state


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
    # Events are posted deliberately (kopf.event), not from every log line.
    settings.posting.level = logging.WARNING
    settings.execution.max_workers = 8


def _plain(body) -> dict:
    """kopf's Body is a read-only mapping over the raw object; the reconcilers take dicts."""
    return dict(body)


@kopf.on.resume(*IM)
@kopf.on.create(*IM)
@kopf.on.update(*IM, field="spec")
def inference_model_changed(body, **_) -> None:
    inferencemodel.reconcile(state(), _plain(body), SETTINGS)


@kopf.timer(*IM, interval=SETTINGS.resync_seconds, initial_delay=SETTINGS.resync_seconds)
def inference_model_resync(body, **_) -> None:
    inferencemodel.reconcile(state(), _plain(body), SETTINGS)


def _compile_job(body) -> None:
    old, new = compilejob.reconcile(state(), _plain(body))
    if old.get("phase") != new.get("phase"):
        failed = new.get("phase") == "Failed"
        message = new.get("message") or next(
            (c["message"] for c in new.get("conditions", []) if c["type"] == "Compiled"), ""
        )
        kopf.event(body, type="Warning" if failed else "Normal", reason=f"Compile{new['phase']}", message=message)


@kopf.on.resume(*CJ)
@kopf.on.create(*CJ)
@kopf.on.update(*CJ, field="spec")
def compile_job_changed(body, **_) -> None:
    _compile_job(body)


@kopf.timer(*CJ, interval=COMPILE_JOB_RESYNC_SECONDS, initial_delay=COMPILE_JOB_RESYNC_SECONDS)
def compile_job_resync(body, **_) -> None:
    _compile_job(body)


def _reconcile_compile_job_named(namespace: str, name: str) -> None:
    try:
        body = state().custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "compilejobs", name)
    except client.ApiException as error:
        if error.status == 404:
            return  # being garbage-collected with its owner
        raise
    _compile_job(body)


@kopf.on.event("batch", "v1", "jobs", labels={COMPILE_JOB: kopf.PRESENT})
@kopf.on.event("", "v1", "pods", labels={COMPILE_JOB: kopf.PRESENT})
def compile_workload_event(body, type, **_) -> None:
    if type is None:
        return  # initial listing: resume handlers cover it
    _reconcile_compile_job_named(body["metadata"]["namespace"], body["metadata"]["labels"][COMPILE_JOB])


@kopf.on.event(*CJ)
def compile_job_event(body, type, **_) -> None:
    """A CompileJob's status moved: re-roll its InferenceModel's status now rather than at the next resync."""
    if type is None:
        return
    owner = next((o for o in body["metadata"].get("ownerReferences", []) if o["kind"] == "InferenceModel"), None)
    if owner is None:
        return
    try:
        model = state().custom.get_namespaced_custom_object(
            GROUP, VERSION, body["metadata"]["namespace"], "inferencemodels", owner["name"]
        )
    except client.ApiException as error:
        if error.status == 404:
            return
        raise
    inferencemodel.reconcile(state(), model, SETTINGS)
