"""The whole-model plan (controllers.plan.plan_model): from an `Observed` snapshot, exactly what
is written and deleted, for every kind of change, with the real builders."""

import copy

from tensorkiln.builders import serving
from tensorkiln.builders.compilejob import build_compile_job, compile_job_name
from tensorkiln.controllers.inferencemodel import normalised_spec
from tensorkiln.controllers.observed import Observed, TargetObserved, gather
from tensorkiln.controllers.owned import with_hash
from tensorkiln.controllers.plan import Plan, plan_model
from tensorkiln.review.checks import ERROR, Finding
from tensorkiln.scaling.decision import Decision
from tensorkiln.scaling.memory import TargetMemory
from tensorkiln.scaling.scaler import Scaler
from tensorkiln.scaling.slo import Outcome, TargetSignals
from tensorkiln.settings import Settings

from .fleet import default_fleet
from .test_builders import CLASSES, sample_model
from .test_serving_builders import DIGEST, manifest
from .test_watch_cache import ReadsCounted, filled

L4, H100 = CLASSES["nvidia-l4"], CLASSES["nvidia-h100-80gb-hbm3"]
SETTINGS = Settings()


def stored(obj: dict, **status) -> dict:
    """`obj` as the API server returns it once applied (hash annotation included)."""
    found = copy.deepcopy(with_hash(obj))
    found["metadata"] |= {"resourceVersion": "41", "generation": 1}
    found["status"] = status
    return found


def succeeded(compile_job: dict) -> dict:
    return stored(compile_job, phase="Succeeded", engine={"digest": DIGEST})


def snapshot(model, per_target, findings=(), model_service=None) -> Observed:
    spec = normalised_spec(model)
    found = {t.target.name: t for t in per_target}
    targets = tuple(t.target for t in per_target)
    return Observed(model, spec, targets, found, tuple(findings), model_service, ("NVIDIA-L4",))


def compile_job(model, target):
    return build_compile_job(model, normalised_spec(model), target, SETTINGS)


def serving_objects(tmp_path, model, target, replicas=1) -> dict:
    """What a converged target holds: every serving object, as stored, by kind."""
    found = TargetObserved(target, succeeded(compile_job(model, target)), {}, manifest=engine_manifest(tmp_path))
    applied = plan_model(snapshot(model, [found]), SETTINGS).targets[0].serving.applies
    objects = {obj["kind"]: stored(obj) for obj in applied}
    deployment = objects["Deployment"]
    deployment["spec"]["replicas"] = replicas
    deployment["status"] = {"observedGeneration": 1, "replicas": replicas, "updatedReplicas": replicas,
                            "availableReplicas": replicas, "readyReplicas": replicas}  # fmt: skip
    return objects


def engine_manifest(tmp_path):
    return manifest(tmp_path, "TensorRT", "GPU")


def converged(tmp_path, model, target, replicas=1) -> TargetObserved:
    return TargetObserved(
        target,
        succeeded(compile_job(model, target)),
        serving_objects(tmp_path, model, target, replicas),
        manifest=engine_manifest(tmp_path),
    )


def kinds(steps: Plan | None) -> list[str]:
    return [obj["kind"] for obj in steps.applies] if steps else []


def without_slo():
    model = sample_model()
    del model["spec"]["slo"]
    return model


def test_a_new_model_creates_its_compile_jobs_and_nothing_else():
    model = without_slo()
    steps = plan_model(snapshot(model, [TargetObserved(L4, None, {}), TargetObserved(H100, None, {})]), SETTINGS)
    assert [t.target.name for t in steps.targets] == ["nvidia-l4", "nvidia-h100-80gb-hbm3"]
    assert [kinds(t.compile_job) for t in steps.targets] == [["CompileJob"], ["CompileJob"]]
    assert all(t.serving is None for t in steps.targets)
    assert steps.model_service is None  # nothing serves, nor is about to


def test_a_compiled_engine_rolls_out_every_serving_object_and_the_model_service(tmp_path):
    model = without_slo()
    found = TargetObserved(L4, succeeded(compile_job(model, L4)), {}, manifest=engine_manifest(tmp_path))
    steps = plan_model(snapshot(model, [found]), SETTINGS)
    (target,) = steps.targets
    assert kinds(target.compile_job) == [] and target.engine == DIGEST
    assert kinds(target.serving) == ["ConfigMap", "Deployment", "Service"]
    assert kinds(steps.model_service) == ["Service"]


