"""InferenceModel reconciler: hardware targets -> CompileJobs -> Triton rollouts, and the status rollup."""

import json
import logging
from datetime import UTC, datetime

from google.protobuf.json_format import ParseError
from kubernetes import client
from pydantic import ValidationError

from tensorkiln.admission import checks as admission_checks
from tensorkiln.admission import cluster as admission
from tensorkiln.api import InferenceModelSpec, field_errors
from tensorkiln.builders import serving
from tensorkiln.builders.compilejob import build_compile_job
from tensorkiln.builders.labels import HARDWARE_CLASS
from tensorkiln.controllers import events
from tensorkiln.controllers.diff import contains
from tensorkiln.controllers.scaler import Outcome, Scaler
from tensorkiln.controllers.state import ClusterState
from tensorkiln.hardware.classes import GPU_PRODUCT, HardwareClass, discover, node_labels
from tensorkiln.hardware.selection import select_targets
from tensorkiln.observability import metrics as operator_metrics
from tensorkiln.registry import Registry, RegistryError
from tensorkiln.settings import Settings
from tensorkiln.status.conditions import condition, merge_conditions
from tensorkiln.status.inferencemodel import inference_model_status
from tensorkiln.status.serving import desired_engine, desired_replicas, observe, with_problem

log = logging.getLogger(__name__)


def normalised_spec(model: dict) -> dict:
    """The spec validated by the same pydantic model the CRD is generated from, defaults applied."""
    return InferenceModelSpec.model_validate(model["spec"]).model_dump(by_alias=True, exclude_none=True, mode="json")


def invalid_spec_status(model: dict, error: ValidationError, now: datetime) -> dict:
    """Admission should have stopped this; if it did not (e.g. an older CRD), say so and stop."""
    generation = model["metadata"].get("generation", 1)
    problems = "; ".join(field_errors(error))
    desired = [condition(t, False, "InvalidSpec", problems) for t in ("Ready", "Compiled", "Deployed", "SpecValid")]
    return {
        "observedGeneration": generation,
        "phase": "Failed",
        "conditions": merge_conditions(model.get("status", {}).get("conditions"), desired, generation, now),
    }


def _apply_if_changed(state: ClusterState, desired: dict, observed: dict | None) -> dict:
    """Server-side apply unless every desired field already holds: manual edits are put back."""
    if observed is not None and contains(observed, desired):
        return observed
    log.info("applying %s %s/%s", desired["kind"], desired["metadata"]["namespace"], desired["metadata"]["name"])
    return state.apply(desired)


