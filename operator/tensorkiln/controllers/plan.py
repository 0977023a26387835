"""The plan step of an InferenceModel's reconcile (pure): from its `Observed` snapshot
(controllers.observed), what to write.

`plan_model` builds what the model wants (builders.compilejob, builders.serving) per target and
`plan` compares each group of objects with what holds their names: it applies the desired
objects whose hash or fields differ from what exists (controllers.owned), deletes the owned
objects no longer wanted, and carries the replicas the SLO scaler decides (scaling.slo, from what
gather observed). A name held by another owner is a NameConflict, never overwritten. Only the apply
step (controllers.inferencemodel) calls the API and commits the scaler's verdicts.
"""

import json
from dataclasses import dataclass

from google.protobuf.json_format import ParseError
from kubernetes import client
from tensorkiln_api.serving_targets import SERVING_TARGETS, runtime_difference

from tensorkiln.builders import serving, tritonconfig
from tensorkiln.builders.compilejob import build_compile_job
from tensorkiln.controllers import owned
from tensorkiln.controllers.observed import GATHERED, Observed, TargetObserved, deploying, previous_slo
from tensorkiln.hardware.classes import HardwareClass
from tensorkiln.scaling.slo import PlacementVerdict, TargetVerdict, decide_placement, decide_target
from tensorkiln.settings import Settings
from tensorkiln.status.serving import desired_replicas


@dataclass(frozen=True)
class Plan:
    applies: tuple[dict, ...] = ()  # desired objects, hash-annotated, in apply order
    deletes: tuple[tuple[str, str, str], ...] = ()  # (apiVersion, kind, name): owned, no longer wanted
    replicas: int | None = None  # through the scale subresource (the scaler's); None: the Deployment's own
    reasons: tuple[str, ...] = ()  # why each of `applies` is applied (owned.why_apply), for the log


def plan(desired: list[dict], observed: dict[str, dict | None], owner_uid: str, replicas: int | None = None) -> Plan:
    """`observed`: by kind, what exists under the target's name (None: nothing). Raises
    owned.NameConflict when a desired name is held by an object this owner does not control."""
    applies, reasons, wanted = [], [], set()
    for obj in desired:
        found = observed.get(obj["kind"])
        owned.check_owner(found, obj, owner_uid)
        hashed = owned.with_hash(obj)
        wanted.add(obj["kind"])
        if why := owned.why_apply(found, hashed):
            applies.append(hashed)
            reasons.append(why)
    deletes = [
        (api_version, kind, found["metadata"]["name"])
        for api_version, kind in GATHERED
        if kind not in wanted and owned.ours_to_delete(found := observed.get(kind), owner_uid)
    ]
    return Plan(tuple(applies), tuple(deletes), replicas, tuple(reasons))


@dataclass(frozen=True)
class TargetPlan:
    """What to write for one hardware target."""

    target: HardwareClass
    compile_job: Plan = Plan()  # its CompileJob (nothing while an admission check fails)
    serving: Plan | None = None  # its serving objects; None: nothing to roll out (yet)
    engine: str | None = None  # the engine `serving` rolls out
    served: dict | None = None  # the target's status.serving: what `serving`'s model config sets
    refused: str | None = None  # why Triton's config schema refuses the serving objects
    # why the engine is not rolled out: built with other runtime versions than the serving image's
    runtime_mismatch: str | None = None
    conflict: str | None = None  # a derived name another owner holds: nothing of the target is written
    slo: TargetVerdict | None = None  # the SLO scaler's, whose replicas `serving` carries


@dataclass(frozen=True)
class ModelPlan:
    targets: tuple[TargetPlan, ...]
    model_service: Plan | None = None  # once a target has (or gets) a Deployment
    model_service_conflict: str | None = None
    placement: PlacementVerdict | None = None  # spec.slo.placement LeastCost: what its targets follow


def refusal(error: Exception) -> str | None:
    """Why Kubernetes (400/422) or Triton's config schema refuses an object derived from a spec the
    CRD admitted (an int32 or uint32 field given more, a toleration key that is no qualified name,
    ...); None for anything else, which says nothing about the spec (retried)."""
    if isinstance(error, ParseError):
        return f"Triton's model config refuses spec.serving: {error}"
    if isinstance(error, client.ApiException) and error.status in (400, 422):
        try:
            message = json.loads(error.body).get("message") or error.reason
        except (TypeError, ValueError, AttributeError):
            message = error.reason
        return f"the API server refuses it: {message}"
    return None


