"""Steady state writes nothing (a regression of the fault suite, e2e/faults: its operator logs
showed a CPU target's Deployment applied again on every reconcile, 166 times in two minutes for
five models).

The API server omits empty lists and maps (a CPU target's `tolerations: []`), so the desired
Deployment never looked contained in the observed one.
"""

import copy
from pathlib import Path

from registry_fixtures import make_engine
from tensorkiln.builders import serving
from tensorkiln.controllers.diff import contains
from tensorkiln.controllers.inferencemodel import normalised_spec
from tensorkiln.controllers.owned import needs_apply, with_hash
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
    """What the API server returns: empty lists and maps left out, defaults added."""
    if isinstance(obj, dict):
        stored = {k: as_stored(v) for k, v in obj.items() if v not in ([], {})}
        return stored
    if isinstance(obj, list):
        return [as_stored(v) for v in obj]
    return obj


def deployment(tmp_path: Path) -> dict:
    spec = normalised_spec(MODEL)
    config_map = serving.build_config_map(MODEL, spec, CPU, make_engine(tmp_path).manifest, "python-backend")
    return serving.build_deployment(MODEL, spec, CPU, "ab" * 32, config_map, 1, Settings(registry_uri="file:///r"))


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
    assert not needs_apply(observed, desired)
