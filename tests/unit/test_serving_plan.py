"""The plan for one target's serving objects (controllers.plan): exactly what is written and deleted,
from the real builders and observed objects as the API server would return them."""

import copy

import pytest
from tensorkiln.builders import serving
from tensorkiln.controllers.inferencemodel import normalised_spec
from tensorkiln.controllers.owned import NameConflict, with_hash
from tensorkiln.controllers.plan import Plan, plan
from tensorkiln.settings import Settings

from .test_builders import CLASSES, sample_model
from .test_serving_builders import DIGEST, manifest

TARGET = CLASSES["nvidia-l4"]


def wanted(tmp_path, model, replicas=3):
    spec = normalised_spec(model)
    config_map = serving.build_config_map(model, spec, TARGET, manifest(tmp_path, "TensorRT", "GPU"))
    slo = spec.get("slo")
    return [
        obj
        for obj in (
            config_map,
            serving.build_deployment(model, spec, TARGET, DIGEST, config_map, None if slo else replicas, Settings()),
            serving.build_hpa(model, spec, TARGET),
            serving.build_target_service(model, TARGET),
            serving.build_pdb(model, TARGET, replicas),
        )
        if obj is not None
    ]


def as_observed(objects) -> dict:
    """What the API server returns after applying these: the fields, plus its own."""
    observed = {}
    for obj in objects:
        found = copy.deepcopy(with_hash(obj))
        found["metadata"] |= {"resourceVersion": "41", "managedFields": [{"manager": "tensorkiln"}]}
        found["status"] = {}
        observed[obj["kind"]] = found
    return observed


def uid(model) -> str:
    return model["metadata"]["uid"]


def kinds(steps: Plan) -> list[str]:
    return [obj["kind"] for obj in steps.applies]


def test_nothing_changed_means_nothing_written(tmp_path):
    model = sample_model()
    desired = wanted(tmp_path, model)
    assert plan(desired, as_observed(desired), uid(model), replicas=3) == Plan((), (), 3)


def test_a_new_target_applies_everything_in_order(tmp_path):
    model = sample_model()
    steps = plan(wanted(tmp_path, model), {}, uid(model))
    assert kinds(steps) == ["ConfigMap", "Deployment", "Service", "PodDisruptionBudget"] and steps.deletes == ()


def test_a_dropped_field_is_applied_again_so_the_apply_removes_it(tmp_path):
    model = sample_model()
    before = wanted(tmp_path, model)
    before[1]["spec"]["template"]["spec"]["affinity"] = {"nodeAffinity": {"preferred": "x"}}
    steps = plan(wanted(tmp_path, model), as_observed(before), uid(model))
    assert kinds(steps) == ["Deployment"]
    assert "affinity" not in steps.applies[0]["spec"]["template"]["spec"]


def test_a_mode_switch_from_hpa_deletes_the_hpa(tmp_path):
    hpa_model = sample_model()
    hpa_model["spec"]["slo"] |= {"mode": "HPA"}
    operator_model = sample_model()
    steps = plan(wanted(tmp_path, operator_model), as_observed(wanted(tmp_path, hpa_model)), uid(operator_model), 3)
    name = serving.target_name("resnet50", TARGET)
    assert steps.deletes == (("autoscaling/v2", "HorizontalPodAutoscaler", name),)
    assert kinds(steps) == []  # the Deployment leaves replicas out in both modes: nothing else moves


def test_below_two_replicas_the_pdb_goes_and_an_absent_one_is_not_deleted(tmp_path):
    model = sample_model()
    steps = plan(wanted(tmp_path, model, replicas=1), as_observed(wanted(tmp_path, model, replicas=3)), uid(model))
    assert ("policy/v1", "PodDisruptionBudget", serving.target_name("resnet50", TARGET)) in steps.deletes
    desired = wanted(tmp_path, model, replicas=1)
    assert plan(desired, as_observed(desired), uid(model)).deletes == ()


def test_a_deleted_owned_object_is_made_again(tmp_path):
    model = sample_model()
    desired = wanted(tmp_path, model)
    observed = as_observed(desired)
    del observed["Service"]
    assert kinds(plan(desired, observed, uid(model))) == ["Service"]


def test_an_object_someone_else_controls_stops_the_plan_before_any_write(tmp_path):
    model = sample_model()
    desired = wanted(tmp_path, model)
    observed = as_observed(desired)
    observed["Service"]["metadata"]["ownerReferences"] = []
    with pytest.raises(NameConflict, match="Service .* is controlled by no controller"):
        plan(desired, observed, uid(model))
    # An object no longer wanted that another owner controls is never deleted either.
    observed = {"HorizontalPodAutoscaler": {"metadata": {"name": "h", "ownerReferences": []}}}
    assert plan([], observed, uid(model)).deletes == ()
