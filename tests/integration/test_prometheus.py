"""The local cluster's Prometheus scraping a real Triton on local-0, read as the SLO scaler reads it.

The operator compiles the OCR classifier sample on local-0 (FP32 with onnxruntime only: one quick
compile) and rolls out Triton; Prometheus, started by `tensorkiln-local cluster up`, finds the pod by its
annotations. Under load, tensorkiln.scaling.metrics must see that pod's latency, rate and batches.

`TENSORKILN_RECORD_PROMETHEUS=tests/data/prometheus pytest tests/integration/test_prometheus.py`
also records the responses the unit tests replay (test_record_responses, about two minutes).
"""

import copy
import json
import os
import socket
import time
import uuid
from pathlib import Path

import pytest
import requests
from kubernetes import client
from tensorkiln.builders import labels
from tensorkiln.scaling.metrics import MetricsUnavailable, connect, observe, queries
from tensorkiln_api import GROUP, VERSION
from tensorkiln_client.triton import infer_on, new_connection, service_address, until_routed
from tensorkiln_local import install
from tensorkiln_local.cluster import prometheus
from tensorkiln_local.cluster.ocr_models import CLS

from .helpers import wait_for
from .test_serving_local import NAME, SAMPLE, Load, rolled_out

pytestmark = pytest.mark.cluster
RECORD = os.environ.get("TENSORKILN_RECORD_PROMETHEUS")


@pytest.fixture(scope="module")
def triton(api, operator):
    """The model served on local-0, in a namespace of its own; yields (namespace, the Triton pod)."""
    core = client.CoreV1Api(api)
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    install.create_namespace(core, namespace)  # with the registry claim compile and Triton pods mount
    model = copy.deepcopy(SAMPLE)
    model["metadata"] = {"name": NAME, "namespace": namespace}
    model["spec"]["compile"] = {
        "precisions": ["FP32"],
        "compilers": {"cpu": ["OnnxRuntime"]},
        "objective": SAMPLE["spec"]["compile"]["objective"],
    }
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", model)
    wait_for(lambda: rolled_out(api, namespace), timeout=600, interval=3, what="compile, rollout and readiness")
    # The load goes through the model's Service: first until kube-proxy routes its ClusterIP (a cold CI run
    # started the load before it did, and 416 requests failed).
    address = service_address(api, namespace, NAME)
    until_routed(lambda: infer_on(new_connection(address), NAME, {"x": CLS.samples(1)}))
    (pod,) = core.list_namespaced_pod(namespace, label_selector="app.kubernetes.io/component=serving").items
    yield namespace, pod
    install.delete_namespace(core, namespace)


def summary_seen(prom, namespace: str, hardware_class: str, percentile: str = "p95", window: str = "30s"):
    seen = observe(prom, namespace, NAME, hardware_class, percentile, window=window)
    return seen if seen and seen.latency_source == f"summary-{percentile}" and seen.request_rate > 0 else None


WINDOW_S = 10  # the rate window read under load: five scrapes (2 s apart), and the load lasts a little longer


def within(load_since: float, window_s: float, seen):
    """`seen` if its rate window lies wholly after `load_since` (a time.time()), else None. A rate over
    [window] at instant t reads the scrapes after t - window: the first reading under load is mostly of the time
    before it (CI's first one, 2.1 s in, had batch size 1.0 with 8 clients), and says nothing of the load."""
    return seen if seen and seen.at.timestamp() - window_s >= load_since else None


