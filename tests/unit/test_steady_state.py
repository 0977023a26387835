"""Steady state writes nothing (a regression of the fault suite, e2e/faults: its operator logs
showed a CPU target's Deployment applied again on every reconcile, 166 times in two minutes for
five models).

The API server omits empty lists and maps (a CPU target's `tolerations: []`), so the desired
Deployment never looked contained in the observed one. Likewise it omits `false` booleans: a
registry on a PVC (`readOnly: false` on its claim) had every chart-installed model's Deployment
applied again on every reconcile (found by tests/integration/test_rbac_audit.py's quiet minute).
"""

import copy
from pathlib import Path

from registry_fixtures import make_engine
from tensorkiln.builders import serving
from tensorkiln.controllers.diff import contains
from tensorkiln.controllers.inferencemodel import normalised_spec
from tensorkiln.controllers.owned import why_apply, with_hash
from tensorkiln.hardware.classes import HardwareClass
from tensorkiln.settings import Settings

CPU = HardwareClass(name="cpu", kind="CPU", product="cpu", node_selector={"kubernetes.io/arch": "amd64"}, nodes=("n",))
MODEL = {
    "apiVersion": "tensorkiln.dev/v1alpha1",
    "kind": "InferenceModel",
    "metadata": {"name": "m", "namespace": "ns", "uid": "u"},
    "spec": {"source": {"uri": "https://models.example/m.onnx"}},
}


def as_stored(obj):
    """What the API server returns: empty lists and maps and false booleans left out."""
    if isinstance(obj, dict):
        stored = {k: as_stored(v) for k, v in obj.items() if v not in ([], {}) and v is not False}
        return stored
    if isinstance(obj, list):
        return [as_stored(v) for v in obj]
    return obj


def deployment(tmp_path: Path, registry_uri: str = "file:///r") -> dict:
    spec = normalised_spec(MODEL)
    config_map = serving.build_config_map(MODEL, spec, CPU, make_engine(tmp_path).manifest)
    return serving.build_deployment(MODEL, spec, CPU, "ab" * 32, config_map, 1, Settings(registry_uri=registry_uri))


def test_a_cpu_targets_deployment_as_stored_needs_no_apply(tmp_path):
    desired = deployment(tmp_path)
    assert desired["spec"]["template"]["spec"]["tolerations"] == []
    observed = as_stored(desired)
    observed["spec"]["progressDeadlineSeconds"] = 600  # a default, and another manager's field
    observed["metadata"]["resourceVersion"] = "42"
    assert contains(observed, desired)


def test_a_changed_or_missing_field_still_needs_an_apply(tmp_path):
    desired = deployment(tmp_path)
    edited = copy.deepcopy(as_stored(desired))
    edited["spec"]["replicas"] = 3
    assert not contains(edited, desired)
    gone = copy.deepcopy(as_stored(desired))
    del gone["spec"]["template"]["spec"]["securityContext"]
    assert not contains(gone, desired)
    assert not contains({"a": []}, {"a": ["x"]}) and contains({}, {"a": [], "b": {}})


def test_the_hash_annotated_object_as_stored_needs_no_apply_either(tmp_path):
    desired = with_hash(deployment(tmp_path))
    observed = as_stored(desired)
    observed["metadata"]["resourceVersion"] = "42"
    assert not why_apply(observed, desired)


def test_a_registry_on_a_pvc_needs_no_apply_once_stored(tmp_path):
    desired = with_hash(deployment(tmp_path, "pvc://engines/registry"))
    assert any("persistentVolumeClaim" in v for v in desired["spec"]["template"]["spec"]["volumes"])
    assert not why_apply(as_stored(desired), desired)
    assert contains({}, {"readOnly": False}) and not contains({}, {"readOnly": True})
