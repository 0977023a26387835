"""InferenceModel reconciler: hardware targets -> CompileJobs -> Triton rollouts, and the status rollup."""

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime

from google.protobuf.json_format import ParseError
from kubernetes import client
from pydantic import ValidationError

from tensorkiln import apierrors
from tensorkiln.api import API_VERSION, InferenceModelSpec, field_errors
from tensorkiln.api.names import model_name_problems
from tensorkiln.builders import serving
from tensorkiln.builders.compilejob import build_compile_job, compile_job_name
from tensorkiln.builders.labels import HARDWARE_CLASS
from tensorkiln.cluster.state import ClusterState
from tensorkiln.controllers import events, owned
from tensorkiln.controllers.plan import GATHERED, plan
from tensorkiln.controllers.scaler import Outcome, Scaler
from tensorkiln.hardware.classes import GPU_PRODUCT, HardwareClass, discover, node_labels
from tensorkiln.hardware.selection import select_targets
from tensorkiln.observability import metrics as operator_metrics
from tensorkiln.registry import Registry, RegistryError
from tensorkiln.review import checks as review_checks
from tensorkiln.review import cluster as review
from tensorkiln.settings import Settings
from tensorkiln.status.conditions import condition, merge_conditions
from tensorkiln.status.inferencemodel import inference_model_status
from tensorkiln.status.serving import Rollout, desired_engine, desired_replicas, observe, with_problem

log = logging.getLogger(__name__)


def normalised_spec(model: dict) -> dict:
    """The spec validated by the same pydantic model the CRD is generated from, defaults applied: the
    schema's, and those derived from other fields (serving.maxBatchSize from shapes.batch.max, ...)."""
    return InferenceModelSpec.model_validate(model["spec"]).model_dump(by_alias=True, exclude_none=True, mode="json")


def invalid_spec_status(model: dict, reason: str, problems: str, now: datetime) -> dict:
    """Admission should have stopped this; if it did not (e.g. an older CRD), say so and stop."""
    generation = model["metadata"].get("generation", 1)
    desired = [condition(t, False, reason, problems) for t in ("Ready", "Compiled", "Deployed", "SpecValid")]
    return {
        "observedGeneration": generation,
        "phase": "Failed",
        "conditions": merge_conditions(model.get("status", {}).get("conditions"), desired, generation, now),
    }


def _apply_if_changed(state: ClusterState, model: dict, desired: dict, observed: dict | None) -> dict:
    """One object, planned alone: applied when changed, dropped from or edited by hand; never over
    an object another owner controls (owned.NameConflict)."""
    steps = plan([desired], state.confirm({desired["kind"]: observed}, [desired]), model["metadata"]["uid"])
    return _apply(state, steps.applies[0], steps.reasons[0]) if steps.applies else observed


def _apply(state: ClusterState, desired: dict, why: str) -> dict:
    meta = desired["metadata"]
    log.info("applying %s %s/%s: %s", desired["kind"], meta["namespace"], meta["name"], why)
    try:
        return state.apply(desired)
    except Exception as error:
        raise apierrors.about(error, desired["kind"], meta["namespace"], meta["name"]) from None


