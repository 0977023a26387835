"""InferenceModel reconciler: hardware targets -> CompileJobs, and the status rollup."""

import logging
from datetime import UTC, datetime

from pydantic import ValidationError

from tensorkiln.api import InferenceModelSpec, field_errors
from tensorkiln.builders.compilejob import build_compile_job
from tensorkiln.builders.labels import HARDWARE_CLASS
from tensorkiln.controllers.diff import contains
from tensorkiln.controllers.state import ClusterState
from tensorkiln.hardware.classes import GPU_PRODUCT, discover, node_labels
from tensorkiln.hardware.selection import select_targets
from tensorkiln.settings import Settings
from tensorkiln.status.conditions import condition, merge_conditions
from tensorkiln.status.inferencemodel import inference_model_status

log = logging.getLogger(__name__)


def normalised_spec(model: dict) -> dict:
    """The spec validated by the same pydantic model the CRD is generated from, defaults applied."""
    return InferenceModelSpec.model_validate(model["spec"]).model_dump(by_alias=True, exclude_none=True, mode="json")


def invalid_spec_status(model: dict, error: ValidationError, now: datetime) -> dict:
    """Admission should have stopped this; if it did not (e.g. an older CRD), say so and stop."""
    generation = model["metadata"].get("generation", 1)
    problems = "; ".join(field_errors(error))
    desired = [condition(t, False, "InvalidSpec", problems) for t in ("Ready", "Compiled", "Deployed")]
    return {
        "observedGeneration": generation,
        "phase": "Failed",
        "conditions": merge_conditions(model.get("status", {}).get("conditions"), desired, generation, now),
    }


def reconcile(state: ClusterState, model: dict, settings: Settings) -> dict:
    """Converge one InferenceModel; returns the status it wrote (or found already right)."""
    now = datetime.now(UTC)
    meta = model["metadata"]
    try:
        spec = normalised_spec(model)
    except ValidationError as error:
        return _write_status(state, model, invalid_spec_status(model, error, now))

    nodes = state.nodes()
    targets = select_targets(spec["hardware"], discover(nodes), nodes)
    existing = {
        cj["metadata"]["labels"].get(HARDWARE_CLASS): cj for cj in state.compile_jobs(meta["namespace"], meta["name"])
    }
    compile_jobs = {}
    for target in targets:
        if not target.nodes:
            continue  # nothing could run it; the status says which pool matched no node
        desired = build_compile_job(model, spec, target, settings)
        current = existing.get(target.name)
        if current is None or not contains(current, desired):
            current = state.apply(desired)
            log.info("applied CompileJob %s/%s", meta["namespace"], desired["metadata"]["name"])
        compile_jobs[target.name] = current
    # CompileJobs of classes that disappeared are kept: their engines stay valid if the pool returns.
    products = sorted({node_labels(n)[GPU_PRODUCT] for n in nodes if GPU_PRODUCT in node_labels(n)})
    return _write_status(state, model, inference_model_status(model, targets, compile_jobs, products, now))


def _write_status(state: ClusterState, model: dict, status: dict) -> dict:
    if model.get("status") != status:
        state.apply_status(model, status)
    return status
