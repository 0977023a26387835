"""A failing reconcile in status, the log and Events, with backoff (controllers.failures)."""

from datetime import UTC, datetime

from kubernetes import client
from tensorkiln.apierrors import about, describe
from tensorkiln.controllers.failures import REASON, FailureTracker, failed_status

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
QUOTA = (
    '{"kind":"Status","status":"Failure","message":"services \\"q--cpu\\" is forbidden: exceeded quota: '
    'no-services, requested: services=1, used: services=0, limited: services=0","reason":"Forbidden","code":403}'
)


def forbidden(name="q--cpu") -> client.ApiException:
    error = client.ApiException(status=403, reason="Forbidden")
    error.body = QUOTA.replace("q--cpu", name)
    return about(error, "Service", "ns", name)


def test_the_message_names_the_object_and_keeps_the_api_servers_words():
    assert describe(forbidden()) == (
        'Service ns/q--cpu: 403 Forbidden: services "q--cpu" is forbidden: exceeded quota: no-services, '
        "requested: services=1, used: services=0, limited: services=0"
    )
    assert describe(ValueError("boom")) == "ValueError: boom"


def test_status_gets_ready_false_and_keeps_everything_else():
    model = {
        "metadata": {"generation": 2},
        "status": {
            "phase": "Compiling",
            "targets": [{"hardwareClass": "cpu"}],
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "Compiling", "message": "", "lastTransitionTime": "t0"},
                {
                    "type": "Compiled",
                    "status": "False",
                    "reason": "Compiling",
                    "message": "",
                    "lastTransitionTime": "t0",
                },
            ],
        },
    }
    status = failed_status(model, "Ready", describe(forbidden()), NOW)
    ready, compiled = status["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", REASON)
    assert ready["lastTransitionTime"] == "t0" and "exceeded quota" in ready["message"]
    assert compiled == model["status"]["conditions"][1] and status["targets"] == [{"hardwareClass": "cpu"}]


def test_backoff_doubles_one_event_per_message_and_one_traceback_per_kind():
    tracker = FailureTracker(first=5, cap=20)
    first = tracker.failed("ns/a", forbidden("a--cpu"), now=0)
    second = tracker.failed("ns/a", forbidden("a--cpu"), now=5)
    other_model = tracker.failed("ns/b", forbidden("b--cpu"), now=5)
    assert (first.attempts, first.retry_in, first.traceback, first.new_message) == (1, 5, True, True)
    assert (second.attempts, second.retry_in, second.traceback, second.new_message) == (2, 10, False, False)
    assert not other_model.traceback and other_model.new_message  # same kind of failure, its own Event
    assert tracker.wait_left("ns/a", now=6) == 9
    for now in range(4):
        last = tracker.failed("ns/a", forbidden("a--cpu"), now=now)
    assert last.retry_in == 20  # capped
    tracker.succeeded("ns/a")
    assert tracker.wait_left("ns/a", now=0) == 0 and tracker.failed("ns/a", forbidden("a--cpu"), 0).new_message
