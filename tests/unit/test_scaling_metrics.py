"""The scaler's Prometheus queries, and observe() on responses recorded from the local cluster's
Prometheus scraping a real Triton (tests/data/prometheus, recorded by test_record_responses in
tests/integration/test_prometheus.py): busy under 8 clients, idle, after Triton's summary window
emptied, and a target with no pods."""

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import requests
from prometheus_api_client import PrometheusApiClientException
from tensorkiln.scaling.metrics import MetricsUnavailable, observe, queries

DATA = Path(__file__).resolve().parents[1] / "data" / "prometheus"


class Recorded:
    """Stands in for PrometheusConnect: custom_query answers from one recording."""

    url = "http://recorded"

    def __init__(self, name: str):
        recorded = json.loads((DATA / f"{name}.json").read_text())
        self.target, self.responses = recorded["target"], recorded["responses"]
        self.asked: list[str] = []

    def custom_query(self, query: str, params: dict | None = None) -> list[dict]:
        self.asked.append(query)
        return self.responses[query]["data"]["result"]  # what PrometheusConnect.custom_query returns

    def value(self, figure: str) -> float:
        """The recorded answer to one of queries()' figures."""
        (series,) = self.responses[queries(**self.target)[figure]]["data"]["result"]
        return float(series["value"][1])

    def observe(self):
        return observe(self, **self.target)


def test_queries_for_a_target():
    assert queries("serving", "ocr-cls.v2", "cpu-amd64-intel-avx512", "p95") == {
        "latency_ms": 'max(nv_inference_request_summary_us{model="ocr-cls.v2",namespace="serving",hardware_class="cpu-amd64-intel-avx512",quantile="0.95"}) / 1000',
        "latency_mean_ms": 'sum(rate(nv_inference_request_duration_us{model="ocr-cls.v2",namespace="serving",hardware_class="cpu-amd64-intel-avx512"}[30s])) / sum(rate(nv_inference_request_success{model="ocr-cls.v2",namespace="serving",hardware_class="cpu-amd64-intel-avx512"}[30s])) / 1000',
        "queue_ms": 'max(nv_inference_queue_summary_us{model="ocr-cls.v2",namespace="serving",hardware_class="cpu-amd64-intel-avx512",quantile="0.95"}) / 1000',
        "request_rate": 'sum(rate(nv_inference_request_success{model="ocr-cls.v2",namespace="serving",hardware_class="cpu-amd64-intel-avx512"}[30s]))',
        "recent_request_rate": 'sum(rate(nv_inference_request_success{model="ocr-cls.v2",namespace="serving",hardware_class="cpu-amd64-intel-avx512"}[10s]))',
        "failure_rate": 'sum(rate(nv_inference_request_failure{model="ocr-cls.v2",namespace="serving",hardware_class="cpu-amd64-intel-avx512"}[30s]))',
        "pending": 'sum(nv_inference_pending_request_count{model="ocr-cls.v2",namespace="serving",hardware_class="cpu-amd64-intel-avx512"})',
        "batch_size": 'sum(rate(nv_inference_count{model="ocr-cls.v2",namespace="serving",hardware_class="cpu-amd64-intel-avx512"}[30s])) / sum(rate(nv_inference_exec_count{model="ocr-cls.v2",namespace="serving",hardware_class="cpu-amd64-intel-avx512"}[30s]))',
        "service_ms": 'sum(rate(nv_inference_compute_infer_duration_us{model="ocr-cls.v2",namespace="serving",hardware_class="cpu-amd64-intel-avx512"}[30s])) / sum(rate(nv_inference_request_success{model="ocr-cls.v2",namespace="serving",hardware_class="cpu-amd64-intel-avx512"}[30s])) / 1000',
        "busy": 'sum(rate(nv_inference_compute_infer_duration_us{model="ocr-cls.v2",namespace="serving",hardware_class="cpu-amd64-intel-avx512"}[30s])) / 1e6 * sum(rate(nv_inference_exec_count{model="ocr-cls.v2",namespace="serving",hardware_class="cpu-amd64-intel-avx512"}[30s])) / sum(rate(nv_inference_request_success{model="ocr-cls.v2",namespace="serving",hardware_class="cpu-amd64-intel-avx512"}[30s]))',
        "ready_pods": 'count(up{namespace="serving",hardware_class="cpu-amd64-intel-avx512"} == 1 and on (namespace, pod) nv_inference_count{model="ocr-cls.v2",namespace="serving",hardware_class="cpu-amd64-intel-avx512"})',
    }