def test_a_converged_model_plans_no_write(tmp_path):
    model = without_slo()
    service = stored(serving.build_model_service(model))
    steps = plan_model(snapshot(model, [converged(tmp_path, model, L4)], model_service=service), SETTINGS)
    (target,) = steps.targets
    assert target.compile_job == Plan() and target.serving == Plan() and steps.model_service == Plan()


def test_a_changed_spec_reapplies_the_compile_job_and_keeps_serving_the_old_engine(tmp_path):
    model = without_slo()
    found = converged(tmp_path, model, L4)
    model["spec"]["shapes"] = {"batch": {"max": 4}}
    steps = plan_model(snapshot(model, [found]), SETTINGS)
    (target,) = steps.targets
    assert kinds(target.compile_job) == ["CompileJob"]
    assert target.compile_job.reasons == ("the desired object changed",)
    assert target.engine == DIGEST  # the engine serving now, until the new compile succeeds


def test_a_field_dropped_by_hand_or_by_the_builder_is_applied_again(tmp_path):
    model = without_slo()
    found = converged(tmp_path, model, L4)
    found.serving["Deployment"]["spec"]["template"]["spec"]["containers"][0]["image"] = "edited"
    steps = plan_model(snapshot(model, [found], model_service=stored(serving.build_model_service(model))), SETTINGS)
    assert kinds(steps.targets[0].serving) == ["Deployment"]
    assert "differs from the desired value" in steps.targets[0].serving.reasons[0]


def test_a_deleted_owned_object_is_made_again(tmp_path):
    model = without_slo()
    found = converged(tmp_path, model, L4)
    found.serving["ConfigMap"] = None
    assert kinds(plan_model(snapshot(model, [found]), SETTINGS).targets[0].serving) == ["ConfigMap"]


def test_a_switch_from_hpa_to_the_operator_deletes_the_hpa_and_scales_as_the_scaler_says(tmp_path):
    hpa_model = sample_model()
    hpa_model["spec"]["slo"] |= {"mode": "HPA"}
    found = converged(tmp_path, hpa_model, L4, replicas=2)
    assert found.serving["HorizontalPodAutoscaler"] is not None
    model = sample_model()  # slo.mode Operator (the default)
    decision = Decision(3, "ScaledUp", "1 -> 3", False)
    outcome = Outcome(replicas=3, slo_status={}, metrics=(True, "MetricsFlowing", ""), decision=decision)
    signals = TargetSignals(0.0, TargetMemory(), recent=outcome)  # the scaler's last outcome, within its period
    found = TargetObserved(L4, found.compile_job, found.serving, manifest=found.manifest, slo=signals)
    steps = plan_model(snapshot(model, [found]), SETTINGS)
    (target,) = steps.targets
    name = serving.target_name("resnet50", L4)
    assert target.serving.deletes == (("autoscaling/v2", "HorizontalPodAutoscaler", name),)
    assert target.serving.replicas == 3


def test_an_admission_error_stops_compile_job_writes_but_not_serving(tmp_path):
    model = without_slo()
    found = converged(tmp_path, model, L4)
    model["spec"]["shapes"] = {"batch": {"max": 4}}  # would re-apply the CompileJob
    finding = Finding(ERROR, "FileURINotAllowed", "spec.source.uri", "spec.source.uri: not allowed")
    steps = plan_model(snapshot(model, [found], findings=[finding]), SETTINGS)
    (target,) = steps.targets
    assert target.compile_job == Plan() and target.serving is not None


def test_the_registry_away_means_no_rollout_yet(tmp_path):
    model = without_slo()
    found = TargetObserved(L4, succeeded(compile_job(model, L4)), {}, registry_error="connection refused")
    steps = plan_model(snapshot(model, [found]), SETTINGS)
    assert steps.targets[0].serving is None and steps.model_service is None


def test_a_name_another_owner_holds_stops_that_target_alone(tmp_path):
    model = without_slo()
    theirs = succeeded(compile_job(model, L4))
    theirs["metadata"]["ownerReferences"] = [
        {"kind": "InferenceModel", "name": "x", "uid": "other", "controller": True}
    ]
    steps = plan_model(snapshot(model, [TargetObserved(L4, theirs, {}), TargetObserved(H100, None, {})]), SETTINGS)
    l4, h100 = steps.targets
    assert l4 == type(l4)(L4, conflict=l4.conflict)
    assert (
        f"CompileJob default/{compile_job_name('resnet50', L4.name)} is controlled by InferenceModel x" in l4.conflict
    )
    assert kinds(h100.compile_job) == ["CompileJob"]


