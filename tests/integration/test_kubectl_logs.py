"""`kubectl logs` for pods on local-0: the API server proxies to the agent's kubelet endpoint.

kubectl, the cluster's own, with the cluster's kubeconfig: the request goes kubectl -> API server
-> https://127.0.0.1:<daemonEndpoints port>/containerLogs/... (the agent's certificate verified
with the cluster CA, the API server's client certificate required by the agent).
"""

import copy
import datetime
import json
import os
import subprocess
import time

import pytest
from kubernetes import client
from tensorkiln.api import GROUP, VERSION
from tensorkiln_local.cluster import paths

from . import test_localnode
from .helpers import wait_for
from .test_compile_on_cluster import SAMPLE, compile_job, jobs_of
from .test_compile_on_cluster import create as create_model
from .test_localnode import NODE, get_pod, run_pod, sh, wait_phase

kube, ns = test_localnode.kube, test_localnode.ns  # its fixtures: the agent's client, a fresh namespace

pytestmark = pytest.mark.cluster
LINES = "".join(f"line {i}\n" for i in range(1, 6))


def kubectl(*args, check=True):
    env = {**os.environ, "KUBECONFIG": os.environ.get("KUBECONFIG", str(paths.KUBECONFIG))}
    result = subprocess.run(
        [str(paths.BIN_DIR / "kubectl"), *args], capture_output=True, text=True, timeout=120, env=env
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


def logs(namespace, *args):
    return kubectl("logs", "-n", namespace, *args).stdout


def test_the_node_advertises_its_kubelet_endpoint(kube):
    status = kube.call("GET", f"/api/v1/nodes/{NODE}")["status"]
    assert status["daemonEndpoints"]["kubeletEndpoint"]["Port"] > 0


@pytest.mark.parametrize("code, phase", [(0, "Succeeded"), (3, "Failed")])
def test_logs_of_a_finished_pod_with_tail_timestamps_and_limit(kube, ns, code, phase):
    before = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=1)
    run_pod(kube, ns, "printer", sh(f"for i in 1 2 3 4 5; do echo line $i; done; echo oops >&2; exit {code}"))
    wait_phase(kube, ns, "printer", phase)
    assert logs(ns, "printer") == LINES + "oops\n"
    assert logs(ns, "printer", "--tail=2") == "line 5\noops\n"
    assert logs(ns, "printer", "--limit-bytes=10") == "line 1\nlin"
    stamped = logs(ns, "printer", "--timestamps", "--tail=3").splitlines()
    assert [line.split(" ", 1)[1] for line in stamped] == ["line 4", "line 5", "oops"]
    after = datetime.datetime.now(datetime.UTC)
    for line in stamped:
        stamp = line.split(" ", 1)[0]
        assert stamp.endswith("Z") and len(stamp) == len("2026-01-01T00:00:00.000000000Z"), stamp
        assert before <= datetime.datetime.fromisoformat(stamp[:26] + "+00:00") <= after
    assert logs(ns, "printer", "--since=1h") == LINES + "oops\n"


def test_previous_and_follow_across_a_restart(kube, ns):
    script = "if [ -f marker ]; then echo second run; sleep 4; echo done; else touch marker; echo first run; exit 1; fi"
    run_pod(kube, ns, "restarts", sh(script), restartPolicy="OnFailure")

    def restarted_and_running():
        pod = get_pod(kube, ns, "restarts")
        statuses = (pod or {}).get("status", {}).get("containerStatuses", [])
        return statuses and statuses[0]["restartCount"] == 1 and "running" in statuses[0]["state"]

    wait_for(restarted_and_running, timeout=60, interval=0.3, what="the second run")
    assert logs(ns, "restarts", "--previous") == "first run\n"
    started = time.monotonic()
    assert logs(ns, "restarts", "--follow") == "second run\ndone\n"  # ends when the container does
    assert time.monotonic() - started < 30
    wait_phase(kube, ns, "restarts", "Succeeded")
    assert logs(ns, "restarts") == "second run\ndone\n"
    assert logs(ns, "restarts", "-p") == "first run\n"


def test_a_pod_that_never_restarted_has_no_previous_logs_and_exec_says_it_is_unsupported(kube, ns):
    run_pod(kube, ns, "once", sh("echo hello; sleep 30"))
    wait_for(lambda: logs(ns, "once") == "hello\n", timeout=60, interval=0.5, what="the pod's output")
    result = kubectl("logs", "-n", ns, "once", "--previous", check=False)
    assert result.returncode != 0
    assert 'previous terminated container "main" in pod "once_' in result.stderr
    result = kubectl("exec", "-n", ns, "once", "--", "true", check=False)
    assert result.returncode != 0
    assert "exec is not supported by the TensorKiln local node agent" in result.stderr


def pod_log_on_disk(api, namespace, job) -> str:
    (pod,) = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"job-name={job}").items
    assert pod.spec.node_name == NODE
    return (paths.LOCALNODE_STATE / "pods" / pod.metadata.uid / "compiler" / "log").read_text()


def job_finished(api, namespace, model):
    """The compile's Job once it completed or failed (the CompileJob's status follows it)."""
    cj = compile_job(api, namespace, model)
    for job in jobs_of(api, namespace, cj) if cj else []:
        if any(c.type in ("Complete", "Failed") and c.status == "True" for c in job.status.conditions or []):
            return job
    return None


def compile_logs(api, namespace, model, timeout):
    """(Job, its condition, `kubectl logs job/<name>`) once the compile's Job finished."""
    job = wait_for(
        lambda: job_finished(api, namespace, model), timeout=timeout, interval=3, what=f"the compile of {model}"
    )
    (condition,) = [c.type for c in job.status.conditions if c.type in ("Complete", "Failed") and c.status == "True"]
    return job.metadata.name, condition, logs(namespace, f"job/{job.metadata.name}")


def test_kubectl_logs_of_a_failed_compile_job_shows_the_compilers_error(api, operator, namespace):
    create_model(api, namespace, "ocr-bad-digest", sha256="0" * 64)
    job, condition, text = compile_logs(api, namespace, "ocr-bad-digest", timeout=180)
    assert condition == "Failed"
    assert text == pod_log_on_disk(api, namespace, job)
    assert " ERROR tensorkiln_compiler: " in text
    report = json.loads(text.splitlines()[-1])  # the compiler's last word: its JSON report
    assert report["error"]["reason"] and report["error"]["reason"] in text.splitlines()[-2]
    assert logs(namespace, f"job/{job}", "--tail=1") == text.splitlines()[-1] + "\n"


def test_kubectl_logs_of_a_succeeded_compile_job_shows_the_compilers_output(api, operator, namespace):
    # Options of its own (FP32 alone): the session's registry may hold the sample's engine already,
    # and a cache hit runs no Job.
    body = copy.deepcopy(SAMPLE)
    body["metadata"] = {"name": "ocr-logs", "namespace": namespace}
    body["spec"]["compile"] = {**body["spec"].get("compile", {}), "precisions": ["FP32"]}
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", body)
    job, condition, text = compile_logs(api, namespace, "ocr-logs", timeout=900)  # a real compile, on 2 CPUs
    assert condition == "Complete"
    assert text == pod_log_on_disk(api, namespace, job)
    assert " INFO tensorkiln_compiler" in text
    report = json.loads(text.splitlines()[-1])
    assert "error" not in report
    stamped = logs(namespace, f"job/{job}", "--timestamps", "--tail=1")
    assert stamped.split(" ", 1)[1] == text.splitlines()[-1] + "\n"