@pytest.mark.parametrize(("percentile", "quantile"), [("p50", "0.5"), ("p90", "0.9"), ("p95", "0.95"), ("p99", "0.99")])
def test_percentile_picks_the_summary_quantile_and_window_the_rates(percentile, quantile):
    promql = queries("ns", "m", "hc", percentile, window="2m", recent_window="20s")
    assert f'quantile="{quantile}"' in promql["latency_ms"] and f'quantile="{quantile}"' in promql["queue_ms"]
    assert all("[2m]" in promql[figure] for figure in ("latency_mean_ms", "request_rate", "failure_rate", "batch_size"))
    assert "[20s]" in promql["recent_request_rate"]


def test_label_values_are_quoted_and_escaped_never_matched_as_regexes():
    promql = queries("ns", 'a"b\\c', "hc", "p95")["pending"]
    assert promql == r'sum(nv_inference_pending_request_count{model="a\"b\\c",namespace="ns",hardware_class="hc"})'
    assert not any("=~" in text for text in queries("ns", "m.v1-x", "hc", "p99").values())


def test_busy_target_latency_from_the_worst_pods_summary():
    prom = Recorded("busy")
    seen = prom.observe()
    assert seen.latency_source == "summary-p95"
    assert seen.latency_ms == prom.value("latency_ms") > 0
    assert seen.queue_ms == prom.value("queue_ms")
    assert seen.request_rate == prom.value("request_rate") > 0 and seen.failure_rate == 0
    assert seen.recent_request_rate == prom.value("recent_request_rate") > 0  # 8 clients for 10 s and more
    assert seen.batch_size == prom.value("batch_size") > 1
    # One instance: executing at most all the time (the rest is the server's own per-request work).
    assert 0 < seen.busy == prom.value("busy") <= 1.05 and seen.service_ms == prom.value("service_ms") > 0
    assert seen.ready_pods == 1 and seen.pending == 0
    assert seen.at == datetime.fromtimestamp(prom.responses[prom.asked[0]]["data"]["result"][0]["value"][0], UTC)
    assert queries(**prom.target)["latency_mean_ms"] not in prom.asked  # the summary had data


def test_percentile_follows_the_slo():
    prom = Recorded("busy-p99")
    seen = prom.observe()
    assert seen.latency_source == "summary-p99" and seen.latency_ms == prom.value("latency_ms")
    assert seen.latency_ms > Recorded("busy").observe().latency_ms  # p99 above p95, same load


def test_mean_when_the_summary_has_no_data():
    prom = Recorded("summary-expired")  # Triton's summary window emptied; the 5m rate window still has the load
    seen = prom.observe()
    assert seen.latency_source == "mean"
    assert seen.latency_ms == prom.value("latency_mean_ms") > 0
    assert seen.queue_ms is None and seen.request_rate > 0


def test_idle_target_has_no_latency_but_is_observed():
    seen = Recorded("idle").observe()
    assert (seen.latency_ms, seen.latency_source, seen.queue_ms, seen.batch_size) == (None, None, None, None)
    assert (seen.request_rate, seen.failure_rate, seen.pending, seen.ready_pods) == (0, 0, 0, 1)


def test_no_data_for_a_target_prometheus_never_scraped():
    prom = Recorded("unknown-target")
    assert prom.observe() is None
    assert prom.asked == [queries(**prom.target)["request_rate"]]


class Unreachable:
    url = "http://127.0.0.1:9"

    def __init__(self, error: Exception):
        self.error = error

    def custom_query(self, query, params=None):
        raise self.error


@pytest.mark.parametrize(
    "error",
    [
        requests.ConnectionError("[Errno 111] Connection refused"),
        requests.ReadTimeout("read timed out"),
        PrometheusApiClientException("HTTP Status Code 503 (b'Service Unavailable')"),
    ],
)
def test_unreachable_prometheus_is_an_error_not_missing_data(error):
    with pytest.raises(MetricsUnavailable, match=r"Prometheus at http://127\.0\.0\.1:9: ") as raised:
        observe(Unreachable(error), "ns", "m", "hc", "p95")
    assert raised.value.__cause__ is error
