"""The whole local cluster stopped while models compile, left down past their Jobs' deadline, and started
again, as after a machine that was shut down or suspended: every model compiles again and ends Ready.

How: `cluster.stop()` (`tensorkiln-local cluster stop`) stops every process of the cluster and keeps its
state: the control plane, the registry, kube-proxy, Prometheus and local-0, whose containers (the compile
pods', the operator's, Triton's) die with it. After more than the Jobs' activeDeadlineSeconds, `cluster up`
starts it again. The Job controller then finds each compile Job past its deadline and fails it
DeadlineExceeded, though its compiler ran for a few seconds only. That is the cluster's fault, not the
model's: the operator starts the compile again (CompileJob status.clusterRetries, reason
RetryingAfterClusterFault) instead of leaving it Failed, as it once did after a 4-hour pause.
"""

import subprocess
import sys
import time

from kubernetes import client
from tensorkiln_local.cluster import cluster, nodes

from .conftest import elapsed
from .support import compile_jobs, condition, create, get_model, pods_of_job, ready, real_model, wait_until

DEADLINE_SECONDS = 120  # spec.compile.deadlineSeconds: room for the compile itself (FP32 and INT8, tens of seconds)
DOWN_SECONDS = DEADLINE_SECONDS + 30  # past every Job's deadline, which counts from its start


def compiling(api, namespace: str, model: str) -> bool:
    """The model's compiler runs on local-0 now (its container started)."""
    cjs = compile_jobs(api, namespace, model)
    job = cjs and cjs[0].get("status", {}).get("jobName")
    for pod in pods_of_job(api, namespace, job) if job else []:
        compiler = next((s for s in pod.status.container_statuses or [] if s.name == "compiler"), None)
        if pod.spec.node_name == nodes.FIRST and compiler and compiler.state.running:
            return True
    return False


def test_a_cluster_stopped_mid_compile_past_the_jobs_deadline_compiles_again_when_resumed(api, namespace, operator):
    names = ("resumed-a", "resumed-b")
    for i, name in enumerate(names):
        model = real_model(namespace, name, variant=40 + i, int8=True)  # a key of its own: a real compile
        model["spec"]["compile"]["deadlineSeconds"] = DEADLINE_SECONDS
        create(api, model)
    for name in names:
        wait_until(lambda name=name: compiling(api, namespace, name), 300, f"{name}'s compiler running", interval=0.2)

    stopped = time.monotonic()
    cluster.stop()
    try:
        time.sleep(DOWN_SECONDS)
    finally:
        subprocess.run([sys.executable, "-m", "tensorkiln_local", "cluster", "up"], check=True)
    print(f"\nthe cluster was down {elapsed(stopped)}; Jobs' deadline {DEADLINE_SECONDS} s")

    resumed = time.monotonic()
    for name in names:
        wait_until(lambda name=name: ready(get_model(api, namespace, name)), 900, f"{name} Ready after the resume")
    print(f"every model Ready {elapsed(resumed)} after the resume")
    for name in names:
        (cj,) = compile_jobs(api, namespace, name)
        status = cj["status"]
        print(f"{name}: CompileJob {status['phase']}, clusterRetries {status.get('clusterRetries', 0)}")
        assert status["phase"] == "Succeeded" and condition(cj, "Compiled")["status"] == "True", status
        # It failed for the cluster's fault and was retried: a Job past its deadline is never the model's fault here.
        assert status.get("clusterRetries", 0) >= 1, status
        events = client.CoreV1Api(api).list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={cj['metadata']['name']}"
        )
        # The Event of the retry says why (status/compilejob.retrying_status), e.g. "retry 1 of 3: the Job's
        # deadline (120 s) passed and the compile pod is gone (...)": the Job controller deletes it on the return.
        retried = [e for e in events.items if e.message.startswith("retry 1 of")]
        assert retried, [(e.reason, e.message) for e in events.items]
        print(f"{name}: Event {retried[0].reason}: {retried[0].message}")
