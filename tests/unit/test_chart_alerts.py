"""The chart's PrometheusRule (charts/tensorkiln/templates/prometheusrule.yaml): when it renders, what every
alert carries, that each runbook_url lands on a section of docs/troubleshooting.md, that the expressions read
only series that exist, and, with Debian's promtool (Prometheus 2.42), that the rules load and that each alert
fires on its condition and stays silent otherwise (tests/data/alerts/tensorkiln.test.yaml).

Rendered with the cached helm binary, as tests/unit/test_chart.py renders the chart.
"""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from markdown.extensions.toc import slugify
from tensorkiln.observability import metrics
from tensorkiln.scaling.metrics import IDLE_RATE, queries
from tensorkiln_local import installmanifests

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "tensorkiln"
TROUBLESHOOTING = ROOT / "docs" / "troubleshooting.md"
RULE_TESTS = ROOT / "tests" / "data" / "alerts" / "tensorkiln.test.yaml"
# The release the rules test file's series are labelled for: job <fullname>-metrics in the release namespace.
RELEASE, NAMESPACE, JOB = "tk", "tk-system", "tk-tensorkiln-metrics"
PROMETHEUS_RULE = "monitoring.coreos.com/v1/PrometheusRule"
OTHER_MONITORING = ["monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PodMonitor"]
ALERTS = {
    "TensorKilnOperatorDown",
    "TensorKilnNoLeader",
    "TensorKilnMultipleLeaders",
    "TensorKilnReconcileErrors",
    "TensorKilnRegistryErrors",
    "TensorKilnCompileFailures",
    "TensorKilnSLOMissed",
    "TensorKilnReplicasCapped",
}
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


@pytest.fixture(scope="session")
def promtool() -> str:
    if not Path(PROMTOOL).exists():
        pytest.skip("no promtool (Debian's prometheus package)")
    return PROMTOOL


def render(values=None, api_versions=(PROMETHEUS_RULE,)) -> list[dict]:
    text = installmanifests.template(
        values, chart=CHART, release=RELEASE, namespace=NAMESPACE, api_versions=api_versions
    )
    return installmanifests.documents(text)


def prometheus_rules(docs) -> list[dict]:
    return [d for d in docs if d["kind"] == "PrometheusRule"]


def rules(values=None) -> list[dict]:
    (rule,) = prometheus_rules(render(values))
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def groups_without_annotations(values=None) -> list[dict]:
    """The rule groups as promtool's unit tests take them: the test file compares annotations too, and
    the texts are checked here instead (test_every_alert_has_...)."""
    (rule,) = prometheus_rules(render(values))
    groups = rule["spec"]["groups"]
    for group in groups:
        for r in group["rules"]:
            r.pop("annotations", None)
    return groups


# --- when it renders --------------------------------------------------------------------------------


def test_the_rule_renders_only_where_the_cluster_serves_prometheus_rules_and_alerts_are_enabled(helm):
    assert not prometheus_rules(render(api_versions=()))
    assert not prometheus_rules(render(api_versions=OTHER_MONITORING))
    (rule,) = prometheus_rules(render())
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == NAMESPACE
    assert not prometheus_rules(render({"alerts": {"enabled": False}}))


def test_alerts_labels_go_on_the_rule(helm):
    (rule,) = prometheus_rules(render({"alerts": {"labels": {"release": "kube-prometheus-stack"}}}))
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["metadata"]["labels"]["app.kubernetes.io/part-of"] == "tensorkiln"


def test_for_durations_and_the_operator_job_are_values(helm):
    values = {
        "alerts": {
            "operatorJob": "kubernetes-pods",
            "operatorDown": {"for": "10m"},
            "reconcileErrors": {"for": "1h"},
            "registryErrors": {"for": "20m"},
            "sloMissed": {"for": "30m"},
            "replicasCapped": {"for": "45m"},
        }
    }
    by_name = {r["alert"]: r for r in rules(values)}
    assert by_name["TensorKilnOperatorDown"]["for"] == "10m"
    assert by_name["TensorKilnReconcileErrors"]["for"] == "1h"
    assert by_name["TensorKilnRegistryErrors"]["for"] == "20m"
    assert by_name["TensorKilnSLOMissed"]["for"] == "30m"
    assert by_name["TensorKilnReplicasCapped"]["for"] == "45m"
    for name, rule in by_name.items():
        assert 'job="kubernetes-pods"' in rule["expr"] and JOB not in rule["expr"], name


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"alerts": {"sloMissed": {"for": "15 minutes"}}}, "/alerts/sloMissed/for"),
        ({"alerts": {"runbookBaseUrl": ""}}, "/alerts/runbookBaseUrl"),
        ({"alerts": {"enabled": "yes"}}, "/alerts/enabled"),
        ({"alerts": {"registryErrors": {"for": "ten minutes"}}}, "/alerts/registryErrors/for"),
        ({"alerts": {"registryUnavailable": {"for": "5m"}}}, "registryUnavailable"),
    ],
)
def test_schema_refuses_bad_alerts_values(helm, values, where):
    with pytest.raises(subprocess.CalledProcessError) as refused:
        render(values)
    assert "schema" in refused.value.stderr and where in refused.value.stderr, refused.value.stderr


