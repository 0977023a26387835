"""A compile pod over its memory limit on local-0 is OOM-killed by the kernel: every attempt
reports OOMKilled / exit 137 as a kubelet does, the Job's retry budget (spec.retries) is honoured,
and the CompileJob fails naming OOMKilled.

local-0's agent puts a container with `resources.limits.memory` in a memory cgroup of that limit
(tensorkiln_local/node/cgroups.py); the kernel's memcg OOM killer does the killing, nothing here
sends a signal. Where the node has no memory cgroups it says so (condition MemoryLimitsEnforced
False, with the reason) and this test is skipped with that reason.

An InferenceModel has no field for the compiler's resources (CPU compiles get
builders.compilejob.DEFAULT_RESOURCES, with no limit), so the test creates the CompileJob itself:
the one the operator would build for `real_model` (build_compile_job), with
spec.hardware.resources given a 64Mi limit, and no owner (an InferenceModel would put its own
resources back). The compiler loads onnx, onnxruntime and OpenVINO: far more than 64 MiB.
"""

import time

import pytest
from kubernetes import client
from tensorkiln.api import GROUP, VERSION
from tensorkiln.builders.compilejob import build_compile_job
from tensorkiln.controllers.inferencemodel import normalised_spec
from tensorkiln.settings import Settings
from tensorkiln_local.cluster import paths
from tensorkiln_local.node.node import MEMORY_LIMITS

from .support import condition, cpu_target, jobs_of, pods_of_job, real_model, wait_until

RETRIES = 1  # two attempts in all
LIMIT = "64Mi"


def memory_limits_enforced(api) -> dict:
    node = client.CoreV1Api(api).read_node("local-0")
    return next((c.to_dict() for c in node.status.conditions or [] if c.type == MEMORY_LIMITS), {})


def oom_log_lines(pods: list[str]) -> list[str]:
    """What local-0's agent logged about these pods' OOM kills (limit and peak)."""
    text = (paths.LOCALNODE_STATE / "agent.log").read_text(errors="replace")
    return [line for line in text.splitlines() if "OOMKilled" in line and any(f"/{p}:" in line for p in pods)]


def test_a_compile_over_its_memory_limit_is_oom_killed_on_every_attempt_and_fails_naming_it(
    api, namespace, start_operator, tmp_path
):
    enforced = memory_limits_enforced(api)
    if enforced.get("status") != "True":
        pytest.skip(f"local-0 does not enforce memory limits: {enforced.get('message', 'no condition')}")
    print(f"\nlocal-0: {enforced['message']}")

    registry_uri = f"file://{tmp_path}/registry"
    start_operator(namespace, registry_uri)
    model = real_model(namespace, "oom", variant=13, retries=RETRIES)
    unowned = {**model, "metadata": {**model["metadata"], "uid": ""}}  # never created: no uid to own it
    compile_job = build_compile_job(
        unowned, normalised_spec(model), cpu_target(api, model), Settings(registry_uri=registry_uri)
    )
    del compile_job["metadata"]["ownerReferences"]
    compile_job["spec"]["hardware"]["resources"] = {
        "requests": {"cpu": "1", "memory": LIMIT},
        "limits": {"memory": LIMIT},
    }
    name = compile_job["metadata"]["name"]
    started = time.monotonic()
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, "compilejobs", compile_job)

    def finished():
        found = client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, namespace, "compilejobs", name
        )
        return found if found.get("status", {}).get("phase") in ("Succeeded", "Failed") else None

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
    for line in oom_log_lines([p.metadata.name for p in pods]):
        print("agent:", line)

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