def runtime_mismatch(engine: str, manifest, settings: Settings) -> str | None:
    """Why the serving image must not serve this engine: its runtime (onnxruntime, OpenVINO, TensorRT)
    is another version than the one the image's Triton release serves with; None when it may, or
    where the operator has no servingTarget (unchecked)."""
    target = SERVING_TARGETS.get(settings.serving_target or "")
    if target is None:
        return None
    difference = runtime_difference(target, manifest.compiler, manifest.runtime_versions)
    if difference is None:
        return None
    dist, found, wanted = difference
    return (
        f"engine {engine[:12]} was built and timed with {dist} {found}, but the serving image "
        f"(Triton {target.release}, server {target.server}) serves {manifest.compiler} engines with {dist} {wanted}: "
        f"not rolled out; its CompileJob compiles for {target.release}"
    )


def _serving_objects(
    observed: Observed, found: TargetObserved, replicas: int, settings: Settings
) -> tuple[list[dict], dict]:
    """The target's serving objects, and its status.serving: what their model config sets, rendered once."""
    model, spec, target, manifest = observed.model, observed.spec, found.target, found.manifest
    name = serving.triton_model_name(model)
    config = tritonconfig.config_dict(name, manifest, spec["serving"])
    config_map = serving.config_map_of(model, target, config)
    # Under an SLO the Deployment leaves replicas out: the scaler sets them through the scale
    # subresource (HPA mode: the HorizontalPodAutoscaler does), so template changes never touch them.
    fixed = None if spec.get("slo") else replicas
    desired = [
        config_map,
        serving.build_deployment(
            model, spec, target, found.engine, config_map, fixed, settings, engine_bytes=serving.engine_size(manifest)
        ),
        serving.build_hpa(model, spec, target),
        serving.build_target_service(model, target),
        serving.build_pdb(model, target, replicas),
    ]
    chosen = tritonconfig.batcher(spec["serving"], manifest, manifest.hardware_kind == "GPU")
    return [d for d in desired if d is not None], tritonconfig.served_settings(config, chosen, manifest)


def _slo_verdict(observed: Observed, found: TargetObserved, placement: PlacementVerdict | None) -> TargetVerdict | None:
    """The SLO scaler's verdict on a target: its own (placement PerClass), or its share of the model's
    least-cost placement, stabilised (LeastCost: remembered with the placement, model-wide); None for a
    target the scaler does not set (or a new one the held placement decided nothing for)."""
    if placement is not None and (outcome := placement.outcome.outcomes.get(found.target.name)) is not None:
        return None if outcome.decision is None and deploying(found) else TargetVerdict(outcome, placement.at, None)
    if found.slo is None:
        return None
    previous = previous_slo(observed.model, found.target)
    return decide_target(observed.spec, found.target, found.rollout, previous, found.manifest, found.slo)


def _plan_target(
    observed: Observed, found: TargetObserved, settings: Settings, placement: PlacementVerdict | None
) -> TargetPlan:
    model, spec, target = observed.model, observed.spec, found.target
    uid = model["metadata"]["uid"]
    compile_job = Plan()
    try:
        if not observed.blocked:  # else an existing CompileJob is left as it is
            desired = build_compile_job(model, spec, target, settings)
            compile_job = plan([desired], {"CompileJob": found.compile_job}, uid)
        engine = found.engine
        if engine is None or found.manifest is None:  # nothing compiled yet, or the registry is away
            return TargetPlan(target, compile_job)
        if mismatch := runtime_mismatch(engine, found.manifest, settings):  # what serves now keeps serving, untouched
            return TargetPlan(target, compile_job, runtime_mismatch=mismatch)
        slo = _slo_verdict(observed, found, placement)
        replicas = slo.outcome.replicas if slo else desired_replicas(spec, found.rollout)
        try:
            desired, served = _serving_objects(observed, found, replicas, settings)
        except ParseError as error:  # no retry can help: the status says so until the spec changes
            return TargetPlan(target, compile_job, refused=refusal(error))
        scale = replicas if observed.scaled_by_operator else None
        return TargetPlan(target, compile_job, plan(desired, found.serving, uid, scale), engine, served, slo=slo)
    except owned.NameConflict as conflict:
        return TargetPlan(target, conflict=str(conflict))


def plan_model(observed: Observed, settings: Settings) -> ModelPlan:
    """Everything to write for one InferenceModel, decided from its snapshot alone. Targets are
    planned in the order the hardware selection gives; the model's Service follows once any
    target serves or is about to."""
    placement = observed.placement
    verdict = decide_placement(observed.spec, placement.members, placement.signals) if placement else None
    targets = tuple(_plan_target(observed, found, settings, verdict) for found in observed.per_target.values())
    deployed = any(
        t.serving is not None or observed.per_target[t.target.name].rollout is not None
        for t in targets
        if t.conflict is None
    )
    if not deployed:
        return ModelPlan(targets, placement=verdict)
    service = serving.build_model_service(observed.model)
    try:
        return ModelPlan(
            targets,
            plan([service], {"Service": observed.model_service}, observed.model["metadata"]["uid"]),
            placement=verdict,
        )
    except owned.NameConflict as conflict:
        return ModelPlan(targets, model_service_conflict=str(conflict), placement=verdict)
