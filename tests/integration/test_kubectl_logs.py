"""kubectl on pods of the real node local-0, as on any cluster: `logs` (tail, timestamps, byte limit, a
Job's), `exec` and `describe`. The API server calls local-0's kubelet (its serving certificate verified
with the cluster CA, the API server's client certificate authorized by the kubelet's webhook).
"""

import copy
import datetime
import json
import os
import subprocess

import pytest
from kubernetes import client
from tensorkiln_api import GROUP, VERSION
from tensorkiln_local.cluster import nodes, paths, registry
from tensorkiln_local.images import build as images

from .helpers import wait_for
from .test_compile_on_cluster import SAMPLE, compile_job, jobs_of
from .test_compile_on_cluster import create as create_model

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


def run_pod(api, namespace: str, name: str, script: str, restart: str = "Never") -> None:
    """A pod on local-0 running `sh -c script` in the operator image (Debian's shell and coreutils)."""
    image = images.pushed(registry.HOST)["operator"].pinned
    client.CoreV1Api(api).create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": restart,
                "nodeSelector": {nodes.LOCAL_NODE_LABEL: "true"},
                "containers": [{"name": "main", "image": image, "command": ["sh", "-c", script]}],
            },
        },
    )


def wait_phase(api, namespace: str, name: str, *phases: str) -> client.V1Pod:
    def reached():
        pod = client.CoreV1Api(api).read_namespaced_pod(name, namespace)
        return pod if pod.status.phase in phases else None

    return wait_for(reached, timeout=120, what=f"pod {name} in phase {' or '.join(phases)}")


@pytest.mark.parametrize("code, phase", [(0, "Succeeded"), (3, "Failed")])
def test_logs_of_a_finished_pod_with_tail_timestamps_and_limit(api, namespace, code, phase):
    # stdout and stderr reach the log through two pipes: the pause orders them.
    run_pod(
        api, namespace, "printer", f"for i in 1 2 3 4 5; do echo line $i; done; sleep 0.5; echo oops >&2; exit {code}"
    )
    wait_phase(api, namespace, "printer", phase)
    assert logs(namespace, "printer") == LINES + "oops\n"
    assert logs(namespace, "printer", "--tail=2") == "line 5\noops\n"
    assert logs(namespace, "printer", "--limit-bytes=10") == "line 1\nlin"
    stamped = logs(namespace, "printer", "--timestamps", "--tail=3").splitlines()
    assert [line.split(" ", 1)[1] for line in stamped] == ["line 4", "line 5", "oops"]
    when = datetime.datetime.fromisoformat(stamped[0].split(" ", 1)[0].replace("Z", "+00:00"))
    assert abs(datetime.datetime.now(datetime.UTC) - when) < datetime.timedelta(minutes=5)


def test_exec_and_describe_of_a_running_pod(api, namespace):
    run_pod(api, namespace, "sleeper", "echo started; exec sleep 600")
    pod = wait_phase(api, namespace, "sleeper", "Running")
    done = kubectl("exec", "-n", namespace, "sleeper", "--", "sh", "-c", "id -u; hostname; echo $((6*7))")
    assert done.stdout.split() == ["65532", "sleeper", "42"]  # as the image's USER
    assert kubectl("exec", "-n", namespace, "sleeper", "--", "sh", "-c", "exit 7", check=False).returncode == 7
    described = kubectl("describe", "pod", "-n", namespace, "sleeper").stdout
    assert f"Node:             {nodes.FIRST}/" in described and pod.status.pod_ip in described
    assert "Successfully pulled image" in described or "already present on machine" in described


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

    # Its last words: the error line (stderr) and the JSON report (stdout). The container log keeps no
    # order between the two streams, so either may come last, and on a loaded node the runtime may
    # still be copying one of them into the log when the Job has already failed.
    def last_words():
        nonlocal text
        text = logs(namespace, f"job/{job}")
        last_two = text.splitlines()[-2:]
        return last_two if " ERROR tensorkiln_compiler: " in text and any(s.startswith("{") for s in last_two) else None

    try:
        last_two = wait_for(last_words, timeout=20, what="the compiler's error line and JSON report")
    except pytest.fail.Exception:
        pytest.fail(f"kubectl logs job/{job} does not end with the compiler's error and report:\n{text}")
    (report_line,) = [line for line in last_two if line.startswith("{")]
    (error_line,) = [line for line in last_two if line != report_line]
    report = json.loads(report_line)
    assert report["error"]["reason"] and report["error"]["reason"] in error_line
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
    assert " INFO tensorkiln_compiler" in text
    report = json.loads(text.splitlines()[-1])
    assert "error" not in report
    stamped = logs(namespace, f"job/{job}", "--timestamps", "--tail=1")
    assert stamped.split(" ", 1)[1] == text.splitlines()[-1] + "\n"