def _roll_out(
    state: ClusterState,
    registry: Registry,
    model: dict,
    spec: dict,
    target: HardwareClass,
    engine: str,
    replicas: int,
    settings: Settings,
    deployment: dict | None,
) -> dict:
    """Config, Deployment, Service, PDB (and HPA in HPA mode) of one target, gathered, planned
    (controllers.plan) and applied; returns the Deployment as it then is. `deployment`: the target's
    Deployment as the caller already read it."""
    namespace, name = model["metadata"]["namespace"], serving.target_name(model["metadata"]["name"], target)
    observed = {
        kind: deployment if kind == "Deployment" else state.get(api_version, kind, namespace, name)
        for api_version, kind in GATHERED
    }
    manifest = state.manifest(registry, engine)
    config_map = serving.build_config_map(model, spec, target, manifest, settings.serving_runtime)
    # Under an SLO the Deployment leaves replicas out: the scaler sets them through the scale
    # subresource (HPA mode: the HorizontalPodAutoscaler does), so template changes never touch them.
    slo_mode = (spec.get("slo") or {}).get("mode")
    desired = [
        config_map,
        serving.build_deployment(model, spec, target, engine, config_map, None if slo_mode else replicas, settings),
        serving.build_hpa(model, spec, target),
        serving.build_target_service(model, target),
        serving.build_pdb(model, target, replicas),
    ]
    desired = [d for d in desired if d is not None]
    steps = plan(desired, state.confirm(observed, desired), model["metadata"]["uid"],
                 replicas if slo_mode == "Operator" else None)  # fmt: skip
    deployment = observed["Deployment"]
    for obj, why in zip(steps.applies, steps.reasons):
        applied = _apply(state, obj, why)
        if obj["kind"] == "Deployment":
            deployment = applied
    for api_version, kind, gone in steps.deletes:
        log.info("deleting %s %s/%s: no longer desired", kind, namespace, gone)
        state.delete(api_version, kind, namespace, gone)
    # After the apply: dropping `replicas` from the applied Deployment resets it to the default.
    if steps.replicas is not None and deployment["spec"].get("replicas") != steps.replicas:
        log.info("scaling Deployment %s/%s to %d replicas", namespace, name, steps.replicas)
        deployment = state.scale_deployment(deployment, steps.replicas)
    return deployment


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


def _report_scaling(state: ClusterState, model: dict, target: HardwareClass, outcome: Outcome) -> None:
    """An Event (and a metric) per scale action, posted once the action is applied; a Warning when
    the maximum is newly reached with the SLO still missed."""
    meta = model["metadata"]
    for type_, reason, message in outcome.events:
        events.post(state.core, model, type_, reason, f"{target.name}: {message}")
        if reason in ("ScaledUp", "ScaledDown"):
            direction = reason.removeprefix("Scaled").lower()
            operator_metrics.record_scale_action(meta["namespace"], meta["name"], target.name, direction)


def _previous_slo(model: dict, target: HardwareClass) -> dict:
    entries = model.get("status", {}).get("targets", [])
    return next((e.get("slo", {}) for e in entries if e.get("hardwareClass") == target.name), {})


def reconcile(state: ClusterState, model: dict, settings: Settings, registry: Registry, scaler: Scaler) -> dict:
    """Converge one InferenceModel; returns the status it wrote (or found already right)."""
    now = datetime.now(UTC)
    meta = model["metadata"]
    try:
        spec = normalised_spec(model)
    except ValidationError as error:
        problems = "; ".join(field_errors(error))
        return _write_status(state, model, invalid_spec_status(model, "InvalidSpec", problems, now))
    if problems := model_name_problems(meta["name"]):  # admitted before the CRD's name rules existed
        return _write_status(state, model, invalid_spec_status(model, "InvalidName", "; ".join(problems), now))

    nodes = state.nodes()
    targets = [t for t in select_targets(spec["hardware"], discover(nodes), nodes)]
    existing = {
        cj["metadata"]["labels"].get(HARDWARE_CLASS): cj for cj in state.compile_jobs(meta["namespace"], meta["name"])
    }
    # Admission checks, as the webhook makes them (it may be off or bypassed): while one is an error
    # no CompileJob is created or changed, so e.g. a file:// outside the allowed roots is never mounted.
    findings = review.review(state, registry, settings, model, spec, existing)
    blocked = any(f.is_error for f in findings)
    compile_jobs, rollouts, engines, slo_outcomes, refused, conflicts = {}, {}, {}, {}, {}, {}
    scaled = spec.get("slo") is not None and spec["slo"]["mode"] == "Operator"
    for target in targets:
        if not target.nodes:
            continue  # nothing could run it; the status says which pool matched no node
        try:
            done = _reconcile_target(
                state, registry, model, spec, target, settings, scaler, blocked, existing.get(target.name), scaled
            )
        except owned.NameConflict as conflict:
            conflicts[target.name] = str(conflict)
            log.warning("%s/%s on %s: %s", meta["namespace"], meta["name"], target.name, conflict)
            continue
        for found, by_class in (
            (done.compile_job, compile_jobs), (done.rollout, rollouts), (done.engine, engines),
            (done.slo_outcome, slo_outcomes), (done.refused, refused),
        ):  # fmt: skip
            if found is not None:
                by_class[target.name] = found
    # CompileJobs and Deployments of classes that disappeared are kept: engines stay valid if the pool returns.
    if rollouts:
        try:
            service = serving.build_model_service(model)
            _apply_if_changed(state, model, service, state.get("v1", "Service", meta["namespace"], meta["name"]))
        except owned.NameConflict as conflict:
            conflicts["model Service"] = str(conflict)
    products = sorted({node_labels(n)[GPU_PRODUCT] for n in nodes if GPU_PRODUCT in node_labels(n)})
    status = inference_model_status(
        model, targets, compile_jobs, rollouts, engines, products, registry.engine_uri, now, slo_outcomes,
        spec_valid=review_checks.spec_valid_condition(findings), refused=refused, conflicts=conflicts,
    )  # fmt: skip
    return _write_status(state, model, status)


