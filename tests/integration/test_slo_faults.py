"""SLO scaling under faults, on local-0 with the SIMULATED fixed-service-time engine
(tensorkiln_local.cluster.slo_workloads.SIMULATED): Prometheus killed mid-run, a Triton container
killed under load, the operator killed mid-scale."""

import re
import threading
import time

import pytest
from kubernetes import client
from tensorkiln_local.cluster import nodes, prometheus
from tensorkiln_local.cluster.slo_workloads import SIMULATED, deploy
from tensorkiln_local.load.loadgen import OpenLoopLoad, Phase

from .helpers import wait_for
from .workloads import condition, model_object, scale_events

pytestmark = [pytest.mark.cluster, pytest.mark.serving]
NAME = SIMULATED.name
TARGET_MS = SIMULATED.slo["targetMilliseconds"]


class BackgroundLoad:
    """Open-loop load at a fixed rate in a thread, for as long as the block runs (at most `seconds`)."""

    def __init__(self, api, namespace, rate: float, seconds: float = 600):
        self.load = OpenLoopLoad(api, namespace, NAME, NAME, SIMULATED.inputs(), timeout_s=5)
        self._thread = threading.Thread(target=self.load.run, args=([Phase("steady", rate, seconds)],), daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *_):
        self.load.stop()
        self._thread.join(timeout=30)

    def since(self, seconds_ago: float):
        now = self.load.elapsed()
        return [r for r in list(self.load.results) if r.at >= now - seconds_ago]


def replicas(api, namespace, deployment) -> int:
    return client.AppsV1Api(api).read_namespaced_deployment(deployment, namespace).spec.replicas


def metrics_available(api, namespace):
    return condition(model_object(api, namespace, NAME), "SLOMetricsAvailable")


def test_prometheus_down_holds_replicas_and_says_so_then_recovers(api, operator, namespace, tmp_path):
    deployment = deploy(api, operator.registry_uri, namespace, SIMULATED, tmp_path, ready_within=180)
    try:
        with BackgroundLoad(api, namespace, rate=15):
            wait_for(lambda: metrics_available(api, namespace).get("status") == "True", timeout=90, what="metrics")
            before = replicas(api, namespace, deployment)
            prometheus.stop()
            down = wait_for(
                lambda: (c := metrics_available(api, namespace)).get("status") == "False" and c,
                timeout=60,
                what="SLOMetricsAvailable=False",
            )
            assert down["reason"] == "PrometheusUnavailable", down
            time.sleep(15)  # several resyncs without metrics
            assert replicas(api, namespace, deployment) == before  # held: never scaled on missing data
            assert condition(model_object(api, namespace, NAME), "SLOMet").get("status") == "Unknown"
            prometheus.start()
            wait_for(lambda: metrics_available(api, namespace).get("status") == "True", timeout=90, what="recovery")
    finally:
        prometheus.start()  # idempotent: whatever happened above, later tests get their Prometheus


def test_a_triton_container_killed_under_load_is_restarted_without_failed_requests_or_scaling(
    api, operator, namespace, tmp_path
):
    deployment = deploy(api, operator.registry_uri, namespace, SIMULATED, tmp_path, ready_within=180)
    core = client.CoreV1Api(api)
    # While one of the two replicas restarts, the other carries the whole load: keep it at 40% of
    # one replica's service-time bound, so that Triton's minute-long latency window stays under the
    # target however slow the machine is and "no scaling" is about the fault, not the load.
    rate = 0.4 * 1000 / SIMULATED.simulated_service_ms
    with BackgroundLoad(api, namespace, rate=rate) as load:
        time.sleep(20)
        before = replicas(api, namespace, deployment)
        pod = core.list_namespaced_pod(namespace).items[0]
        nodes.signal_container(pod, "triton", "SIGKILL")

        def restarted():
            status = core.read_namespaced_pod(pod.metadata.name, namespace).status
            triton = next(c for c in status.container_statuses if c.name == "triton")
            return triton.restart_count >= 1 and triton.ready

        wait_for(restarted, timeout=120, interval=2, what="the killed container restarted and ready")
        time.sleep(10)
        answered = load.since(60)
    failed = [r for r in answered if not r.ok]
    # The client retries over new connections after short pauses (loadgen.RETRY_PAUSES_S), as a
    # client's retry policy would, until kube-proxy withdraws the dead endpoint: nothing is lost.
    assert len(failed) <= len(answered) * 0.01, f"{len(failed)} of {len(answered)} failed"
    assert replicas(api, namespace, deployment) == before


def test_an_operator_killed_mid_scale_converges_without_repeating_an_action(api, operator, namespace, tmp_path):
    deployment = deploy(api, operator.registry_uri, namespace, SIMULATED, tmp_path, ready_within=180)
    with BackgroundLoad(api, namespace, rate=60):
        first = wait_for(lambda: scale_events(api, namespace, NAME), timeout=120, interval=0.5, what="a scale action")
        operator.kill()  # SIGKILL right after acting: the status may or may not record it
        time.sleep(2)
        operator.start()
        time.sleep(60)  # the restarted operator acts on the load for a minute

        def settled():
            # The load still runs, so an action may land between reading the Events and the
            # Deployment: take a reading in which the two agree.
            found = scale_events(api, namespace, NAME)
            moves = [tuple(map(int, re.search(r"(\d+) -> (\d+)", e.message).groups())) for e in found]
            return (found, moves) if moves and replicas(api, namespace, deployment) == moves[-1][1] else None

        events, moves = wait_for(settled, timeout=60, interval=1, what="replicas where the last action left them")
    assert first[0].reason == "ScaledUp" and moves, moves
    # Each action starts from where the previous one left replicas: none was repeated or lost.
    assert all(prev[1] == nxt[0] for prev, nxt in zip(moves, moves[1:])), moves
    assert max(to for _, to in moves) <= SIMULATED.slo["maxReplicas"]
