"""The chart's two operator replicas (fixtures: helm_release, replicaCount 2) on the real node
local-0: one leads (it holds the Lease and reconciles), the other stands by. The leader's process
SIGKILLed (from this machine, which is local-0: a crash, so nothing hands the Lease back) leaves
the Lease to the standby within the lease's timings, and a model applied meanwhile is compiled
once and becomes Ready. A clean stop (the pod deleted with its grace period) hands the Lease back
at once.

The model is the sample's real classifier, compiled for real on local-0 (OpenVINO FP32 only: a
short compile) and served by Triton. Takeover times are printed in the run's measured summary.
"""

import copy
import os
import signal
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from tensorkiln.builders.labels import COMPILE_JOB
from tensorkiln_api import GROUP, VERSION

from . import helm_release
from .helm_release import is_ready
from .helpers import wait_for

registry_volume, release, tools = helm_release.registry_volume, helm_release.release, helm_release.tools
pytestmark = pytest.mark.cluster
SAMPLE = yaml.safe_load((Path(__file__).resolve().parents[2] / "manifests/samples/ocr-cls-cpu.yaml").read_text())
# The chart's defaults: a SIGKILLed leader is replaced within lease + 2 x retry = 12 s of its last renewal.
LEASE_SECONDS, RETRY_SECONDS = 8, 2


@pytest.fixture
def chart_values() -> dict:
    return {"replicaCount": 2}


def operator_pods(core, namespace, release) -> list[client.V1Pod]:
    selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=operator"
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def holder(coordination, namespace, lease) -> str | None:
    """The pod that holds the Lease (its identity is `<pod>/<start time>/<random>`), None when none does."""
    try:
        identity = coordination.read_namespaced_lease(lease, namespace).spec.holder_identity
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise
    return identity.split("/")[0] if identity else None


def leading_metric(pod: client.V1Pod) -> float:
    with urllib.request.urlopen(f"http://{pod.status.pod_ip}:9090/metrics", timeout=5) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith("tensorkiln_operator_leading "):
                return float(line.split()[1])
    raise AssertionError(f"{pod.metadata.name} exports no tensorkiln_operator_leading")


def operator_process(pod: str) -> int:
    """The host PID of the operator process of `pod` (its POD_ID environment variable names the pod)."""
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and f"POD_ID={pod}\0".encode() in (proc / "environ").read_bytes():
                if b"tensorkiln-operator" in (proc / "cmdline").read_bytes():
                    return int(proc.name)
        except OSError:  # gone meanwhile, or not ours to read
            continue
    raise AssertionError(f"no operator process of pod {pod} on this machine")


def real_model(namespace: str, name: str) -> dict:
    spec = copy.deepcopy(SAMPLE["spec"])
    spec.pop("slo")
    spec["compile"] = {
        "precisions": ["FP32"],
        "compilers": {"cpu": ["OpenVINO"]},
        "accuracy": {"minTop1Agreement": 1.0},
        "objective": {"metric": "LatencyP95", "batchSize": 8},
        "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}, "limits": {"memory": "6Gi"}},
    }
    spec["serving"] = {"resources": {"requests": {"cpu": "100m", "memory": "256Mi"}}}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceModel",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}  # fmt: skip


def ready(custom, namespace, name) -> bool:
    model = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", name)
    conditions = (model.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def until_changed(read, old, timeout: float) -> str:
    """Poll `read()` every 0.1 s until it is a value other than `old` (or None)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        value = read()
        if value not in (old, None):
            return value
        time.sleep(0.1)
    pytest.fail(f"the Lease still names {old!r} (or none) after {timeout} s")


def test_the_standby_takes_over_from_a_killed_leader_and_a_model_applied_meanwhile_compiles_once(
    alone, api, namespace, registry_volume, release, measured
):
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    coordination = client.CoordinationV1Api(api)
    lease = f"{release}-tensorkiln"
    wait_for(lambda: len([p for p in operator_pods(core, namespace, release) if is_ready(p)]) == 2, timeout=240,
             what="both operator replicas Ready (the standby serves /healthz too)")  # fmt: skip
    leader = wait_for(lambda: holder(coordination, namespace, lease), timeout=60, what="a replica to take the Lease")
    pods = {p.metadata.name: p for p in operator_pods(core, namespace, release)}
    (standby,) = set(pods) - {leader}
    assert wait_for(lambda: leading_metric(pods[leader]) == 1, timeout=30, what="the leader's gauge at 1")
    assert leading_metric(pods[standby]) == 0

    # SIGKILL, as a crash or an OOM kill: nothing hands the Lease back. (Deleting the pod, even with
    # no grace period, lets the kubelet stop the container with SIGTERM first: a clean stop.)
    os.kill(operator_process(leader), signal.SIGKILL)
    killed = time.monotonic()
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", real_model(namespace, "cls"))
    new_leader = until_changed(lambda: holder(coordination, namespace, lease), leader, timeout=60)
    takeover = time.monotonic() - killed
    assert new_leader == standby, f"the Lease went to {new_leader}, not the standby {standby}"
    measured(f"leader SIGKILLed -> standby leads: {takeover:.1f} s (lease {LEASE_SECONDS} s, retry {RETRY_SECONDS} s)")
    assert takeover < LEASE_SECONDS + 2 * RETRY_SECONDS + 3, f"takeover took {takeover:.1f} s"

    wait_for(lambda: ready(custom, namespace, "cls"), timeout=420, interval=2, what="the model Ready")
    measured(f"model applied at the kill -> Ready under the new leader: {time.monotonic() - killed:.0f} s")
    compile_jobs = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "compilejobs")["items"]
    assert len(compile_jobs) == 1, [c["metadata"]["name"] for c in compile_jobs]
    jobs = client.BatchV1Api(api).list_namespaced_job(namespace, label_selector=COMPILE_JOB).items
    assert [j.metadata.name for j in jobs] == [compile_jobs[0]["status"]["jobName"]]  # no duplicate compile

    # A clean stop (a rollout, a drain): the leader hands the Lease back; the other pod (its
    # container restarted after the kill, a standby by now) leads within a retry period or so.
    wait_for(lambda: len([p for p in operator_pods(core, namespace, release) if is_ready(p)]) == 2, timeout=240,
             what="the killed container restarted and Ready")  # fmt: skip
    core.delete_namespaced_pod(new_leader, namespace)
    stopped = time.monotonic()
    until_changed(lambda: holder(coordination, namespace, lease), new_leader, timeout=60)
    handover = time.monotonic() - stopped
    measured(f"leader stopped cleanly -> next leads: {handover:.1f} s")
    assert handover < LEASE_SECONDS, f"a clean stop took {handover:.1f} s to hand over: the Lease was not released"