@dataclass(frozen=True)
class TargetResult:
    """What one target's reconcile found or made; None: nothing of that kind (yet)."""

    compile_job: dict | None = None
    rollout: Rollout | None = None
    engine: str | None = None  # the engine its serving objects were applied with
    slo_outcome: Outcome | None = None
    refused: str | None = None  # why Kubernetes or Triton refuse its serving objects


def _reconcile_target(
    state: ClusterState,
    registry: Registry,
    model: dict,
    spec: dict,
    target: HardwareClass,
    settings: Settings,
    scaler: Scaler,
    blocked: bool,
    existing: dict | None,
    scaled: bool,
) -> TargetResult:
    """One target: its CompileJob, then (with an engine) its serving objects."""
    meta = model["metadata"]
    name = compile_job_name(meta["name"], target.name)
    observed = existing if existing is not None and existing["metadata"]["name"] == name else None
    if blocked:
        if observed is None:
            return TargetResult()
        compile_job = observed
    else:
        if observed is None:  # not this model's: is the name free?
            observed = state.get(API_VERSION, "CompileJob", meta["namespace"], name)
        compile_job = _apply_if_changed(state, model, build_compile_job(model, spec, target, settings), observed)
    deployment = state.get("apps/v1", "Deployment", meta["namespace"], serving.target_name(meta["name"], target))
    rollout = observe(deployment)
    engine = desired_engine(compile_job, rollout)
    replicas, outcome, applied, why = desired_replicas(spec, rollout), None, None, None
    if scaled and rollout is not None and rollout.serving:
        outcome = scaler.evaluate(model, spec, target, rollout, _previous_slo(model, target))
        replicas = outcome.replicas
    if engine is not None:
        try:
            rollout = observe(_roll_out(state, registry, model, spec, target, engine, replicas, settings, deployment))
        except RegistryError as error:
            log.warning("engine %s of %s/%s unavailable: %s", engine[:12], meta["namespace"], meta["name"], error)
        except (ParseError, client.ApiException) as error:
            why = refusal(error)
            if why is None:
                raise
            # no retry can help: the status says so until the spec changes
            log.warning("serving objects of %s/%s on %s refused: %s", meta["namespace"], meta["name"],
                        target.name, why)  # fmt: skip
        else:
            applied = engine
            if outcome is not None:
                _report_scaling(state, model, target, outcome)
    if rollout is not None and not rollout.updated:
        rollout = with_problem(rollout, state.pods(meta["namespace"], serving.selector(model, target)))
    return TargetResult(compile_job, rollout, applied, outcome, why)


def _write_status(state: ClusterState, model: dict, status: dict) -> dict:
    if model.get("status") != status:
        state.apply_status(model, status)
    return status
