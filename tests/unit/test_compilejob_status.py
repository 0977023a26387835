import json
from datetime import UTC, datetime

from registry_fixtures import make_engine
from tensorkiln.status.compilejob import Published, cache_hit_status, compile_job_status, reported_engine
from tensorkiln_api.registry.manifest import Accuracy, PaddingIgnored

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
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


def test_a_compiler_that_exited_before_the_jobs_verdict_is_not_pending_again():
    ended = pod("local-0", "Failed", terminated={"exitCode": 2, "reason": "Error"})
    status = compile_job_status(CJ, job(active=0), ended, set(), NOW)
    assert status["phase"] == "Running"
    assert conditions(status)["Compiled"] == ("Unknown", "CompilerExited")
    assert "exited 2 on node local-0" in next(c["message"] for c in status["conditions"] if c["type"] == "Compiled")


def test_unschedulable_pod_reports_scheduler_message():
    waiting = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/17 nodes"}
    status = compile_job_status(CJ, job(active=1), pod(scheduled=waiting), set(), NOW)
    assert conditions(status)["Scheduled"] == ("False", "Unschedulable")


def test_a_placed_pod_that_mounts_a_source_secret_says_where_a_missing_one_shows():
    """The kubelet reports a missing Secret volume only as a FailedMount Event: the message names the Secret."""
    with_secret = {**CJ, "spec": {"source": {"uri": "s3://m/x.onnx", "credentials": {"secretName": "model-keys"}}}}
    placed = pod("local-0", "Pending")
    message = next(
        c["message"]
        for c in compile_job_status(with_secret, job(active=1), placed, set(), NOW)["conditions"]
        if c["type"] == "Compiled"
    )
    assert message == (
        "waiting for the compile pod to start; it mounts the Secret 'model-keys' of spec.source.credentials: "
        "if that does not exist, `kubectl describe pod m-l4-abcd1234-x` shows FailedMount"
    )
    plain = compile_job_status(CJ, job(active=1), placed, set(), NOW)
    assert "waiting for the compile pod to start" == next(
        c["message"] for c in plain["conditions"] if c["type"] == "Compiled"
    )


def published(tmp_path) -> Published:
    manifest = make_engine(tmp_path).manifest
    return Published(manifest, manifest.digest(), f"file:///r/engines/{manifest.digest()}")


def test_reported_engine_is_read_from_the_termination_message():
    message = '{"engine": {"digest": "%s", "uri": "file:///r"}}' % ("ab" * 32)
    assert reported_engine(pod("local-0", "Succeeded", {"exitCode": 0, "message": message}))["digest"] == "ab" * 32
    assert reported_engine(pod("local-0", "Succeeded", {"exitCode": 0, "message": "not json"})) is None


def test_success_reports_engine_selection_and_candidates(tmp_path):
    done = job(succeeded=1, conditions=[{"type": "Complete", "status": "True"}])
    engine = published(tmp_path)
    status = compile_job_status(CJ, done, pod("local-0", "Succeeded", {"exitCode": 0}), set(), NOW, engine)
    assert status["phase"] == "Succeeded" and status["cacheHit"] is False
    assert status["engine"]["digest"] == engine.digest
    assert status["selection"]["candidate"] == "tensorrt-fp16"
    assert [c["id"] for c in status["candidates"]] == ["tensorrt-fp16"]
    assert conditions(status)["Compiled"] == ("True", "EnginePublished")
    assert conditions(status)["Selected"] == ("True", "FastestPassing")
    assert conditions(status)["AccuracyPassed"][0] == "True"


def test_a_pod_that_found_the_engine_after_fetching_the_source_is_a_cache_hit_with_its_job(tmp_path):
    done = job(succeeded=1, conditions=[{"type": "Complete", "status": "True"}])
    engine = published(tmp_path)
    message = json.dumps({"engine": {"digest": engine.digest, "uri": engine.uri}, "cached": True})
    status = compile_job_status(CJ, done, pod("local-0", "Succeeded", {"exitCode": 0, "message": message}), set(),
                                NOW, engine)  # fmt: skip
    assert status["phase"] == "Succeeded" and status["cacheHit"] is True and status["jobName"] == "m-l4-abcd1234"
    assert conditions(status)["Compiled"] == ("True", "CacheHit")


def test_success_without_a_published_engine_fails():
    done = job(succeeded=1, conditions=[{"type": "Complete", "status": "True"}])
    status = compile_job_status(CJ, done, pod("local-0", "Succeeded", {"exitCode": 0}), set(), NOW)
    assert (status["phase"], status["reason"]) == ("Failed", "EngineNotFound")


def test_cache_hit_succeeds_without_a_job(tmp_path):
    status = cache_hit_status(CJ, published(tmp_path), NOW)
    assert status["phase"] == "Succeeded" and status["cacheHit"] is True
    assert conditions(status)["Compiled"] == ("True", "CacheHit")
    assert "jobName" not in status