def test_observe_sees_the_triton_pod_under_load(api, triton):
    namespace, pod = triton
    hardware_class = pod.metadata.labels[labels.HARDWARE_CLASS]
    prom = connect(prometheus.url())
    with Load(api, namespace, threads=8) as load:
        wait_for(lambda: load.whole, timeout=30, interval=0.1, what="every client of the load answered")
        whole_since = time.time()
        seen = wait_for(
            lambda: within(whole_since, WINDOW_S, summary_seen(prom, namespace, hardware_class, window=f"{WINDOW_S}s")),
            timeout=WINDOW_S + 30,
            what=f"Triton's figures over a {WINDOW_S} s window within the load",
        )
        print(f"\nobservation {time.time() - whole_since:.1f} s into the whole load: {seen}")
    assert load.failed == 0, load.errors[:3]
    assert 0 < seen.latency_ms < 10_000 and seen.queue_ms is not None
    assert seen.batch_size > 1  # 8 clients: the dynamic batcher formed batches
    assert seen.ready_pods == 1 and seen.failure_rate == 0

    (series,) = prom.custom_query(f'nv_inference_request_success{{namespace="{namespace}"}}')
    assert series["metric"] == {
        "__name__": "nv_inference_request_success",
        "model": NAME,
        "version": "1",
        "namespace": namespace,
        "pod": pod.metadata.name,
        "hardware_class": hardware_class,
        "job": "kubernetes-pods",
        "instance": f"{pod.status.pod_ip}:8002",
    }
    assert observe(prom, namespace, NAME, "no-such-class", "p95") is None


@pytest.fixture
def silent_port():
    """A port that accepts connections and never answers, as a hung server does."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]


def test_metrics_unavailable_when_prometheus_does_not_answer(silent_port):
    with socket.socket() as probe:  # a port nothing listens on: a stopped server
        probe.bind(("127.0.0.1", 0))
        stopped = probe.getsockname()[1]
    for port in (stopped, silent_port):
        with pytest.raises(MetricsUnavailable, match=f"Prometheus at http://127.0.0.1:{port}"):
            observe(connect(f"http://127.0.0.1:{port}", timeout_s=1), "default", NAME, "cpu", "p95")


def record(name: str, namespace: str, hardware_class: str, percentile: str, window: str) -> None:
    """Prometheus's answers to every query of one target, at one instant, for the unit tests."""
    target = {"namespace": namespace, "model": NAME, "hardware_class": hardware_class, "percentile": percentile}
    at = f"{time.time():.3f}"
    responses = {
        promql: requests.get(f"{prometheus.url()}/api/v1/query", params={"query": promql, "time": at}, timeout=5).json()
        for promql in queries(**target, window=window).values()
    }
    failed = {promql: answer for promql, answer in responses.items() if answer.get("status") != "success"}
    assert not failed, failed  # a recording of errors would replay as Prometheus's answers
    document = {"target": {**target, "window": window}, "responses": responses}
    (Path(RECORD) / f"{name}.json").write_text(json.dumps(document, indent=1) + "\n")


@pytest.mark.skipif(not RECORD, reason="set TENSORKILN_RECORD_PROMETHEUS=DIR to record the unit tests' responses")
def test_record_responses(api, triton):
    namespace, pod = triton
    hardware_class = pod.metadata.labels[labels.HARDWARE_CLASS]
    prom = connect(prometheus.url())
    with Load(api, namespace, threads=8) as load:
        wait_for(lambda: load.whole, timeout=30, interval=0.1, what="every client of the load answered")
        whole_since = time.time()
        wait_for(
            lambda: within(whole_since, 30, summary_seen(prom, namespace, hardware_class, "p99")),
            timeout=60,
            what="Triton's figures over a 30 s window within the load",
        )
        record("busy", namespace, hardware_class, "p95", "30s")
        record("busy-p99", namespace, hardware_class, "p99", "30s")
        # What each recording stands for holds when it is made: under load, the summary's quantile.
        assert observe(prom, namespace, NAME, hardware_class, "p95").latency_source == "summary-p95"

    def summary_expired():  # Triton keeps a summary's observations for about a minute
        seen = observe(prom, namespace, NAME, hardware_class, "p95", window="5m")
        return seen if seen and seen.latency_source == "mean" else None

    wait_for(summary_expired, timeout=180, interval=2, what="Triton's summary window to empty")
    record("summary-expired", namespace, hardware_class, "p95", "5m")
    record("idle", namespace, hardware_class, "p95", "30s")
    record("unknown-target", namespace, "no-such-class", "p95", "30s")
    assert observe(prom, namespace, NAME, "no-such-class", "p95") is None
