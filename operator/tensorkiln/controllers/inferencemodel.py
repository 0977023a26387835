"""InferenceModel reconciler: gather (controllers.observed, reads only) → plan (controllers.plan, pure,
the SLO scaler's decisions included) → apply (here, the only step that writes: the objects, then the
scaler's verdicts) → commit status (status.inferencemodel, pure, from the snapshot and what was applied):
hardware targets -> CompileJobs -> Triton rollouts."""

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from kubernetes import client
from pydantic import ValidationError
from tensorkiln_api import InferenceModelSpec, field_errors
from tensorkiln_api.names import model_name_problems
from tensorkiln_api.registry import Registry

from tensorkiln import apierrors
from tensorkiln.cluster.state import ClusterState
from tensorkiln.controllers import events, owned
from tensorkiln.controllers.observed import Observed, gather
from tensorkiln.controllers.plan import ModelPlan, Plan, TargetPlan, plan_model, refusal
from tensorkiln.hardware.classes import HardwareClass
from tensorkiln.observability import metrics as operator_metrics
from tensorkiln.review import checks as review_checks
from tensorkiln.scaling.scaler import Scaler
from tensorkiln.scaling.slo import Outcome
from tensorkiln.settings import Settings
from tensorkiln.status.conditions import condition, merge_conditions
from tensorkiln.status.inferencemodel import Rollup, inference_model_status, phase_event
from tensorkiln.status.serving import Rollout, observe, with_problem

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


def _apply(state: ClusterState, desired: dict, why: str, observed: dict | None, owner_uid: str) -> dict:
    """Apply one planned object. One the cache showed absent is looked up first (the cache holds
    only our labelled objects): another owner's object under its name is never overwritten."""
    meta = desired["metadata"]
    if observed is None:
        owned.check_owner(state.confirm({desired["kind"]: None}, [desired])[desired["kind"]], desired, owner_uid)
    log.info("applying %s %s/%s: %s", desired["kind"], meta["namespace"], meta["name"], why)
    try:
        return state.apply(desired)
    except Exception as error:
        raise apierrors.about(error, desired["kind"], meta["namespace"], meta["name"]) from None


def _apply_plan(state: ClusterState, steps: Plan, observed: Mapping[str, dict | None], owner_uid: str) -> dict:
    """Write one group's plan (applies in order, then deletes, then the scale); returns by kind
    what holds each name now (`observed`, updated by what was written)."""
    now = dict(observed)
    for obj, why in zip(steps.applies, steps.reasons):
        now[obj["kind"]] = _apply(state, obj, why, observed.get(obj["kind"]), owner_uid)
    for api_version, kind, gone in steps.deletes:
        namespace = observed[kind]["metadata"]["namespace"]
        log.info("deleting %s %s/%s: no longer desired", kind, namespace, gone)
        state.delete(api_version, kind, namespace, gone)
        now[kind] = None
    # After the apply: dropping `replicas` from the applied Deployment resets it to the default.
    deployment = now.get("Deployment")
    if steps.replicas is not None and deployment is not None and deployment["spec"].get("replicas") != steps.replicas:
        meta = deployment["metadata"]
        log.info("scaling Deployment %s/%s to %d replicas", meta["namespace"], meta["name"], steps.replicas)
        now["Deployment"] = state.scale_deployment(deployment, steps.replicas)
    return now


def _report_scaling(state: ClusterState, model: dict, target: HardwareClass, outcome: Outcome) -> None:
    """An Event (and a metric) per scale action, posted once the action is applied; a Warning when
    the maximum is newly reached with the SLO still missed."""
    meta = model["metadata"]
    for type_, reason, message in outcome.events:
        events.post(state.core, model, type_, reason, f"{target.name}: {message}")
        if reason in ("ScaledUp", "ScaledDown"):
            direction = reason.removeprefix("Scaled").lower()
            operator_metrics.record_scale_action(meta["namespace"], meta["name"], target.name, direction)


