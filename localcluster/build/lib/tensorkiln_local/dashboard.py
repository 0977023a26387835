"""The Grafana dashboard (charts/tensorkiln/dashboards/tensorkiln.json), built from the queries the
SLO scaler itself runs (scaling.metrics.queries) with Grafana's template variables in place of
a target's namespace, model and hardware class, so the dashboard shows what the scaler sees.

`python -m tensorkiln_local.dashboard` rewrites the file; a unit test fails on drift.

Layout: variables `namespace` and `model` (one each) and `hardware_class` (several, all by
default); one row per selected hardware class (Grafana repeats it), that is one per target of
the InferenceModel, with p95 latency against the SLO target, replicas, request rate, queue time,
batch size; a row of the model's classes side by side under placement LeastCost (cost per hour,
share of the load, capacity per replica: the operator's gauges of its status); then a row of the
operator's own metrics (observability.metrics): compile results, scale actions, reconciles,
registry hit rate and watch reconnects. The operator's series need the operator scraped (its
pod's prometheus.io/* annotations, port TENSORKILN_METRICS_PORT).
"""

import json
import re
import sys

from tensorkiln.scaling.metrics import queries

from tensorkiln_local.cluster import paths

PATH = paths.CHART_DIR / "dashboards" / "tensorkiln.json"
PERCENTILE = "p95"
VARIABLES = {"namespace": "$namespace", "model": "$model", "hardware_class": "$hardware_class"}
RATE_WINDOW = "$__rate_interval"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Series every serving Triton pod exports, with all three target labels (the variables read them).
TRITON_SERIES = "nv_inference_count"


def target_queries() -> dict[str, str]:
    """The scaler's queries for the target the variables select."""
    return queries(**VARIABLES, percentile=PERCENTILE, window=RATE_WINDOW)


def _selector(*names: str) -> str:
    return "{" + ",".join(f'{name}="{VARIABLES[name]}"' for name in names) + "}"


def _target(ref_id: str, expr: str, legend: str, instant: bool = False) -> dict:
    return {
        "refId": ref_id,
        "datasource": DATASOURCE,
        "expr": expr,
        "legendFormat": legend,
        "range": not instant,
        "instant": instant,
    }


TIMESERIES_OPTIONS = {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}}
BARGAUGE_OPTIONS = {
    "displayMode": "basic",
    "orientation": "horizontal",
    "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
}


def _panel(title: str, unit: str, targets: list[dict], description: str, kind: str = "timeseries") -> dict:
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": {"unit": unit, "min": 0}, "overrides": []},
        "options": BARGAUGE_OPTIONS if kind == "bargauge" else TIMESERIES_OPTIONS,
        "targets": targets,
        "gridPos": {"w": 8, "h": 8},
    }


