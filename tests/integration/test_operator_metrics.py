"""What the operator shows, on the local cluster: /metrics, /healthz and JSON log lines.

The operator here is conftest's Operator (its own process, its own registry, free ports) started
with --namespace: it watches only this module's namespace, so it runs beside any other operator
on the cluster without acting on their objects, and the demo operator is left alone.
"""

import copy
import json
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families
from tensorkiln_api import GROUP, VERSION

from .conftest import Operator
from .helpers import namespace_exists, wait_for

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[2]
SAMPLE = yaml.safe_load((REPO / "manifests/samples/resnet50-gpu.yaml").read_text())


@pytest.fixture(scope="module")
def watched(api):
    core = client.CoreV1Api(api)
    name = f"t-obs-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)
    wait_for(lambda: not namespace_exists(core, name), timeout=180, what=f"namespace {name} to be deleted")


@pytest.fixture(scope="module")
def json_operator(watched, tmp_path_factory):
    registry = tmp_path_factory.mktemp("obs-registry")
    op = Operator(
        tmp_path_factory.mktemp("obs-operator") / "operator.log",
        f"file://{registry}",
        args=["--namespace", watched],
        env={"TENSORKILN_LOG_FORMAT": "json"},
    )
    op.start()
    yield op
    op.kill()


def get(url: str) -> tuple[int, str] | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except OSError:  # not listening yet (URLError), or a 5xx (HTTPError)
        return None


def samples(op: Operator) -> dict[tuple[str, frozenset], float]:
    answer = get(f"http://127.0.0.1:{op.metrics_port}/metrics")
    if answer is None:
        return {}
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(answer[1])
        for s in family.samples
    }


def sample(op: Operator, name: str, **labels) -> float | None:
    return samples(op).get((name, frozenset(labels.items())))


@pytest.fixture(scope="module")
def applied(api, watched, json_operator):
    """One InferenceModel for the H100 pool only: one CompileJob, one simulated compile pod."""
    body = copy.deepcopy(SAMPLE)
    body["metadata"] = {"name": "resnet50", "namespace": watched}
    body["spec"]["hardware"] = {"mode": "Auto", "include": ["NVIDIA-H100*"]}
    wait_for(lambda: get(f"http://127.0.0.1:{json_operator.health_port}/healthz"), timeout=60, what="/healthz")
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, watched, "inferencemodels", body)
    return body


def test_liveness_endpoint_answers_200_with_the_resync_probe(json_operator):
    status, text = wait_for(
        lambda: get(f"http://127.0.0.1:{json_operator.health_port}/healthz"), timeout=60, what="/healthz"
    )
    assert status == 200
    assert "lastPassSecondsAgo" in json.loads(text)["resync"]


def test_metrics_count_reconciles_of_both_kinds_after_a_sample_is_applied(json_operator, applied, watched):
    def reconciled():
        found = samples(json_operator)
        counts = [
            found.get(("tensorkiln_reconciles_total", frozenset({("kind", k)})), 0)
            for k in ("InferenceModel", "CompileJob")
        ]
        return found if all(c >= 1 for c in counts) else None

    found = wait_for(reconciled, timeout=120, what="reconcile counts of both kinds on /metrics")
    for kind in ("InferenceModel", "CompileJob"):
        assert found[("tensorkiln_reconcile_duration_seconds_count", frozenset({("kind", kind)}))] >= 1
    # The H100 target's gauge, from the status the operator wrote (compiling: no replicas yet).
    target = {"namespace": watched, "model": "resnet50", "hardware_class": "nvidia-h100-80gb-hbm3"}
    wait_for(
        lambda: sample(json_operator, "tensorkiln_slo_target_milliseconds", **target) == 25,
        timeout=60,
        what=f"tensorkiln_slo_target_milliseconds{target}",
    )
    assert sample(json_operator, "tensorkiln_target_replicas", **target) == 0


def test_log_lines_are_json_and_name_the_object(json_operator, applied, watched):
    def lines():
        return [line for line in json_operator.log().splitlines() if line.strip()]

    def about(parsed, logger_prefix):
        return [
            p
            for p in parsed
            if p.get("object", {}).get("namespace") == watched and p.get("logger", "").startswith(logger_prefix)
        ]

    def logged():
        parsed = [json.loads(line) for line in lines()]  # fails on any line that is not JSON
        found = about(parsed, "tensorkiln.controllers.")
        return parsed if any(p["object"]["kind"] == "InferenceModel" for p in found) else None

    # kopf's own lines (its startup, the webhook, peering) are JSON as well: every line parses. kopf
    # handles no object any more; the reconcilers' module loggers carry the object they act on.
    parsed = wait_for(logged, timeout=120, what="JSON log lines about objects in the watched namespace")
    ours = about(parsed, "tensorkiln.controllers.")
    assert all(p["object"]["name"].startswith("resnet50") for p in ours), ours
    assert any(p["object"]["kind"] == "InferenceModel" and p["object"]["name"] == "resnet50" for p in ours), ours
    assert any(p.get("logger", "").startswith("kopf.") for p in parsed)
    assert all({"message", "severity", "timestamp"} <= p.keys() for p in parsed)