# --- what each alert carries ------------------------------------------------------------------------


def runbook_base() -> str:
    return yaml.safe_load((CHART / "values.yaml").read_text())["alerts"]["runbookBaseUrl"]


def test_every_alert_has_a_severity_a_summary_a_description_and_a_runbook(helm):
    found = rules()
    assert {r["alert"] for r in found} == ALERTS
    assert all("record" not in r for r in found)
    base = runbook_base()
    assert base.endswith("/")
    for rule in found:
        name = rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning"}, name
        annotations = rule["annotations"]
        assert annotations["summary"].strip() and annotations["description"].strip(), name
        assert annotations["runbook_url"] == f"{base}troubleshooting/#{name.lower()}", name


def headings(markdown: str) -> dict[str, str]:
    """Anchor -> heading text, for every heading of a page, as mkdocs (Python-Markdown's toc) makes them."""
    found, fenced = {}, False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6}\s+(.+?)\s*#*\s*$", line)):
            found[slugify(match.group(1), "-")] = match.group(1)
    return found


def test_every_runbook_url_lands_on_its_alerts_section_of_the_troubleshooting_page(helm):
    sections = headings(TROUBLESHOOTING.read_text())
    assert sections["operator-and-cluster"] == "Operator and cluster"  # the anchors are read the way mkdocs does
    for rule in rules():
        anchor = rule["annotations"]["runbook_url"].partition("#")[2]
        assert sections.get(anchor) == rule["alert"], f"{rule['alert']}: no heading for #{anchor}"


@pytest.mark.parametrize("base", ["https://docs.example.test/tensorkiln", "https://docs.example.test/tensorkiln/"])
def test_the_runbook_base_url_is_a_value(helm, base):
    for rule in rules({"alerts": {"runbookBaseUrl": base}}):
        anchor = rule["alert"].lower()
        assert rule["annotations"]["runbook_url"] == f"https://docs.example.test/tensorkiln/troubleshooting/#{anchor}"


def rule_tests() -> list[dict]:
    return yaml.safe_load(RULE_TESTS.read_text())["tests"]


def test_annotations_name_only_labels_the_alert_has(helm):
    """$labels.X in an annotation renders empty unless the alert has X: compared with the labels the
    rules test file expects each alert to fire with."""
    fired: dict[str, list[set[str]]] = {}
    for test in rule_tests():
        for case in test["alert_rule_test"]:
            for alert in case["exp_alerts"]:
                fired.setdefault(case["alertname"], []).append(set(alert["exp_labels"]))
    for rule in rules():
        used = set()
        for text in rule["annotations"].values():
            used |= set(re.findall(r"\$labels\.([A-Za-z_][A-Za-z0-9_]*)", text))
        for labels in fired[rule["alert"]]:
            assert used <= labels, f"{rule['alert']} names {used - labels}, which it does not carry"


# --- the series the expressions read ----------------------------------------------------------------