def _target_panels() -> list[dict]:
    q = target_queries()
    own = _selector("namespace", "model", "hardware_class")
    return [
        _panel(
            f"{PERCENTILE} latency against the SLO target",
            "ms",
            [
                _target("latency_ms", q["latency_ms"], f"{PERCENTILE} (worst pod)"),
                _target("latency_mean_ms", q["latency_mean_ms"], "mean"),
                _target("slo_target", f"max(tensorkiln_slo_target_milliseconds{own})", "SLO target"),
            ],
            "Triton's per-pod latency summary at the percentile, worst pod (quantiles cannot be merged); "
            "the mean from counters; the InferenceModel's spec.slo.targetMilliseconds.",
        ),
        _panel(
            "Replicas",
            "short",
            [
                _target("replicas", f"max(tensorkiln_target_replicas{own})", "replicas (status)"),
                _target("ready_replicas", f"max(tensorkiln_target_ready_replicas{own})", "ready (status)"),
                _target("ready_pods", q["ready_pods"], "Triton pods scraped"),
            ],
            "Replicas and ready replicas the operator reports in status; Triton pods Prometheus scrapes.",
        ),
        _panel(
            "Request rate",
            "reqps",
            [
                _target("request_rate", q["request_rate"], "succeeded"),
                _target("recent_request_rate", q["recent_request_rate"], "succeeded, recent window"),
                _target("failure_rate", q["failure_rate"], "failed"),
            ],
            "Requests per second, all pods of the target; the recent window is what LeastCost places a step by.",
        ),
        _panel(
            f"{PERCENTILE} queue time",
            "ms",
            [_target("queue_ms", q["queue_ms"], f"{PERCENTILE} (worst pod)")],
            "Time requests wait in Triton's queue before a batch runs them.",
        ),
        _panel(
            "Batch size",
            "short",
            [_target("batch_size", q["batch_size"], "inferences per execution")],
            "What the dynamic batcher forms: inferences divided by executions.",
        ),
        _panel(
            "Busy time and service time",
            "short",
            [
                _target("busy", q["busy"], "busy model instances"),
                _target("service_ms", q["service_ms"], "execution ms per request"),
            ],
            "Model-instance seconds per second spent executing (busy / replicas = utilisation), and the "
            "execution time per request: what the scaler projects one replica fewer from.",
        ),
        _panel(
            "Pending requests and scale actions",
            "short",
            [
                _target("pending", q["pending"], "pending"),
                _target(
                    "scale_actions",
                    f"sum by (direction) (increase(tensorkiln_scale_actions_total{own}[{RATE_WINDOW}]))",
                    "scaled {{direction}}",
                ),
            ],
            "Requests queued or executing now; replica changes by the SLO scaler.",
        ),
    ]


def _placement_panels() -> list[dict]:
    """The model as a whole under spec.slo.placement LeastCost: its classes side by side."""
    classes = '{namespace="$namespace",model="$model",hardware_class=~"$hardware_class"}'
    return [
        _panel(
            "Cost per hour",
            "currencyUSD",
            [
                _target(
                    "cost", f"sum by (hardware_class) (tensorkiln_target_cost_per_hour{classes})", "{{hardware_class}}"
                )
            ],
            "What each class's replicas cost an hour (status costPerHour), in the currency of the nodes' "
            "tensorkiln.dev/price-per-hour annotation (shown as USD); their sum is the model's Cost/h column.",
        ),
        _panel(
            "Share of the load",
            "percentunit",
            [_target("share", f"tensorkiln_target_load_share{classes}", "{{hardware_class}}")],
            "The share of the model's requests the placement gives each class: its replicas over the model's, "
            "as the Service spreads requests evenly over ready pods.",
        ),
        _panel(
            "Capacity per replica",
            "reqps",
            [_target("capacity", f"tensorkiln_target_capacity_per_replica{classes}", "{{hardware_class}}")],
            "Requests/s one replica of each class sustains under the SLO target, as measured at compile or "
            "observed (status capacitySource).",
        ),
    ]


def _operator_panels() -> list[dict]:
    model = _selector("namespace", "model")
    return [
        _panel(
            "Compile results",
            "short",
            [
                _target(
                    "compile_results",
                    f"sum by (hardware_class, result) (increase(tensorkiln_compile_results_total{model}[$__range]))",
                    "{{hardware_class}} {{result}}",
                    instant=True,
                )
            ],
            "CompileJobs of the model that ended, over the time range: Succeeded, Failed, CacheHit.",
            kind="bargauge",
        ),
        _panel(
            "Reconciles",
            "ops",
            [
                _target("reconciles", f"sum by (kind) (rate(tensorkiln_reconciles_total[{RATE_WINDOW}]))", "{{kind}}"),
                _target(
                    "reconcile_errors",
                    f"sum by (kind) (rate(tensorkiln_reconcile_errors_total[{RATE_WINDOW}]))",
                    "{{kind}} errors",
                ),
            ],
            "Reconciles per second of every object, by kind, and those that raised.",
        ),
        _panel(
            "Reconcile duration p95",
            "s",
            [
                _target(
                    "reconcile_p95",
                    "histogram_quantile(0.95, sum by (le, kind) "
                    f"(rate(tensorkiln_reconcile_duration_seconds_bucket[{RATE_WINDOW}])))",
                    "{{kind}}",
                )
            ],
            "How long one reconcile takes, API calls included.",
        ),
        _panel(
            "Registry cache hit rate",
            "percentunit",
            [
                _target(
                    "registry_hit_rate",
                    f'sum(increase(tensorkiln_registry_lookups_total{{result="hit"}}[{RATE_WINDOW}])) '
                    f"/ sum(increase(tensorkiln_registry_lookups_total[{RATE_WINDOW}]))",
                    "hits / lookups",
                )
            ],
            "Compiles answered by an engine already in the registry (same model, options, hardware, compiler).",
        ),
        _panel(
            "Watch reconnects",
            "short",
            [
                _target(
                    "watch_reconnects",
                    f"sum by (reason) (increase(tensorkiln_watch_reconnects_total[{RATE_WINDOW}]))",
                    "{{reason}}",
                )
            ],
            "Watch streams kopf re-opened: expired (410 Gone), inactive (no event), error (failed request).",
        ),
    ]


