"""A compile pod over its memory limit on local-0 is OOM-killed by the kernel: every attempt
reports OOMKilled / exit 137 (the kubelet's report), the Job's retry budget (spec.retries) is
honoured, and the CompileJob fails naming OOMKilled. Raising the limit in the spec compiles it again:
a new Job (what shapes a Job is part of its name), and the CompileJob ends Succeeded.

The kubelet puts the container in a memory cgroup of its limit; the kernel's memcg OOM killer does
the killing, nothing here sends a signal. The limit comes from the spec (spec.compile.resources):
the compiler loads onnx, onnxruntime and OpenVINO, far more than 64 MiB.
"""

import time

from kubernetes import client
from tensorkiln_api import GROUP, VERSION

from .support import (
    COMPILE,
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
LIMIT = "64Mi"


def test_a_compile_over_its_memory_limit_is_oom_killed_on_every_attempt_and_fails_naming_it(api, namespace, operator):
    model = real_model(namespace, "oom", variant=13, retries=RETRIES)
    model["spec"]["compile"]["resources"] = {"requests": {"cpu": "1", "memory": LIMIT}, "limits": {"memory": LIMIT}}
    create(api, model)
    cj = wait_until(lambda: compile_jobs(api, namespace, "oom"), 120, "the CompileJob of oom")[0]
    name = cj["metadata"]["name"]
    started = time.monotonic()

    def finished():
        """The CompileJob once it has finished with its current spec."""
        found = client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, namespace, "compilejobs", name
        )
        status = found.get("status", {})
        current = status.get("observedGeneration") == found["metadata"]["generation"]
        return found if current and status.get("phase") in ("Succeeded", "Failed") else None

    failed = wait_until(finished, 300, f"CompileJob {name} to finish")
    status = failed["status"]
    print(
        f"finished after {time.monotonic() - started:.0f} s:",
        {k: status.get(k) for k in ("phase", "reason", "attempts")},
    )
    print("message:", status.get("message", "")[:300])

    pods = sorted(pods_of_job(api, namespace, status["jobName"]), key=lambda p: p.metadata.creation_timestamp)
    ends = []
    for pod in pods:
        (compiler,) = [s for s in pod.status.container_statuses if s.name == "compiler"]
        ended = compiler.state.terminated
        ends.append(
            {
                "pod": pod.metadata.name,
                "node": pod.spec.node_name,
                "limit": pod.spec.containers[0].resources.limits["memory"],
                "exitCode": ended.exit_code,
                "reason": ended.reason,
                "ran_s": (ended.finished_at - ended.started_at).total_seconds(),
            }
        )
    print("attempts:", ends)

    assert len(pods) == RETRIES + 1, ends
    assert all(
        (e["node"], e["limit"], e["exitCode"], e["reason"]) == ("local-0", LIMIT, 137, "OOMKilled") for e in ends
    )
    assert status["phase"] == "Failed"
    assert status["attempts"] == RETRIES + 1
    assert status["reason"] == "BackoffLimitExceeded"
    assert "OOMKilled" in status["message"] and "137" in status["message"], status["message"]
    assert condition(failed, "Compiled")["status"] == "False"
    assert "engine" not in status
    assert len(jobs_of(api, namespace, name)) == 1
    # The InferenceModel says it too: its compile for local-0's class failed, killed for memory.
    compiled = condition(get_model(api, namespace, "oom"), "Compiled")
    assert compiled["status"] == "False" and "OOMKilled" in compiled["message"], compiled

    # The fix: enough memory. The spec's new resources make a new Job, which compiles.
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "inferencemodels", "oom", {"spec": {"compile": {"resources": COMPILE}}}
    )
    generation = failed["metadata"]["generation"]
    wait_until(lambda: (done := finished()) and done["metadata"]["generation"] > generation, 600,
               f"CompileJob {name} to compile with the fixed limit")  # fmt: skip
    succeeded = finished()
    assert succeeded["status"]["phase"] == "Succeeded", succeeded["status"]
    assert succeeded["status"]["jobName"] != status["jobName"]
    assert [j.metadata.name for j in jobs_of(api, namespace, name)] == [succeeded["status"]["jobName"]]
    assert condition(succeeded, "Compiled")["status"] == "True"
