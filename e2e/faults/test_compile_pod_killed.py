"""A compile pod killed mid-compile (SIGKILL, exit 137): the retry budget (spec.compile.retries)
is honoured and the failure is reported.

The kill comes from outside (`nodes.signal_container`, through local-0's containerd, as a crash or an
operator would), so the kubelet reports reason Error. A compile over its memory limit, killed by the kernel's OOM killer and
reported OOMKilled, is test_compile_pod_oom.py.
"""

import random
import time
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client
from tensorkiln_api.registry import open_registry
from tensorkiln_local.cluster import nodes

from .support import (
    compile_jobs,
    condition,
    create,
    get_model,
    jobs_of,
    pods_of_job,
    real_model,
    wait_until,
)

RETRIES = 1  # two attempts in all


def compiler_running(api, namespace: str, job: str, killed: set[str]):
    """The Job's compile pod whose compiler runs on local-0 now (its container started), not killed yet."""
    for pod in pods_of_job(api, namespace, job):
        if pod.metadata.uid in killed or pod.spec.node_name != nodes.FIRST:
            continue
        compiler = next((s for s in pod.status.container_statuses or [] if s.name == "compiler"), None)
        if compiler and compiler.state.running:
            return pod
    return None


def kill_compiler(api, namespace: str, job: str, killed: set[str], rng) -> dict:
    pod = wait_until(
        lambda: compiler_running(api, namespace, job, killed), 300, f"a running compile pod of {job}", interval=0.2
    )
    time.sleep(rng.uniform(0.5, 4))  # somewhere inside the compile (FP32 and INT8: tens of seconds)
    nodes.signal_container(pod, "compiler", "SIGKILL")
    killed.add(pod.metadata.uid)

    def terminated():
        found = client.CoreV1Api(api).read_namespaced_pod(pod.metadata.name, namespace)
        state = next((s.state for s in found.status.container_statuses or [] if s.name == "compiler"), None)
        return state.terminated if state and state.terminated else None

    ended = wait_until(terminated, 60, f"pod {pod.metadata.name} to report the kill", interval=1)
    return {"pod": pod.metadata.name, "exitCode": ended.exit_code, "reason": ended.reason}


def the_job(api, namespace: str, model: str) -> str:
    def named():
        cjs = compile_jobs(api, namespace, model)
        return cjs and cjs[0].get("status", {}).get("jobName")

    return wait_until(named, 120, f"the compile Job of {model}")


def test_a_killed_attempt_is_retried_and_killing_every_attempt_fails_after_retries_plus_one(
    api, namespace, operator, rng, tmp_path, registry_uri
):
    # Two keys, two compiles at once on local-0's two CPUs.
    create(api, real_model(namespace, "survives", variant=11, retries=RETRIES, int8=True))
    create(api, real_model(namespace, "fails", variant=12, retries=RETRIES, int8=True))
    survives, fails = the_job(api, namespace, "survives"), the_job(api, namespace, "fails")

    killed: set[str] = set()
    delays = {job: random.Random(rng.random()) for job in (survives, fails)}  # one stream per thread

    def kill_attempts(job: str, count: int) -> list[dict]:
        return [kill_compiler(api, namespace, job, killed, delays[job]) for _ in range(count)]

    with ThreadPoolExecutor(2) as pool:  # both compiles run at once: each is killed as soon as it runs
        first, every = pool.submit(kill_attempts, survives, 1), pool.submit(kill_attempts, fails, RETRIES + 1)
        kills = first.result() + every.result()
    print("\nkills:", kills)
    assert all(k["exitCode"] == 137 for k in kills), kills

    def finished(model):
        def check():
            (cj,) = compile_jobs(api, namespace, model)
            return cj if cj.get("status", {}).get("phase") in ("Succeeded", "Failed") else None

        return check

    failed = wait_until(finished("fails"), 300, "the CompileJob whose every attempt was killed to fail")
    status = failed["status"]
    print("failed:", {k: status.get(k) for k in ("phase", "reason", "attempts", "message")})
    assert status["phase"] == "Failed"
    assert status["attempts"] == RETRIES + 1
    assert status["reason"] == "BackoffLimitExceeded"
    assert "137" in status["message"], status["message"]
    assert condition(failed, "Compiled")["status"] == "False"
    assert "engine" not in status
    assert len(jobs_of(api, namespace, failed["metadata"]["name"])) == 1
    assert len(pods_of_job(api, namespace, fails)) == RETRIES + 1
    model = wait_until(
        lambda: (m := get_model(api, namespace, "fails")).get("status", {}).get("phase") == "Failed" and m,
        60,
        "the InferenceModel to report the failed compile",
    )
    assert condition(model, "Compiled")["reason"] == "CompileFailed"

    done = wait_until(finished("survives"), 600, "the retried compile to finish")
    assert done["status"]["phase"] == "Succeeded", done["status"].get("message")
    assert done["status"]["attempts"] == 2, "one killed attempt, one that compiled"
    assert len(pods_of_job(api, namespace, survives)) == 2
    open_registry(registry_uri).manifest(done["status"]["engine"]["digest"])