def test_the_model_service_name_held_by_another_owner_is_a_conflict_of_its_own(tmp_path):
    model = without_slo()
    theirs = stored(serving.build_model_service(model))
    theirs["metadata"]["ownerReferences"] = []
    steps = plan_model(snapshot(model, [converged(tmp_path, model, L4)], model_service=theirs), SETTINGS)
    assert steps.model_service is None and "is controlled by no controller" in steps.model_service_conflict
    assert steps.targets[0].serving == Plan()


class Registry:
    """Serves one engine's manifest (the gather step reads it for the target's engine)."""

    engine_uri = staticmethod(lambda digest: f"file:///r/{digest}")

    def __init__(self, found):
        self.found, self.read = found, []

    def manifest(self, digest):
        self.read.append(digest)
        return self.found


def test_gather_takes_the_snapshot_from_the_cache_alone(tmp_path):
    model = without_slo()
    model["spec"]["hardware"] = {"mode": "Auto", "include": ["NVIDIA-L4"]}
    found = converged(tmp_path, model, L4)
    service = stored(serving.build_model_service(model))
    nodes = [n | {"kind": "Node"} for n in default_fleet()]
    cached = filled(*nodes, found.compile_job, *found.serving.values(), service)
    state = ReadsCounted(cached)
    state._manifests = {}
    registry = Registry(found.manifest)
    observed = gather(state, registry, Scaler(None), SETTINGS, model, normalised_spec(model))
    assert state.reads == [] and registry.read == [DIGEST]
    assert [t.name for t in observed.targets] == ["nvidia-l4"] and observed.findings == ()
    (target,) = observed.per_target.values()
    assert target.compile_job["metadata"]["name"] == found.compile_job["metadata"]["name"]
    assert {k for k, v in target.serving.items() if v} == {"ConfigMap", "Deployment", "Service"}
    assert target.engine == DIGEST and target.rollout.serving
    assert observed.model_service["metadata"]["name"] == "resnet50"
    assert plan_model(observed, SETTINGS).targets[0].serving == Plan()  # converged: nothing to write


def test_an_engine_built_with_other_runtime_versions_is_held_back_and_what_serves_keeps_serving(tmp_path):
    """The chart moved to Triton 24.10 (TensorRT 10.5.0): the engine serving now, and its CompileJob's
    result, were built with TensorRT 10.9.0. Nothing of the serving objects is written (the pods keep
    their engine and image), the CompileJob is applied for 24.10, and the reason names both versions."""
    model = without_slo()
    found = converged(tmp_path, model, L4)
    assert found.manifest.runtime_versions["tensorrt"] == "10.9.0"  # registry_fixtures' engine
    steps = plan_model(snapshot(model, [found]), Settings(serving_target="24.10"))
    (target,) = steps.targets
    assert target.serving is None and target.engine is None
    assert kinds(target.compile_job) == ["CompileJob"]
    assert target.compile_job.applies[0]["spec"]["servingTarget"] == "24.10"
    assert "tensorrt 10.9.0" in target.runtime_mismatch and "tensorrt 10.5.0" in target.runtime_mismatch
    assert "Triton 24.10" in target.runtime_mismatch and DIGEST[:12] in target.runtime_mismatch


def test_an_engine_built_with_the_serving_images_runtime_rolls_out(tmp_path):
    model = without_slo()
    built_for_it = engine_manifest(tmp_path).model_copy(update={"runtime_versions": {"tensorrt": "10.5.0.18"}})
    settings = Settings(serving_target="24.10")
    found = TargetObserved(L4, succeeded(compile_job_for(model, L4, settings)), {}, manifest=built_for_it)
    (target,) = plan_model(snapshot(model, [found]), settings).targets
    assert target.runtime_mismatch is None and target.engine == DIGEST
    assert kinds(target.serving) == ["ConfigMap", "Deployment", "Service"]
    assert kinds(target.compile_job) == []


def compile_job_for(model, target, settings):
    return build_compile_job(model, normalised_spec(model), target, settings)
