"""One serving target's latency and load, from Prometheus scraping its Triton pods.

Series carry Triton's own labels `model` (Triton's model name: the InferenceModel's name) and
`version`, and the scrape's `namespace`, `pod` and `hardware_class` (the pod label
tensorkiln.dev/hardware-class; see RELABEL_CONFIGS in tensorkiln_local.cluster.prometheus). A target is
(namespace, model, hardware_class).

Triton's latency summaries (`--metrics-config summary_latencies=true`) are per pod, over a
sliding window of about a minute kept by Triton, and quantiles of several pods cannot be merged
exactly (there is no histogram): the latency is the worst pod's quantile. Where the summary has no
data (summaries off, a response cache, or no request in Triton's window) the mean from the
counters over the query window is used, and `latency_source` says which.
"""

import json
import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from tensorkiln_api import Percentile
from urllib3.util.retry import Retry

IDLE_RATE = 0.05  # requests/s below which a target counts as idle


class MetricsUnavailable(Exception):
    """Prometheus could not be asked or did not answer: hold replicas, never act on missing data."""


@dataclass(frozen=True)
class Observation:
    """A target's figures at one instant; None fields: no request completed in the window."""

    latency_ms: float | None
    latency_source: str | None  # "summary-p95" (worst pod's quantile; per percentile) or "mean"
    queue_ms: float | None  # worst pod's queue-time quantile at the same percentile
    request_rate: float  # successful requests per second, all pods
    # The same over the recent window (Knative's panic window): a step in the load shows there first.
    # None: too few scrapes in that window to take a rate (a scrape interval over half of it).
    recent_request_rate: float | None
    failure_rate: float  # failed requests per second, all pods
    pending: float  # requests queued or executing now, all pods
    batch_size: float | None  # mean inferences per execution: what the dynamic batcher formed
    service_ms: float | None  # execution time per request, queueing excluded
    busy: float | None  # model-instance seconds per second spent executing, all pods
    ready_pods: int  # pods whose metrics Prometheus scraped at the last attempt
    at: datetime  # the instant Prometheus evaluated the queries at

    @property
    def idle(self) -> bool:
        """No traffic: nothing waits, whatever quantile Triton's summary still holds from earlier load."""
        return self.request_rate < IDLE_RATE or self.latency_ms is None


@dataclass(frozen=True)
class Unread:
    """Why a target has no figures: the scaler holds its replicas and says why (SLOMetricsAvailable)."""

    reason: str
    message: str

    @property
    def metrics(self) -> tuple[bool, str, str]:
        return (False, self.reason, self.message)


def _selector(**labels: str) -> str:
    """Exact-match (`=`, never `=~`) label matchers; values quoted and escaped as PromQL strings."""
    return "{" + ",".join(f"{name}={json.dumps(value, ensure_ascii=False)}" for name, value in labels.items()) + "}"


def queries(
    namespace: str, model: str, hardware_class: str, percentile: str, window: str = "30s", recent_window: str = "10s"
) -> dict[str, str]:
    """PromQL per figure for one target; `window` is the rate window (at least four scrape intervals),
    `recent_window` the short one the request rate is also read over."""
    target = {"model": model, "namespace": namespace, "hardware_class": hardware_class}
    series = _selector(**target)
    quantile = _selector(**target, quantile=Percentile(percentile).quantile)
    scraped = _selector(namespace=namespace, hardware_class=hardware_class)  # `up` has no model label

    def rate(metric: str, over: str = window) -> str:
        return f"sum(rate({metric}{series}[{over}]))"

    success = rate("nv_inference_request_success")
    compute = rate("nv_inference_compute_infer_duration_us")  # each request counts its execution's time
    return {
        "latency_ms": f"max(nv_inference_request_summary_us{quantile}) / 1000",
        "latency_mean_ms": f"{rate('nv_inference_request_duration_us')} / {success} / 1000",
        "queue_ms": f"max(nv_inference_queue_summary_us{quantile}) / 1000",
        "request_rate": success,
        "recent_request_rate": rate("nv_inference_request_success", recent_window),
        "failure_rate": rate("nv_inference_request_failure"),
        "pending": f"sum(nv_inference_pending_request_count{series})",
        "batch_size": f"{rate('nv_inference_count')} / {rate('nv_inference_exec_count')}",
        "service_ms": f"{compute} / {success} / 1000",
        # Executions' time once each: requests' compute time times executions per request.
        "busy": f"{compute} / 1e6 * {rate('nv_inference_exec_count')} / {success}",
        "ready_pods": f"count(up{scraped} == 1 and on (namespace, pod) nv_inference_count{series})",
    }


def connect(url: str, timeout_s: float = 5.0) -> PrometheusConnect:
    """A client that gives up after one retry (the library's default retries with backoff)."""
    return PrometheusConnect(
        url, timeout=timeout_s, retry=Retry(total=1, backoff_factor=0.2, status_forcelist=[502, 503, 504])
    )


def _query(prom: PrometheusConnect, promql: str, at: float) -> list[dict]:
    try:
        return prom.custom_query(promql, params={"time": f"{at:.3f}"})
    except (requests.RequestException, PrometheusApiClientException) as error:
        raise MetricsUnavailable(f"Prometheus at {prom.url}: {error}") from error


def _value(result: list[dict]) -> float | None:
    """The value of a one-series result; None when empty or NaN (no observations: 0/0, empty summary)."""
    if not result:
        return None
    value = float(result[0]["value"][1])
    return value if math.isfinite(value) else None


def observe(
    prom: PrometheusConnect,
    namespace: str,
    model: str,
    hardware_class: str,
    percentile: str,
    window: str = "30s",
    recent_window: str = "10s",
) -> Observation | None:
    """The target's figures now; None when Prometheus holds no series of it (never scraped, or every
    pod's scrape failing). Raises MetricsUnavailable when Prometheus cannot be asked."""
    promql = queries(namespace, model, hardware_class, percentile, window, recent_window)
    at = time.time()  # every query at one instant

    def value(name: str) -> float | None:
        return _value(_query(prom, promql[name], at))

    rate = _query(prom, promql["request_rate"], at)
    if not rate:
        return None
    latency, source = value("latency_ms"), f"summary-{percentile}"
    if latency is None:
        latency, source = value("latency_mean_ms"), "mean"
    return Observation(
        latency_ms=latency,
        latency_source=source if latency is not None else None,
        queue_ms=value("queue_ms"),
        request_rate=_value(rate) or 0.0,
        recent_request_rate=value("recent_request_rate"),
        failure_rate=value("failure_rate") or 0.0,
        pending=value("pending") or 0.0,
        batch_size=value("batch_size"),
        service_ms=value("service_ms"),
        busy=value("busy"),
        ready_pods=int(value("ready_pods") or 0),
        at=datetime.fromtimestamp(rate[0]["value"][0], UTC),
    )