def reconcile(state: ClusterState, model: dict, settings: Settings, registry: Registry, scaler: Scaler) -> dict:
    """Converge one InferenceModel: gather, plan, apply; returns the status it wrote (or found already right)."""
    now = datetime.now(UTC)
    meta = model["metadata"]
    try:
        spec = normalised_spec(model)
    except ValidationError as error:
        problems = "; ".join(field_errors(error))
        return _write_status(state, model, invalid_spec_status(model, "InvalidSpec", problems, now))
    if problems := model_name_problems(meta["name"]):  # admitted before the CRD's name rules existed
        return _write_status(state, model, invalid_spec_status(model, "InvalidName", "; ".join(problems), now))

    observed = gather(state, registry, scaler, settings, model, spec)
    steps = plan_model(observed, settings)
    results: dict[str, TargetResult] = {}
    try:
        for target in steps.targets:
            results[target.target.name] = _apply_target(state, observed, target)
    finally:  # what was applied is remembered even when a later target's write fails: no action twice
        commit_scaling(scaler, model, steps, {name for name, r in results.items() if r.engine is not None})
    conflicts = {name: r.conflict for name, r in results.items() if r.conflict}
    if steps.model_service_conflict:
        conflicts["model Service"] = steps.model_service_conflict
    if steps.model_service is not None:
        try:
            _apply_plan(state, steps.model_service, {"Service": observed.model_service}, meta["uid"])
        except owned.NameConflict as conflict:
            conflicts["model Service"] = str(conflict)
    found = {name: r for name, r in results.items() if not r.conflict}
    rollup = Rollup(
        list(observed.targets),
        {n: r.compile_job for n, r in found.items() if r.compile_job is not None},
        {n: r.rollout for n, r in found.items() if r.rollout is not None},
        {n: r.engine for n, r in found.items() if r.engine is not None},
        list(observed.products),
        {n: r.slo_outcome for n, r in found.items() if r.slo_outcome is not None},
        spec_valid=review_checks.spec_valid_condition(list(observed.findings)),
        refused={n: r.refused for n, r in found.items() if r.refused},
        conflicts=conflicts,
        least_cost=steps.placement.outcome if steps.placement else None,
        served={n: r.served for n, r in found.items() if r.served is not None},
        runtime_mismatches={n: r.runtime_mismatch for n, r in found.items() if r.runtime_mismatch},
    )
    status = inference_model_status(model, rollup, registry.engine_uri, now)
    if steps.placement is not None:  # a spill-over, capacity running short: once per new state
        for type_, reason, message in steps.placement.outcome.events:
            events.post(state.core, model, type_, reason, message)
    return _write_status(state, model, status)


@dataclass(frozen=True)
class TargetResult:
    """What one target's apply left; None: nothing of that kind (yet)."""

    compile_job: dict | None = None
    rollout: Rollout | None = None
    engine: str | None = None  # the engine its serving objects were applied with
    served: dict | None = None  # what their model config sets (TargetPlan.served)
    slo_outcome: Outcome | None = None
    refused: str | None = None  # why Kubernetes or Triton refuse its serving objects
    runtime_mismatch: str | None = None  # why its engine is not rolled out (TargetPlan.runtime_mismatch)
    conflict: str | None = None  # a derived name another owner holds


def _apply_target(state: ClusterState, observed: Observed, steps: TargetPlan) -> TargetResult:
    """One target's plan: its CompileJob, then its serving objects."""
    if steps.conflict:
        return TargetResult(conflict=steps.conflict)
    model, target = observed.model, steps.target
    meta, found = model["metadata"], observed.per_target[target.name]
    try:
        written = _apply_plan(state, steps.compile_job, {"CompileJob": found.compile_job}, meta["uid"])
    except owned.NameConflict as conflict:
        return TargetResult(conflict=str(conflict))
    compile_job = written["CompileJob"]
    if owned.holder(compile_job, meta["uid"]) is not None:
        compile_job = None  # another owner's, left alone while an admission check fails
    rollout, applied, served, refused = found.rollout, None, None, steps.refused
    if steps.serving is not None:
        try:
            written = _apply_plan(state, steps.serving, found.serving, meta["uid"])
        except owned.NameConflict as conflict:
            return TargetResult(conflict=str(conflict))
        except client.ApiException as error:
            refused = refusal(error)
            if refused is None:
                raise
            # no retry can help: the status says so until the spec changes
            log.warning("serving objects of %s/%s on %s refused: %s", meta["namespace"], meta["name"],
                        target.name, refused)  # fmt: skip
        else:
            rollout, applied, served = observe(written["Deployment"]), steps.engine, steps.served
            if steps.slo is not None:
                _report_scaling(state, model, target, steps.slo.outcome)
    if rollout is not None and not rollout.updated:
        rollout = with_problem(rollout, list(found.pods))
    outcome = steps.slo.outcome if steps.slo is not None else None
    return TargetResult(compile_job, rollout, applied, served, outcome, refused, steps.runtime_mismatch)


def commit_scaling(scaler: Scaler, model: dict, steps: ModelPlan, applied: set[str]) -> None:
    """What the SLO scaler remembers from this reconcile: each verdict whose replicas were applied (the
    targets in `applied`), and a LeastCost model's placement."""
    for target in steps.targets:
        if target.slo is not None and target.target.name in applied:
            scaler.commit_target(model, target.target.name, target.slo)
    if steps.placement is not None:
        scaler.commit_placement(model, steps.placement)


def _write_status(state: ClusterState, model: dict, status: dict) -> dict:
    if model.get("status") != status:
        state.apply_status(model, status)
        if event := phase_event(model.get("status"), status):
            events.post(state.core, model, *event)
    return status