PROMQL_WORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers once strings, label matchers, ranges,
    offsets and grouping label lists are gone, less functions and aggregations (followed by "(") and keywords."""
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\boffset\s+[0-9a-z]+", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set(re.findall(r"(?<![A-Za-z0-9_:.])([A-Za-z_:][A-Za-z0-9_:]*)\b(?!\s*\()", text))
    return names - PROMQL_WORDS


def test_the_name_reader_finds_every_metric_and_nothing_else():
    assert metric_names(
        'sum by (job, namespace) (rate(a_total{x="y(z)"}[5m] offset 30m)) / 1e3 > on (m) b unless c and bool d'
    ) == {"a_total", "b", "c", "d"}


def test_every_series_an_alert_reads_is_one_the_operator_exports_or_triton_exports_or_up(helm):
    triton = set().union(*(metric_names(q) for q in queries("ns", "m", "class", "p95").values()))
    assert "nv_inference_request_success" in triton
    allowed = metrics.NAMES | triton
    read = {}
    for rule in rules():
        names = metric_names(rule["expr"])
        assert names, rule["alert"]
        read[rule["alert"]] = names
        assert names <= allowed | {"up"}, f"{rule['alert']} reads {names - allowed - {'up'}}, which nothing exports"
    assert read["TensorKilnOperatorDown"] == {"up"}
    assert read["TensorKilnNoLeader"] == read["TensorKilnMultipleLeaders"] == {"tensorkiln_operator_leading"}
    assert "tensorkiln_slo_target_milliseconds" in read["TensorKilnSLOMissed"]
    assert read["TensorKilnRegistryErrors"] == {"tensorkiln_registry_lookups_total"}
    assert {"tensorkiln_target_replicas", "tensorkiln_target_max_replicas"} <= read["TensorKilnReplicasCapped"]
    assert read["TensorKilnSLOMissed"] < read["TensorKilnReplicasCapped"]


def test_slo_alerts_read_the_scalers_percentile_summary_and_idle_rate(helm):
    """The SLO alerts read p95 as the scaler reads it, and skip targets the scaler counts as idle."""
    p95 = re.search(r"nv_inference_request_summary_us\{[^}]*\}", queries("ns", "m", "c", "p95")["latency_ms"])
    assert 'quantile="0.95"' in p95.group(0)
    for rule in rules():
        if rule["alert"] in {"TensorKilnSLOMissed", "TensorKilnReplicasCapped"}:
            assert 'nv_inference_request_summary_us{quantile="0.95"}' in rule["expr"]
            assert f"(rate(nv_inference_request_success[5m])) >= {IDLE_RATE}" in rule["expr"]


# --- promtool -----------------------------------------------------------------------------------------


def test_promtool_checks_the_rules(helm, promtool, tmp_path):
    (rule,) = prometheus_rules(render())
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    checked = subprocess.run([promtool, "check", "rules", str(rules_file)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in checked.stdout


def promtool_test(promtool: str, directory: Path, groups: list[dict]) -> subprocess.CompletedProcess:
    (directory / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    shutil.copy(RULE_TESTS, directory / RULE_TESTS.name)
    return subprocess.run([promtool, "test", "rules", RULE_TESTS.name], capture_output=True, text=True, cwd=directory)


def test_every_alert_is_tested_firing_and_silent():
    firing, silent = set(), set()
    for test in rule_tests():
        for case in test["alert_rule_test"]:
            (firing if case["exp_alerts"] else silent).add(case["alertname"])
    assert firing == ALERTS and silent == ALERTS


def test_promtool_unit_tests_fire_each_alert_on_its_condition_and_only_then(helm, promtool, tmp_path):
    result = promtool_test(promtool, tmp_path, groups_without_annotations())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


BROKEN = {
    "idle targets not skipped": (f">= {IDLE_RATE}", ">= 0"),
    "no leader read as fewer than none": (
        ") < 1\nor\nabsent(tensorkiln_operator_leading",
        ") < 0\nor\nabsent(tensorkiln_operator_leading",
    ),
    "exported_namespace left as it is": ('"exported_namespace", "(.+)"', '"exported_namespace", "()"'),
    "a compile's first failure missed": (
        "unless tensorkiln_compile_results_total",
        "and tensorkiln_compile_results_total",
    ),
    "registry hits and misses read as errors": ('result="error"', 'result=~"error|hit|miss"'),
    "a registry outage's errors kept for 10 minutes": ('result="error"}[5m]', 'result="error"}[10m]'),
    "replicas below the maximum read as capped": (
        ">= on (namespace, model, hardware_class)",
        "<= on (namespace, model, hardware_class)",
    ),
    "replicas capped whatever the SLO": (
        "\nand on (namespace, model, hardware_class)\n(\n  (\n",
        "\nor on (namespace, model, hardware_class)\n(\n  (\n",
    ),
}


@pytest.mark.parametrize("case", BROKEN, ids=list(BROKEN))
def test_the_promtool_unit_tests_fail_on_a_broken_rule(helm, promtool, tmp_path, case):
    old, new = BROKEN[case]
    groups = groups_without_annotations()
    changed = 0
    for group in groups:
        for rule in group["rules"]:
            if old in rule["expr"]:
                rule["expr"] = rule["expr"].replace(old, new)
                changed += 1
    assert changed, f"{old!r} is in no expression"
    result = promtool_test(promtool, tmp_path, groups)
    assert result.returncode != 0 and "FAILED" in result.stdout + result.stderr, result.stdout
