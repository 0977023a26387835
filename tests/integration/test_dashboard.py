"""The Grafana dashboard against the local cluster's real Prometheus: every query parses and
evaluates, and every metric it names exists.

Template variables are replaced by a target Prometheus has seen (the last hour's Triton series)
or, when none, by placeholder values: the queries still parse and evaluate, to empty results.
The operator's own metrics (tensorkiln_*) are checked against the operator's metrics registry
(observability.metrics), not against what Prometheus scraped from the operator's pod: a labelled
counter has no series until its first event (a scale action, a registry lookup). This module runs
after the serving tests (conftest.RUN_LAST), whose Triton pods leave the series it reads.
"""

import pytest
import requests
from tensorkiln.observability import metrics
from tensorkiln_local import dashboard
from tensorkiln_local.cluster import prometheus

pytestmark = pytest.mark.cluster
WINDOWS = {"$__rate_interval": "1m", "$__range": "1h"}


def api(path: str, **params) -> dict:
    try:
        response = requests.get(f"{prometheus.url()}/api/v1/{path}", params=params, timeout=10)
    except requests.ConnectionError:
        pytest.fail(f"the local Prometheus does not answer at {prometheus.url()}: tensorkiln-local cluster up")
    body = response.json()
    assert response.status_code == 200 and body["status"] == "success", (path, params, body)
    return body["data"]


@pytest.fixture(scope="module")
def variables() -> dict[str, str]:
    """Template variables, and `time`: when that target was last scraped (its pods may be gone
    since, and Prometheus marks their series stale at once), so the panels are asked then."""
    last_seen = f"max_over_time(timestamp({dashboard.TRITON_SERIES})[1h:5s])"
    seen = api("query", query=f"max by (namespace, model, hardware_class) ({last_seen})")["result"]
    if seen:
        newest = max(seen, key=lambda series: float(series["value"][1]))
        found = {f"${name}": newest["metric"][name] for name in ("namespace", "model", "hardware_class")}
        return found | {"time": newest["value"][1]}
    return {"$namespace": "default", "$model": "none", "$hardware_class": "none", "time": None}


def substituted(expr: str, variables: dict[str, str]) -> str:
    # Longest first: $__rate_interval before $__range, $hardware_class whole.
    names = {name: value for name, value in {**WINDOWS, **variables}.items() if name.startswith("$")}
    for name, value in sorted(names.items(), key=lambda item: -len(item[0])):
        expr = expr.replace(name, value)
    assert "$" not in expr, expr
    return expr


def test_every_query_parses_and_evaluates(variables):
    exprs = dashboard.expressions(dashboard.build())
    assert len(exprs) > 15
    answered = 0
    for expr in exprs:
        at = {"time": variables["time"]} if variables["time"] else {}
        data = api("query", query=substituted(expr, variables), **at)  # a parse error is a 400 here
        assert data["resultType"] in ("vector", "scalar"), expr
        answered += bool(data["result"])
    # Prometheus holds Triton data for the target the variables name: some panels show it.
    if variables["$model"] != "none":
        assert answered >= 1


def test_every_metric_named_exists():
    known = set(api("label/__name__/values"))
    if not any(name.startswith("nv_inference_") for name in known):
        pytest.skip("this Prometheus has never scraped a Triton pod (run tests/integration/test_prometheus.py)")
    used = {name for expr in dashboard.expressions(dashboard.build()) for name in dashboard.metric_names(expr)}
    own = {name for name in used if name.startswith("tensorkiln_")}
    assert own <= metrics.NAMES, own - metrics.NAMES
    assert used - own <= known, sorted(used - own - known)
