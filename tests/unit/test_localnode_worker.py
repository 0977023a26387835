"""PodWorker end to end against a fake API: real local processes, recorded status patches."""

import base64
import dataclasses
import time
from pathlib import Path
from unittest.mock import ANY

import pytest
from tensorkiln_local.node import worker as worker_module
from tensorkiln_local.node.ipam import IpAllocator
from tensorkiln_local.node.worker import NodeEnv, PodWorker


class FakeKube:
    def __init__(self):
        self.calls = []

    def call(self, method, path, *, query=None, body=None, patch=None, timeout_s=30):
        self.calls.append((method, path, body))
        return {}

    def statuses(self):
        return [body["status"] for method, path, body in self.calls if path.endswith("/status")]


class NoObjects:
    def lookup(self, kind, namespace, name):
        return None

    def service_account_token(self, pod, audience, expiration_seconds):
        return "token"


@pytest.fixture
def env(tmp_path):
    return NodeEnv(
        kube=FakeKube(),
        resolver=NoObjects(),
        ipam=IpAllocator(tmp_path / "ipam.json"),
        node_name="local-0",
        state_dir=tmp_path,
        search_path="/usr/bin:/bin",
    )


def make_pod(*containers, init=(), uid="uid-1", **spec):
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": uid},
        "spec": {"containers": list(containers), "initContainers": list(init), "restartPolicy": "Never", **spec},
    }


def sh(script, name="main", **fields):
    return {"name": name, "image": "busybox", "command": ["sh", "-c", script], **fields}


def run_to_end(worker, timeout_s=10):
    worker.start()
    assert worker.finished.wait(timeout_s), "worker did not finish"
    return worker.env.kube.statuses()[-1]


def wait_for(predicate, timeout_s=5):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_failing_container_reports_exit_code_and_termination_message(env):
    status = run_to_end(PodWorker(make_pod(sh("echo done > /dev/termination-log; exit 3")), env))
    assert status["phase"] == "Failed"
    term = status["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"], term["message"]) == (3, "Error", "done\n")
    assert status["podIP"] == "127.0.0.10"


def test_fallback_to_logs_on_error_uses_the_log_tail(env):
    pod = make_pod(sh("echo first run; echo boom; exit 1", terminationMessagePolicy="FallbackToLogsOnError"))
    term = run_to_end(PodWorker(pod, env))["containerStatuses"][0]["state"]["terminated"]
    assert term["message"] == "first run\nboom\n"