def test_compiler_error_report_becomes_reason_and_message():
    failed = job(failed=1, conditions=[{"type": "Failed", "status": "True", "reason": "PodFailurePolicy"}])
    message = '{"error": {"reason": "ChecksumMismatch", "message": "spec.source.sha256 does not match"}}'
    status = compile_job_status(CJ, failed, pod("local-0", "Failed", {"exitCode": 2, "message": message}), set(), NOW)
    assert (status["reason"], status["message"]) == ("ChecksumMismatch", "spec.source.sha256 does not match")


def test_failure_carries_reason_and_termination_message():
    failed = job(failed=3, conditions=[{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}])
    status = compile_job_status(
        CJ, failed, pod("local-0", "Failed", {"exitCode": 1, "message": "bad opset"}), set(), NOW
    )
    assert (status["phase"], status["reason"], status["message"], status["attempts"]) == (
        "Failed",
        "BackoffLimitExceeded",
        "bad opset",
        3,
    )


def test_transition_time_kept_when_status_unchanged():
    first = compile_job_status(CJ, job(active=1), pod("n", "Running"), set(), NOW)
    later = datetime(2026, 11, 30, 13, 0, tzinfo=UTC)
    second = compile_job_status({**CJ, "status": first}, job(active=1), pod("n", "Running"), set(), later)
    assert first["conditions"] == second["conditions"]


def test_a_compiler_killed_by_a_signal_is_reported_with_its_exit_code():
    """A regression of the fault suite (e2e/faults): a SIGKILLed (or OOM-killed) compiler writes no
    report, and the message used to be the tail of its log, which never said it was killed."""
    failed = job(failed=2, conditions=[{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}])
    killed = {"exitCode": 137, "reason": "OOMKilled", "message": "INFO benchmarking openvino-fp32"}
    status = compile_job_status(CJ, failed, pod("local-0", "Failed", killed), set(), NOW)
    assert (status["phase"], status["reason"], status["attempts"]) == ("Failed", "BackoffLimitExceeded", 2)
    assert status["message"].startswith("attempt 2: the compiler exited 137 (SIGKILL: killed, e.g. by the OOM killer)")
    assert "reason OOMKilled" in status["message"] and status["message"].endswith("benchmarking openvino-fp32")


def test_accuracy_condition_says_when_a_text_encoders_padding_was_left_out(tmp_path):
    engine = published(tmp_path)
    figures = Accuracy(max_abs_error=0.01, max_rel_error=0, cosine_similarity=0.999, samples=4, synthetic_data=False)
    padded = figures.model_copy(update={"padding_ignored": PaddingIgnored(
        mask="attention_mask", outputs=["last_hidden_state"], compared_elements=320, ignored_elements=192)})  # fmt: skip
    done = job(succeeded=1, conditions=[{"type": "Complete", "status": "True"}])
    messages = []
    for accuracy in (figures, padded):
        winner = engine.manifest.candidates[0].model_copy(update={"accuracy": accuracy})
        manifest = engine.manifest.model_copy(update={"candidates": [winner]})
        published_engine = Published(manifest, manifest.digest(), engine.uri)
        status = compile_job_status(
            CJ, done, pod("local-0", "Succeeded", {"exitCode": 0}), set(), NOW, published_engine
        )
        messages.append(next(c["message"] for c in status["conditions"] if c["type"] == "AccuracyPassed"))
    assert messages[0] == "1 of 1 candidates within tolerance on the validation set"  # no mask: as before
    assert messages[1] == (
        "1 of 1 candidates within tolerance on the validation set, padded positions (attention_mask 0) of "
        "'last_hidden_state' left out: 320 output elements compared, 192 padded ones ignored"
    )


PULL_ERROR = (
    'Back-off pulling image "localhost:5000/tensorkiln/compilr:0.1.0": ErrImagePull: failed to pull and unpack '
    'image "localhost:5000/tensorkiln/compilr:0.1.0": not found'
)


def test_a_compile_pod_that_cannot_pull_its_image_says_which_image_and_why():
    stuck = pod("local-0", "Pending")
    stuck["status"]["containerStatuses"] = [
        {
            "name": "compiler",
            "image": "localhost:5000/tensorkiln/compilr:0.1.0",
            "state": {"waiting": {"reason": "ImagePullBackOff", "message": PULL_ERROR}},
        }
    ]
    status = compile_job_status(CJ, job(active=1), stuck, set(), NOW)
    assert status["phase"] == "Pending"
    assert conditions(status)["Compiled"] == ("Unknown", "ImagePullBackOff")
    message = next(c["message"] for c in status["conditions"] if c["type"] == "Compiled")
    assert message.startswith("compile pod m-l4-abcd1234-x cannot start: container compiler (image ")
    assert "localhost:5000/tensorkiln/compilr:0.1.0" in message and "not found" in message


def test_a_pod_still_pulling_is_only_pending():
    pulling = pod("local-0", "Pending")
    pulling["status"]["containerStatuses"] = [
        {"name": "compiler", "image": "x", "state": {"waiting": {"reason": "ContainerCreating"}}}
    ]
    status = compile_job_status(CJ, job(active=1), pulling, set(), NOW)
    assert conditions(status)["Compiled"] == ("Unknown", "Pending")
