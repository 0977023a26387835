from datetime import datetime, timezone

from tensorkiln.status.compilejob import compile_job_status

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
CJ = {"metadata": {"name": "m-l4", "generation": 1}, "spec": {}}


def job(**status):
    return {"metadata": {"name": "m-l4-abcd1234"}, "status": status}


def pod(node=None, phase="Pending", terminated=None, scheduled=None):
    body = {"metadata": {"name": "m-l4-abcd1234-x"}, "spec": {}, "status": {"phase": phase}}
    if node:
        body["spec"]["nodeName"] = node
    if terminated:
        body["status"]["containerStatuses"] = [{"name": "compiler", "state": {"terminated": terminated}}]
    if scheduled:
        body["status"]["conditions"] = [scheduled]
    return body


def conditions(status):
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_no_job_yet_is_pending():
    status = compile_job_status(CJ, None, None, set(), NOW)
    assert status["phase"] == "Pending"
    assert conditions(status)["Scheduled"] == ("False", "JobNotCreated")


def test_running_on_simulated_node_says_so():
    status = compile_job_status(CJ, job(active=1), pod("gpu-l4-0", "Running"), {"gpu-l4-0"}, NOW)
    assert status["phase"] == "Running"
    assert status["nodeName"] == "gpu-l4-0" and status["simulatedNode"] is True
    assert "simulated by kwok" in next(c["message"] for c in status["conditions"] if c["type"] == "Compiled")


def test_unschedulable_pod_reports_scheduler_message():
    waiting = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/17 nodes"}
    status = compile_job_status(CJ, job(active=1), pod(scheduled=waiting), set(), NOW)
    assert conditions(status)["Scheduled"] == ("False", "Unschedulable")


def test_success_reads_engine_from_termination_message():
    message = '{"engine": {"digest": "abababababababababababababababababababababababababababababababab", "uri": "file:///r/ab"}}'
    done = job(succeeded=1, conditions=[{"type": "Complete", "status": "True"}])
    status = compile_job_status(CJ, done, pod("local-0", "Succeeded", {"exitCode": 0, "message": message}), set(), NOW)
    assert status["phase"] == "Succeeded"
    assert status["engine"]["digest"] == "abababababababababababababababababababababababababababababababab"
    assert conditions(status)["Compiled"] == ("True", "EnginePublished")


def test_success_without_engine_is_not_compiled():
    done = job(succeeded=1, conditions=[{"type": "Complete", "status": "True"}])
    status = compile_job_status(CJ, done, pod("local-0", "Succeeded", {"exitCode": 0}), set(), NOW)
    assert conditions(status)["Compiled"] == ("False", "NoEngineReported")


def test_failure_carries_reason_and_termination_message():
    failed = job(failed=3, conditions=[{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}])
    status = compile_job_status(CJ, failed, pod("local-0", "Failed", {"exitCode": 1, "message": "bad opset"}), set(), NOW)
    assert (status["phase"], status["reason"], status["message"], status["attempts"]) == (
        "Failed", "BackoffLimitExceeded", "bad opset", 3)


def test_transition_time_kept_when_status_unchanged():
    first = compile_job_status(CJ, job(active=1), pod("n", "Running"), set(), NOW)
    later = datetime(2026, 11, 30, 13, 0, tzinfo=timezone.utc)
    second = compile_job_status({**CJ, "status": first}, job(active=1), pod("n", "Running"), set(), later)
    assert first["conditions"] == second["conditions"]
