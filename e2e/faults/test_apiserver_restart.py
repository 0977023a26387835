"""The kube-apiserver killed mid-reconcile and restarted: the operator's watches recover (an
object created after the restart is reconciled), its resync loop lives on, and local-0's agent
and Prometheus survive (or `tensorkiln-local cluster up` brings them back).

How: SIGKILL the kube-apiserver process kwokctl started (its pid file), leave it down a while,
then `kwokctl start cluster`, which starts only the components that are not running. etcd and
the other components keep running. The whole cluster is affected, so this runs under the
cluster lock like the rest of the suite.
"""

import os
import signal
import subprocess
import sys
import time

from kubernetes import client
from tensorkiln_local.cluster import cluster, nodes, paths, processes, prometheus

from .support import create, get_model, healthz, metric, publish_simulated, ready, simulated_model, wait_until

APISERVER_PIDFILE = paths.KWOK_CLUSTER_DIR / "pids" / "kube-apiserver.pid"
DOWN_SECONDS = 15


def api_answers() -> bool:
    return cluster._api_ready()


def kill_apiserver() -> int:
    pid = int(APISERVER_PIDFILE.read_text())
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not os.path.exists(f"/proc/{pid}") or _zombie(pid), 30, "kube-apiserver to die", interval=0.2)
    return pid


def _zombie(pid: int) -> bool:
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def start_apiserver() -> None:
    subprocess.run(
        [str(paths.BIN_DIR / "kwokctl"), "--name", paths.CLUSTER_NAME, "start", "cluster", "--wait", "120s"],
        check=True,
        capture_output=True,
        text=True,
    )
    wait_until(api_answers, 120, "kube-apiserver to answer again", interval=1)


def test_apiserver_restarted_mid_reconcile_watches_recover_and_new_objects_converge(
    api, namespace, operator, rng, tmp_path, registry_uri
):
    before, during, after = (
        simulated_model(namespace, n, variant=30 + i) for i, n in enumerate(("before", "during", "after"))
    )
    for model in (before, during, after):
        publish_simulated(api, registry_uri, model, tmp_path / "engines")
    op = operator
    wait_until(lambda: healthz(op), 60, "the operator's /healthz")
    create(api, before)
    wait_until(lambda: ready(get_model(api, namespace, "before")), 180, "'before' Ready")

    kubelet = nodes.RealNode(nodes.FIRST).pidfile("kubelet")
    agent, prom = processes.pid_of(kubelet), processes.pid_of(prometheus.PIDFILE)
    incarnation, health = op.incarnation(), op.url("health")  # its pod, its container's restarts; /healthz
    errors_before = metric(op, "tensorkiln_watch_reconnects_total", reason="error")
    create(api, during)
    time.sleep(rng.uniform(0.2, 1.5))  # the operator is reconciling 'during' now
    killed_at = time.monotonic()
    pid = kill_apiserver()
    try:
        assert not api_answers()
        time.sleep(DOWN_SECONDS)
        assert healthz(op, health) is not None, "the operator stopped answering while the API server was down"
    finally:
        start_apiserver()
    print(f"\nkube-apiserver (pid {pid}) down for {time.monotonic() - killed_at:.0f} s, restarted by kwokctl")

    survived = {
        "local-0's kubelet": processes.pid_of(kubelet) == agent,
        "prometheus": processes.pid_of(prometheus.PIDFILE) == prom,
    }
    print("survived the restart:", survived)
    if not all(survived.values()):
        subprocess.run([sys.executable, "-m", "tensorkiln_local", "cluster", "up"], check=True)
    assert processes.pid_of(kubelet) and processes.pid_of(prometheus.PIDFILE)

    restarted = time.monotonic()
    create(api, after)  # reconciled only if the operator's watches came back
    for name in ("during", "after"):
        wait_until(lambda name=name: ready(get_model(api, namespace, name)), 240, f"'{name}' Ready after the restart")
    print(f"'during' and 'after' Ready {time.monotonic() - restarted:.0f} s after the restart")
    assert ready(get_model(api, namespace, "before"))
    assert op.incarnation() == incarnation, "the operator restarted (or was replaced) after the API server's restart"

    # The resync loop lived through it (it used to die on the first refused listing).
    resync = wait_until(
        lambda: (h := healthz(op)) and (ago := h["resync"].get("lastPassSecondsAgo")) is not None and ago < 15 and h,
        60,
        "a fresh resync pass in /healthz",
    )
    print(
        "healthz:",
        resync,
        "; watch errors counted:",
        metric(op, "tensorkiln_watch_reconnects_total", reason="error") - errors_before,
    )
    node = client.CoreV1Api(api).read_node("local-0")
    assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
