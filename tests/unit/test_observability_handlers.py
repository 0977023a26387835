"""The handlers' wiring of metrics, log context and the /healthz probe (reconcilers stubbed)."""

import asyncio
import logging
from types import SimpleNamespace

import kopf
import pytest
from prometheus_client import REGISTRY
from tensorkiln.builders.labels import MODEL
from tensorkiln.cluster.cache import WatchCache
from tensorkiln.controllers import handlers
from tensorkiln.controllers.failures import FailureTracker
from tensorkiln.leadership import Leadership
from tensorkiln.observability import logs
from tensorkiln.settings import Settings

BODY = {
    "apiVersion": "tensorkiln.dev/v1alpha1",
    "kind": "CompileJob",
    "metadata": {"name": "wired-cpu", "namespace": "ns-w", "labels": {MODEL: "wired"}},
    "spec": {"hardware": {"className": "cpu"}},
    "status": {"phase": "Running"},
}


def value(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def controller(state=None) -> handlers.Controller:
    """A Controller over a context of stand-ins: no registry, no scaler, `state` as the cluster."""
    context = SimpleNamespace(
        settings=Settings(), namespaces=[], cache=WatchCache(), state=state, registry=lambda: None, scaler=None,
        leadership=Leadership(),
    )  # fmt: skip
    return handlers.Controller(context)


@pytest.fixture
def stubbed(monkeypatch):
    """compilejob.reconcile replaced; what it saw of the log context is kept in `seen`."""
    seen = {}
    posted = []
    monkeypatch.setattr(handlers.events, "post", lambda *args: posted.append(args))

    def reconcile(state, compile_job, registry, settings):
        record = logging.LogRecord("tensorkiln.controllers.compilejob", logging.INFO, __file__, 1, "m", (), None)
        logs.ObjectReference().filter(record)
        seen["ref"] = record.k8s_ref
        if seen.get("fail"):
            raise RuntimeError("API down")
        return compile_job["status"], {"phase": "Failed", "message": "bad input"}

    monkeypatch.setattr(handlers.compilejob, "reconcile", reconcile)
    seen["posted"] = posted
    return seen


def test_a_compile_job_reconcile_is_counted_logged_about_and_its_result_recorded(stubbed):
    reconciles = value("tensorkiln_reconciles_total", kind="CompileJob")
    failed = {"namespace": "ns-w", "model": "wired", "hardware_class": "cpu", "result": "Failed"}
    results = value("tensorkiln_compile_results_total", **failed)

    controller(SimpleNamespace(core=None)).compile_job(BODY)

    assert value("tensorkiln_reconciles_total", kind="CompileJob") == reconciles + 1
    assert value("tensorkiln_compile_results_total", **failed) == results + 1
    assert (stubbed["ref"]["namespace"], stubbed["ref"]["name"]) == ("ns-w", "wired-cpu")
    assert stubbed["posted"][0][3] == "CompileFailed"


def test_a_failing_compile_job_reconcile_counts_as_an_error_and_goes_to_its_status(stubbed):
    stubbed["fail"] = True
    written = []
    state = SimpleNamespace(core=None, apply_status=lambda obj, status: written.append(status))
    errors = value("tensorkiln_reconcile_errors_total", kind="CompileJob")

    controller(state).compile_job(BODY)  # no exception escapes

    assert value("tensorkiln_reconcile_errors_total", kind="CompileJob") == errors + 1
    (reconciled,) = written[0]["conditions"]
    assert (reconciled["type"], reconciled["status"], reconciled["reason"]) == ("Reconciled", "False", "ReconcileError")
    assert reconciled["message"] == "RuntimeError: API down" and written[0]["phase"] == "Running"


def test_the_probe_fails_once_the_resync_loop_is_gone():
    probed = controller()
    with pytest.raises(kopf.PermanentError, match="resync loop is not running"):
        probed.resync_probe(memo={})

    async def probe_with(task_body):
        task = asyncio.create_task(task_body())
        await asyncio.sleep(0)
        try:
            return probed.resync_probe(memo={"resync": task})
        finally:
            task.cancel()

    assert "lastPassSecondsAgo" in asyncio.run(probe_with(lambda: asyncio.sleep(60)))

    async def crashed():
        raise RuntimeError("urllib3: connection refused")

    with pytest.raises(kopf.PermanentError):
        asyncio.run(probe_with(crashed))


MODEL_BODY = {
    "apiVersion": "tensorkiln.dev/v1alpha1",
    "kind": "InferenceModel",
    "metadata": {"name": "failing", "namespace": "ns-f", "uid": "u1", "generation": 1},
    "spec": {},
    "status": {"phase": "Compiling", "conditions": []},
}


def test_a_failing_model_reconcile_goes_to_status_once_then_backs_off(monkeypatch, caplog):
    written, posted, calls = [], [], []
    state = SimpleNamespace(core=None, apply_status=lambda obj, status: written.append(status))
    monkeypatch.setattr(handlers.events, "post", lambda *args: posted.append(args))
    failing = controller(state)
    failing.failures = FailureTracker(first=60, cap=60)

    def reconcile(*_):
        calls.append(1)
        raise RuntimeError("the API said no")

    monkeypatch.setattr(handlers.inferencemodel, "reconcile", reconcile)
    errors = value("tensorkiln_reconcile_errors_total", kind="InferenceModel")

    failing.inference_model(MODEL_BODY)  # no exception escapes: kopf and the resync never see one
    failing.inference_model(MODEL_BODY)  # within the backoff: not tried again
    failing.inference_model(MODEL_BODY, forced=True)  # a spec change tries at once

    assert len(calls) == 2 and value("tensorkiln_reconcile_errors_total", kind="InferenceModel") == errors + 2
    (ready,) = written[0]["conditions"]
    assert (ready["reason"], ready["message"]) == ("ReconcileError", "RuntimeError: the API said no")
    assert [p[2:4] for p in posted] == [("Warning", "ReconcileError")]  # one Event for one message
    assert sum("Traceback" in r.exc_text for r in caplog.records if r.exc_text) <= 1