def _variable(name: str, label: str, query: str, multi: bool) -> dict:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "definition": query,
        "query": {"query": query, "refId": f"{name}-values"},
        "refresh": 2,  # on time range change
        "sort": 1,
        "multi": multi,
        "includeAll": multi,
        "current": {},
    }


def _layout(rows: list[tuple[dict, list[dict]]]) -> list[dict]:
    """Rows at full width, each followed by its panels three to a line; ids in order."""
    panels, y = [], 0
    for row, members in rows:
        panels.append({**row, "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
        y += 1
        x = 0
        for panel in members:
            w, h = panel["gridPos"]["w"], panel["gridPos"]["h"]
            if x + w > 24:
                x, y = 0, y + h
            panels.append({**panel, "gridPos": {"h": h, "w": w, "x": x, "y": y}})
            x += w
        y += 8
    return [{**panel, "id": number} for number, panel in enumerate(panels, start=1)]


def build() -> dict:
    row = {"type": "row", "collapsed": False, "panels": []}
    return {
        "title": "TensorKiln",
        "uid": "tensorkiln",
        "description": "InferenceModel targets against their latency SLO, and the TensorKiln operator.",
        "tags": ["tensorkiln", "triton"],
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "time": {"from": "now-1h", "to": "now"},
        "timezone": "browser",
        "templating": {
            "list": [
                {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus"},
                _variable("namespace", "Namespace", f"label_values({TRITON_SERIES}, namespace)", False),
                _variable(
                    "model", "InferenceModel", f"label_values({TRITON_SERIES}{_selector('namespace')}, model)", False
                ),
                _variable(
                    "hardware_class",
                    "Hardware class",
                    f"label_values({TRITON_SERIES}{_selector('namespace', 'model')}, hardware_class)",
                    True,
                ),
            ]
        },
        "panels": _layout(
            [
                ({**row, "title": "$model on $hardware_class", "repeat": "hardware_class"}, _target_panels()),
                ({**row, "title": "$model: placement and cost (LeastCost)"}, _placement_panels()),
                ({**row, "title": "Operator"}, _operator_panels()),
            ]
        ),
    }


_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(r"\{[^}]*\}|\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_NAME = re.compile(r"(?<![\w:.$])([a-zA-Z_:][\w:]*)\b(?!\s*\()")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
_LABEL_VALUES = re.compile(r"^label_values\((.*),\s*\w+\)$")


def expressions(dashboard: dict) -> list[str]:
    """Every PromQL expression in `dashboard`: panel targets, and the series the variables read."""
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            exprs.append(_LABEL_VALUES.match(variable["query"]["query"]).group(1))
    return exprs


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression (as this dashboard writes them: no `__name__` matchers)."""
    bare = _GROUPING.sub(" ", _BRACKETS.sub(" ", _STRINGS.sub('""', expr)))
    return {name for name in _NAME.findall(bare) if name.lower() not in _KEYWORDS}


def render() -> str:
    return json.dumps(build(), indent=2) + "\n"


def main() -> None:
    PATH.parent.mkdir(parents=True, exist_ok=True)
    PATH.write_text(render())
    print(PATH, file=sys.stderr)


if __name__ == "__main__":
    main()
