"""The health GitOps tools read, computed by the real kstatus library (sigs.k8s.io/cli-utils, as Flux,
kpt and cli-utils use it; built from Go modules) over the objects the installed operator wrote:
Failed for a model whose compile failed for good, for its CompileJob and for a model that matches no
hardware; Current for a served model. Without Stalled conditions the failures read InProgress, and
a Flux health check waits for them until it times out."""

import copy
import functools
import json
import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from tensorkiln.hardware.classes import discover
from tensorkiln.hardware.selection import select_targets
from tensorkiln_api import GROUP, VERSION
from tensorkiln_local.cluster import binaries
from tensorkiln_local.cluster.engine_seeds import publish_test_seed

from .helpers import wait_for

pytestmark = pytest.mark.cluster
SAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "samples"


def _model(namespace: str, name: str, sample: str) -> dict:
    model = copy.deepcopy(yaml.safe_load((SAMPLES / sample).read_text()))
    model["metadata"] = {"name": name, "namespace": namespace}
    return model


@functools.cache
def kstatus_tool() -> Path:
    return binaries.ensure(("kstatus",)) / "kstatus"


def kstatus(api, namespace: str, plural: str) -> dict[str, tuple[str, str]]:
    """name -> (kstatus status, message) for every object of `plural` in `namespace`, by the Go library."""
    objects = client.CustomObjectsApi(api).list_namespaced_custom_object(GROUP, VERSION, namespace, plural)
    out = subprocess.run([kstatus_tool()], input=json.dumps(objects), capture_output=True, text=True, check=True)
    rows = [line.split("\t") for line in out.stdout.splitlines()]
    return {where.split("/")[1]: (status, message) for _, where, status, message in rows}


def test_kstatus_reads_failed_for_failures_that_need_a_person_and_current_for_a_served_model(
    api, operator, namespace, tmp_path
):
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    # Served: a seeded engine for the simulated L4 pool (a registry hit, no compile; kwok runs the pods).
    served = _model(namespace, "served", "resnet50-gpu.yaml")
    served["spec"]["hardware"] = {"mode": "Auto", "include": ["NVIDIA-L4"]}
    # Options of its own: its seed must not be a cache hit for other tests' resnet50 on the session's registry.
    served["spec"]["compile"] = {"accuracy": {"maxAbsError": 0.0531}}
    nodes = [api.sanitize_for_serialization(n) for n in core.list_node().items]
    (target,) = select_targets(served["spec"]["hardware"], discover(nodes), nodes)
    publish_test_seed(operator.registry_uri, served, target, tmp_path)
    # Compile failed for good: the model's digest is not the one the spec names (the compiler exits 2).
    wrong = _model(namespace, "wrong-digest", "ocr-cls-cpu.yaml")
    wrong["spec"]["source"]["sha256"] = "0" * 64
    wrong["spec"]["compile"]["resources"] = {"requests": {"cpu": "250m", "memory": "1Gi"}}
    # No hardware: a GPU product no node has, and no CPU pool.
    nowhere = _model(namespace, "nowhere", "resnet50-gpu.yaml")
    nowhere["spec"]["hardware"] = {"mode": "Auto", "include": ["NO-SUCH-GPU"], "includeCPU": False}
    for model in (served, wrong, nowhere):
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", model)

    expected = {"served": "Current", "wrong-digest": "Failed", "nowhere": "Failed"}
    models = {}

    def settled():
        models.update(kstatus(api, namespace, "inferencemodels"))
        return {name: status for name, (status, _) in models.items()} == expected

    try:
        wait_for(settled, timeout=300, interval=3, what=f"kstatus to read {expected}")
    except pytest.fail.Exception as timeout:
        pytest.fail(f"{timeout}; last: {models}")
    assert "DigestMismatch" in models["wrong-digest"][1], models
    compile_jobs = kstatus(api, namespace, "compilejobs")
    by_model = {model: [s for name, (s, _) in compile_jobs.items() if name.startswith(f"{model}--")]
                for model in ("served", "wrong-digest")}  # fmt: skip
    assert by_model == {"served": ["Current"], "wrong-digest": ["Failed"]}, compile_jobs
