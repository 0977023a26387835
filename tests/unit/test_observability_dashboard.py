"""The Grafana dashboard: the committed file is what the builder makes, and it runs the scaler's queries."""

import json

from tensorkiln.observability import metrics
from tensorkiln.scaling.metrics import queries
from tensorkiln_local import dashboard

BUILT = dashboard.build()


def test_committed_dashboard_is_the_built_one():
    assert dashboard.PATH.read_text() == dashboard.render(), (
        "charts/tensorkiln/dashboards/tensorkiln.json is stale: python -m tensorkiln_local.dashboard"
    )


def panels() -> list[dict]:
    return [p for p in BUILT["panels"] if p["type"] != "row"]


def test_target_panels_run_exactly_the_scalers_queries_for_the_variables():
    expected = queries("$namespace", "$model", "$hardware_class", "p95", "$__rate_interval")
    shown = {t["refId"]: t["expr"] for p in panels() for t in p["targets"] if t["refId"] in expected}
    assert shown == expected  # every figure the scaler reads, each as it reads it


def test_one_row_per_target_of_the_selected_model():
    row = BUILT["panels"][0]
    assert (row["type"], row["repeat"]) == ("row", "hardware_class")
    variables = {v["name"]: v for v in BUILT["templating"]["list"]}
    assert not variables["namespace"]["multi"] and not variables["model"]["multi"]
    assert variables["hardware_class"]["multi"] and variables["hardware_class"]["includeAll"]


def test_operator_metrics_used_are_the_operators():
    used = {name for expr in dashboard.expressions(BUILT) for name in dashboard.metric_names(expr)}
    own = {name for name in used if name.startswith("tensorkiln_")}
    assert own <= metrics.NAMES
    assert {"tensorkiln_compile_results_total", "tensorkiln_target_replicas", "tensorkiln_reconciles_total"} <= own


def test_panels_have_unique_ids_one_datasource_and_fit_the_grid():
    assert len({p["id"] for p in BUILT["panels"]}) == len(BUILT["panels"])
    for panel in panels():
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"])
    json.dumps(BUILT)


def test_metric_names_from_promql():
    expr = (
        'count(up{namespace="a",job=~"x|y"} == 1 and on (namespace, pod) nv_inference_count{model="m"}) '
        "/ sum by (le) (rate(foo_bucket[$__rate_interval] offset 5m)) > bool 0.5"
    )
    assert dashboard.metric_names(expr) == {"up", "nv_inference_count", "foo_bucket"}