def test_init_container_output_reaches_main_container_through_empty_dir(env):
    pod = make_pod(
        sh("cat /work/msg > /dev/termination-log; echo logged", volumeMounts=[{"name": "work", "mountPath": "/work"}]),
        init=[sh("echo from-init > /work/msg", name="init", volumeMounts=[{"name": "work", "mountPath": "/work"}])],
        volumes=[{"name": "work", "emptyDir": {}}],
    )
    status = run_to_end(PodWorker(pod, env))
    assert status["phase"] == "Succeeded"
    assert status["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    assert status["containerStatuses"][0]["state"]["terminated"]["message"] == "from-init\n"
    assert (env.state_dir / "pods/uid-1/main/log").read_text() == "logged\n"
    assert {c["type"]: c["status"] for c in status["conditions"]}["Initialized"] == "True"


def test_on_failure_restarts_and_records_last_state(env):
    pod = make_pod(sh("test -f marker && exit 0; touch marker; exit 7"), restartPolicy="OnFailure")
    status = run_to_end(PodWorker(pod, env))
    cs = status["containerStatuses"][0]
    assert status["phase"] == "Succeeded"
    assert cs["restartCount"] == 1
    assert cs["lastState"]["terminated"]["exitCode"] == 7


def test_deletion_kills_the_process_group_and_deletes_the_pod(env):
    pod = make_pod(sh("sleep 3600 & sleep 3600; wait"), terminationGracePeriodSeconds=2)
    worker = PodWorker(pod, env)
    worker.start()
    wait_for(lambda: any(s["phase"] == "Running" for s in env.kube.statuses()))
    pid = int(env.kube.statuses()[-1]["containerStatuses"][0]["containerID"].split("//")[1])
    deleting = {
        **pod,
        "metadata": {**pod["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z", "deletionGracePeriodSeconds": 2},
    }
    worker.observe(deleting)
    assert worker.finished.wait(5)
    assert not Path(f"/proc/{pid}").exists()
    method, path, body = env.kube.calls[-1]
    assert (method, path, body["gracePeriodSeconds"]) == ("DELETE", "/api/v1/namespaces/ns/pods/p", 0)
    assert env.kube.statuses()[-1]["phase"] == "Failed"
    assert env.kube.statuses()[-1]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 143
    assert not (env.state_dir / "pods/uid-1").exists() and env.ipam.uids() == set()


def test_active_deadline_fails_the_pod(env):
    status = run_to_end(PodWorker(make_pod(sh("sleep 3600"), activeDeadlineSeconds=1), env))
    assert (status["phase"], status["reason"]) == ("Failed", "DeadlineExceeded")


def test_unmappable_image_fails_the_pod_with_reason(env):
    pod = make_pod({"name": "main", "image": "example.com/server:1", "args": ["serve"]})
    status = run_to_end(PodWorker(pod, env))
    assert (status["phase"], status["reason"]) == ("Failed", "ImageNotMappable")
    assert "example.com/server:1" in status["message"]
    assert status["containerStatuses"][0]["state"]["waiting"]["reason"] == "ImageNotMappable"


def test_missing_executable_is_a_start_error(env):
    pod = make_pod({"name": "main", "image": "x", "command": ["no-such-tool"]})
    term = run_to_end(PodWorker(pod, env))["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (128, "StartError")
    assert "executable file not found" in term["message"]


def test_failing_liveness_probe_restarts_the_container(env):
    probe = {"exec": {"command": ["sh", "-c", "exit 1"]}, "periodSeconds": 1, "failureThreshold": 1}
    pod = make_pod(
        sh("test -f marker && exit 0; touch marker; sleep 3600", livenessProbe=probe),
        restartPolicy="OnFailure",
        terminationGracePeriodSeconds=1,
    )
    status = run_to_end(PodWorker(pod, env))
    cs = status["containerStatuses"][0]
    assert status["phase"] == "Succeeded" and cs["restartCount"] == 1
    assert cs["lastState"]["terminated"]["exitCode"] == 143


def test_readiness_probe_makes_the_pod_ready(env):
    probe = {"exec": {"command": ["test", "-f", "ready"]}, "periodSeconds": 1}
    pod = make_pod(sh("touch ready; sleep 3600", readinessProbe=probe))
    worker = PodWorker(pod, env)
    worker.start()
    wait_for(lambda: env.kube.statuses() and env.kube.statuses()[-1]["containerStatuses"][0]["ready"])
    assert {c["type"]: c["status"] for c in env.kube.statuses()[-1]["conditions"]}["Ready"] == "True"
    worker.stop("shutdown")
    worker.join(5)
    assert worker.finished.is_set()


def test_passing_liveness_probe_leaves_readiness_alone(env):
    """Triton pods have both: a passing liveness probe once reset readiness, so the pod flapped."""
    probe = {"exec": {"command": ["true"]}, "periodSeconds": 1}
    pod = make_pod(sh("sleep 3600", readinessProbe=probe, livenessProbe=probe, startupProbe=probe))
    worker = PodWorker(pod, env)
    worker.start()
    wait_for(lambda: env.kube.statuses() and env.kube.statuses()[-1]["containerStatuses"][0]["ready"])
    became_ready = len(env.kube.statuses())
    time.sleep(2.5)  # a few liveness and readiness rounds
    worker.stop("shutdown")
    worker.join(5)
    assert all(s["containerStatuses"][0]["ready"] for s in env.kube.statuses()[became_ready:])


def test_resumed_never_pod_reports_lost_container(env):
    pod = make_pod(sh("sleep 3600"))
    pod["status"] = {
        "phase": "Running",
        "startTime": "2026-01-01T00:00:00Z",
        "containerStatuses": [
            {"name": "main", "restartCount": 0, "state": {"running": {"startedAt": "2026-01-01T00:00:01Z"}}}
        ],
    }
    status = run_to_end(PodWorker(pod, env))
    term = status["containerStatuses"][0]["state"]["terminated"]
    assert (status["phase"], term["exitCode"], term["reason"]) == ("Failed", 137, "ContainerStatusUnknown")


class Objects(NoObjects):
    """ConfigMaps and Secrets that tests add and change while the pod runs."""

    def __init__(self):
        self.objects = {}

    def lookup(self, kind, namespace, name):
        return self.objects.get((kind, namespace, name))


def test_missing_secret_holds_the_pod_until_it_exists_then_renewals_reach_the_files(env, monkeypatch):
    monkeypatch.setattr(worker_module, "SETUP_RETRY_S", 0.2)
    monkeypatch.setattr(worker_module, "VOLUME_SYNC_S", 0.2)
    objects = Objects()
    env = dataclasses.replace(env, resolver=objects)
    mounts = [{"name": "cert", "mountPath": "/certs"}]
    pod = make_pod(
        sh("while :; do sleep 0.1; done", volumeMounts=mounts),
        volumes=[{"name": "cert", "secret": {"secretName": "tls"}}],
    )
    worker = PodWorker(pod, env)
    worker.start()
    held = 'MountVolume.SetUp failed for volume "cert" : secret "tls" not found'
    wait_for(lambda: env.kube.statuses())
    waiting = env.kube.statuses()[-1]["containerStatuses"][0]["state"]["waiting"]
    assert waiting == {"reason": "ContainerCreating", "message": held}
    wait_for(lambda: any(method == "PATCH" and "/events/" in path for method, path, _ in env.kube.calls))
    (event,) = events(env)  # retries count up the one Event, as the kubelet's correlator does
    assert (event["reason"], event["type"], event["message"]) == ("FailedMount", "Warning", held)
    assert event["involvedObject"]["uid"] == "uid-1" and event["source"] == {"component": "kubelet", "host": "local-0"}
    counted = next((path, body) for method, path, body in env.kube.calls if method == "PATCH" and "/events/" in path)
    assert counted == (f"/api/v1/namespaces/ns/events/{event['metadata']['name']}", {"count": 2, "lastTimestamp": ANY})

    objects.objects["secrets", "ns", "tls"] = {"data": {"tls.crt": base64.b64encode(b"first").decode()}}
    wait_for(lambda: "running" in env.kube.statuses()[-1]["containerStatuses"][0]["state"])
    cert = env.pod_dir("uid-1") / "volumes" / "cert" / "tls.crt"
    assert cert.read_bytes() == b"first"
    objects.objects["secrets", "ns", "tls"] = {"data": {"tls.crt": base64.b64encode(b"renewed").decode()}}
    wait_for(lambda: cert.read_bytes() == b"renewed")
    worker.stop("shutdown")
    worker.join(5)


def events(env):
    return [body for method, path, body in env.kube.calls if method == "POST" and path.endswith("/events")]