def _roll_out(
    state: ClusterState,
    registry: Registry,
    model: dict,
    spec: dict,
    target: HardwareClass,
    engine: str,
    replicas: int,
    settings: Settings,
) -> dict:
    """Config, Deployment, Service, PDB (and HPA in HPA mode) of one target; returns the Deployment as observed."""
    namespace, name = model["metadata"]["namespace"], serving.target_name(model["metadata"]["name"], target)
    manifest = state.manifest(registry, engine)
    config_map = serving.build_config_map(model, spec, target, manifest, settings.serving_runtime)
    _apply_if_changed(state, config_map, state.get("v1", "ConfigMap", namespace, name))
    hpa = serving.build_hpa(model, spec, target)
    # Under an SLO the Deployment leaves replicas out: the scaler sets them through the scale
    # subresource (HPA mode: the HorizontalPodAutoscaler does), so template changes never touch them.
    slo_mode = (spec.get("slo") or {}).get("mode")
    deployment = serving.build_deployment(
        model, spec, target, engine, config_map, None if slo_mode else replicas, settings
    )
    observed = _apply_if_changed(state, deployment, state.get("apps/v1", "Deployment", namespace, name))
    if slo_mode == "Operator" and observed["spec"].get("replicas") != replicas:
        log.info("scaling Deployment %s/%s to %d replicas", namespace, name, replicas)
        observed = state.scale_deployment(namespace, name, replicas)
    if hpa is not None:
        _apply_if_changed(state, hpa, state.get("autoscaling/v2", "HorizontalPodAutoscaler", namespace, name))
    _apply_if_changed(state, serving.build_target_service(model, target), state.get("v1", "Service", namespace, name))
    pdb = serving.build_pdb(model, target, replicas)
    if pdb is not None:
        _apply_if_changed(state, pdb, state.get("policy/v1", "PodDisruptionBudget", namespace, name))
    else:
        state.delete("policy/v1", "PodDisruptionBudget", namespace, name)
    return observed


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
        return _write_status(state, model, invalid_spec_status(model, error, now))

    nodes = state.nodes()
    targets = [t for t in select_targets(spec["hardware"], discover(nodes), nodes)]
    existing = {
        cj["metadata"]["labels"].get(HARDWARE_CLASS): cj for cj in state.compile_jobs(meta["namespace"], meta["name"])
    }
    # Admission checks, as the webhook makes them (it may be off or bypassed): while one is an error
    # no CompileJob is created or changed, so e.g. a file:// outside the allowed roots is never mounted.
    findings = admission.review(state, registry, settings, model, spec, existing)
    blocked = any(f.is_error for f in findings)
    compile_jobs, rollouts, engines, slo_outcomes, refused = {}, {}, {}, {}, {}
    scaled = spec.get("slo") is not None and spec["slo"]["mode"] == "Operator"
    for target in targets:
        if not target.nodes:
            continue  # nothing could run it; the status says which pool matched no node
        if blocked:
            if target.name not in existing:
                continue
            compile_jobs[target.name] = existing[target.name]
        else:
            desired = build_compile_job(model, spec, target, settings)
            compile_jobs[target.name] = _apply_if_changed(state, desired, existing.get(target.name))
        deployment_name = serving.target_name(meta["name"], target)
        rollout = observe(state.get("apps/v1", "Deployment", meta["namespace"], deployment_name))
        engine = desired_engine(compile_jobs[target.name], rollout)
        replicas = desired_replicas(spec, rollout)
        if scaled and rollout is not None and rollout.serving:
            outcome = scaler.evaluate(model, spec, target, rollout, _previous_slo(model, target))
            slo_outcomes[target.name] = outcome
            replicas = outcome.replicas
        if engine is not None:
            try:
                rollout = observe(_roll_out(state, registry, model, spec, target, engine, replicas, settings))
            except RegistryError as error:
                log.warning("engine %s of %s/%s unavailable: %s", engine[:12], meta["namespace"], meta["name"], error)
            except (ParseError, client.ApiException) as error:
                why = refusal(error)
                if why is None:
                    raise
                refused[target.name] = why  # no retry can help: the status says so until the spec changes
                log.warning("serving objects of %s/%s on %s refused: %s", meta["namespace"], meta["name"],
                            target.name, why)  # fmt: skip
            else:
                engines[target.name] = engine
                if target.name in slo_outcomes:
                    _report_scaling(state, model, target, slo_outcomes[target.name])
        if rollout is not None and not rollout.updated:
            rollout = with_problem(rollout, state.pods(meta["namespace"], serving.selector(model, target)))
        if rollout is not None:
            rollouts[target.name] = rollout
    # CompileJobs and Deployments of classes that disappeared are kept: engines stay valid if the pool returns.
    if rollouts:
        _apply_if_changed(
            state, serving.build_model_service(model), state.get("v1", "Service", meta["namespace"], meta["name"])
        )
    products = sorted({node_labels(n)[GPU_PRODUCT] for n in nodes if GPU_PRODUCT in node_labels(n)})
    status = inference_model_status(
        model, targets, compile_jobs, rollouts, engines, products, registry.engine_uri, now, slo_outcomes,
        spec_valid=admission_checks.spec_valid_condition(findings), refused=refused,
    )  # fmt: skip
    return _write_status(state, model, status)


def _write_status(state: ClusterState, model: dict, status: dict) -> dict:
    if model.get("status") != status:
        state.apply_status(model, status)
    return status
