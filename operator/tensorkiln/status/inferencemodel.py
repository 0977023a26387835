"""InferenceModel status rolled up from its hardware targets, CompileJobs and Triton rollouts (pure)."""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from tensorkiln.hardware.classes import HardwareClass
from tensorkiln.status import gitops
from tensorkiln.status.conditions import condition, merge_conditions
from tensorkiln.status.pods import STUCK
from tensorkiln.status.serving import Rollout
from tensorkiln.status.slo import slo_conditions


def _target_entry(
    target: HardwareClass, compile_job: dict | None, rollout: Rollout | None, engine_uri: Callable[[str], str]
) -> dict:
    entry = {
        "hardwareClass": target.name,
        "kind": target.kind,
        "product": target.product,
        "nodeCount": len(target.nodes),
        "simulated": target.simulated,
    }
    if target.price_per_hour is not None:
        entry["pricePerHour"] = target.price_per_hour
    if target.price_error:
        entry["priceError"] = target.price_error[:1024]
    if compile_job is not None:
        entry["compileJob"] = compile_job["metadata"]["name"]
        entry["compilePhase"] = compile_job.get("status", {}).get("phase", "Pending")
    if rollout is not None:
        entry["replicas"] = rollout.replicas
        entry["readyReplicas"] = rollout.ready_replicas
        if rollout.engine:
            entry["engine"] = {"digest": rollout.engine, "uri": engine_uri(rollout.engine)}
    return entry


def _names(entries: list[dict]) -> str:
    return ", ".join(e["hardwareClass"] for e in entries)


def compile_job_problem(compile_job: dict | None) -> str | None:
    """Why a target's CompileJob failed or cannot be reconciled, in its own condition's words (pure)."""
    conditions = {c.get("type"): c for c in (compile_job or {}).get("status", {}).get("conditions") or []}
    for type_ in ("Reconciled", "Compiled"):
        found = conditions.get(type_)
        if found and found.get("status") == "False":
            return f"{found.get('reason')}: {found.get('message')}"
    return None


def compile_pod_cannot_start(compile_job: dict | None) -> tuple[str, str] | None:
    """(reason, message) of a CompileJob whose compile pod waits for good (a wrong image, a missing
    Secret: status.compilejob), in its Compiled condition's words (pure)."""
    conditions = (compile_job or {}).get("status", {}).get("conditions") or []
    found = next((c for c in conditions if c.get("type") == "Compiled"), None)
    if found and found.get("status") == "Unknown" and found.get("reason") in STUCK:
        return found["reason"], found.get("message", "")
    return None


SIMULATED_POOL = "simulated by kwok: no compile pod runs there, so no engine is built"


def _why(entries: list[dict], problems: dict[str, str]) -> str:
    """The targets, each with its CompileJob's reason (or the note that its pool is simulated)
    where it has one."""
    return "; ".join(
        f"{e['hardwareClass']}: {problems[e['hardwareClass']]}"
        if e["hardwareClass"] in problems
        else e["hardwareClass"]
        for e in entries
    )


def _on_simulated_node(compile_job: dict | None) -> bool:
    """Its compile pod sits on a kwok-simulated node, where it never runs: the target never gets
    an engine there (only a registry hit would have given it one)."""
    status = (compile_job or {}).get("status", {})
    return bool(status.get("simulatedNode")) and status.get("phase") in ("Pending", "Running")


def _compiled(
    entries: list[dict],
    empty: list[str],
    products_seen: list[str],
    problems: dict[str, str],
    cannot_start: dict[str, tuple[str, str]],
) -> dict:
    failed = [e for e in entries if e.get("compilePhase") == "Failed"]
    done = [e for e in entries if e.get("compilePhase") == "Succeeded"]
    if not entries:
        message = f"no node matches spec.hardware (GPU products in the cluster: {', '.join(products_seen) or 'none'})"
        if empty:
            message = f"pools {', '.join(empty)} match no node; {message}"
        return condition("Compiled", False, "NoMatchingHardware", message)
    if failed:
        keeps = [e for e in failed if "engine" in e]
        note = f"; the previous engine keeps serving on {_names(keeps)}" if keeps else ""
        return condition("Compiled", False, "CompileFailed", f"compile failed for: {_why(failed, problems)}{note}")
    if len(done) == len(entries):
        return condition("Compiled", True, "EnginesPublished", f"engines published for {len(done)} targets")
    compiling = [e for e in entries if e not in done]
    stuck = [
        (e["hardwareClass"], *cannot_start[e["hardwareClass"]]) for e in compiling if e["hardwareClass"] in cannot_start
    ]
    if stuck:  # the first one's reason: ImagePullBackOff, CreateContainerConfigError, ...
        why = "; ".join(f"{name}: {message}" for name, _, message in stuck)
        return condition("Compiled", False, stuck[0][1], f"compile pods cannot start: {why}"[:4096])
    return condition("Compiled", False, "Compiling", f"compiling for: {_why(compiling, problems)}")


SERVING_REFUSED = "ServingRefused"
RUNTIME_MISMATCH = "RuntimeMismatch"
NAME_CONFLICT = "NameConflict"


def _rolled_out(rollout: Rollout | None, engine: str) -> bool:
    """Every pod runs `engine`: updated, or only replicas added, which start without a problem."""
    if rollout is None or rollout.engine != engine:
        return False
    return rollout.updated or (rollout.scaling and not rollout.problem)


def _deployed(
    entries: list[dict],
    rollouts: Mapping[str, Rollout],
    engines: Mapping[str, str],
    refused: dict[str, str],
    runtime_mismatches: dict[str, str],
) -> dict:
    if refused:  # first: no wait ends it, only a new spec
        why = "; ".join(f"{name}: {message}" for name, message in sorted(refused.items()))
        return condition("Deployed", False, SERVING_REFUSED, why[:4096])
    if runtime_mismatches:  # before AwaitingEngines: an engine exists, and why it is held back says more
        why = "; ".join(f"{name}: {message}" for name, message in sorted(runtime_mismatches.items()))
        return condition("Deployed", False, RUNTIME_MISMATCH, why[:4096])
    pending = [e for e in entries if e["hardwareClass"] not in engines]
    if pending:
        return condition("Deployed", False, "AwaitingEngines", f"no engine yet for: {_names(pending)}")
    rolling = [e for e in entries if not _rolled_out(rollouts.get(e["hardwareClass"]), engines[e["hardwareClass"]])]
    blocked = [(e, rollouts[e["hardwareClass"]]) for e in rolling if rollouts.get(e["hardwareClass"], None)
               and rollouts[e["hardwareClass"]].problem]  # fmt: skip
    if blocked:
        entry, rollout = blocked[0]
        keeps = "; the previous pods keep serving" if rollout.serving else ""
        return condition("Deployed", False, "RolloutBlocked", f"{entry['hardwareClass']}: {rollout.problem}{keeps}")
    if rolling:
        return condition("Deployed", False, "RollingOut", f"Triton rolling out on: {_names(rolling)}")
    simulated = [e for e in entries if e["simulated"]]
    note = f" ({_names(simulated)} simulated by kwok: no Triton runs there)" if simulated else ""
    return condition("Deployed", True, "RolledOut", f"every target runs its selected engine{note}")


def _blocked_by_spec(spec_valid: dict, ready: dict, compiled: dict, phase: str) -> tuple[dict, dict, str]:
    reason, message = spec_valid["reason"], spec_valid["message"]
    if compiled["status"] != "True":
        compiled = condition("Compiled", False, reason, message)
    if ready["status"] == "True":
        return ready, compiled, phase
    # A file:// source outside the allowed roots needs a new spec; a missing claim or Secret may appear.
    phase = "Failed" if reason == "FileURINotAllowed" else "Pending"
    return condition("Ready", False, reason, message), compiled, phase


@dataclass(frozen=True)
class Rollup:
    """What a model's status is assembled from, by hardware class: what its reconcile observed and
    what its apply left (controllers.inferencemodel)."""

    targets: Sequence[HardwareClass]
    compile_jobs: Mapping[str, dict] = field(default_factory=dict)
    rollouts: Mapping[str, Rollout] = field(default_factory=dict)
    engines: Mapping[str, str] = field(default_factory=dict)  # the engine each target's serving objects run
    products_seen: Sequence[str] = ()  # the GPU products of the cluster's nodes
    slo_outcomes: Mapping = field(default_factory=dict)  # scaling.slo.Outcome, by class
    spec_valid: dict | None = None  # the admission checks' SpecValid condition (tensorkiln.review.checks)
    refused: Mapping[str, str] = field(default_factory=dict)  # why Kubernetes or Triton refuse its serving objects
    conflicts: Mapping[str, str] = field(default_factory=dict)  # derived names another owner holds (or "model Service")
    # Under spec.slo.placement LeastCost, the scaler's placement (scaling.slo.LeastCostOutcome): the cost
    # per hour and SLOMet come from it, and a target it scaled to 0 replicas is unused, not waiting.
    least_cost: object | None = None
    served: Mapping[str, dict] = field(default_factory=dict)  # batching and instances its config sets
    runtime_mismatches: Mapping[str, str] = field(default_factory=dict)  # engines held back, and why


@dataclass(frozen=True)
class Readiness:
    """The model's phase and the conditions it follows from."""

    phase: str
    ready: dict
    compiled: dict
    deployed: dict


def inference_model_status(model: dict, rollup: Rollup, engine_uri: Callable[[str], str], now: datetime) -> dict:
    """Status for `model` from `rollup`: a target entry per hardware class, the phase with Ready,
    Compiled and Deployed, the GitOps and SLO conditions."""
    generation = model["metadata"].get("generation", 1)
    entries = _entries(rollup, engine_uri)
    with_nodes = [e for e in entries if e["nodeCount"] > 0]
    serving = [e for e in with_nodes if (r := rollup.rollouts.get(e["hardwareClass"])) and r.serving]
    readiness = _readiness(rollup, entries, serving)
    compiled_count = sum(1 for e in with_nodes if e.get("compilePhase") == "Succeeded")
    simulated_count = sum(e["simulated"] for e in with_nodes)
    status = {
        "observedGeneration": generation,
        "phase": readiness.phase,
        "targetSummary": f"{len(serving)}/{len(with_nodes)} serving, {compiled_count} compiled"
        + (f", {simulated_count} simulated" if simulated_count else ""),
        "targets": entries,
    }
    desired = [readiness.ready, readiness.compiled, readiness.deployed]
    desired += gitops.model_conditions(readiness.phase, readiness.ready)
    if slo := model.get("spec", {}).get("slo"):
        for entry in entries:
            outcome = rollup.slo_outcomes.get(entry["hardwareClass"])
            if outcome is not None and outcome.slo_status:
                entry["slo"] = outcome.slo_status
        slo_conds, status["sloSummary"] = slo_conditions(slo, dict(rollup.slo_outcomes), rollup.least_cost)
        desired += slo_conds
        if rollup.least_cost is not None and rollup.least_cost.cost_per_hour is not None:
            status["costPerHour"] = rollup.least_cost.cost_per_hour
    if rollup.spec_valid is not None:
        desired.append(rollup.spec_valid)
    status["conditions"] = merge_conditions(model.get("status", {}).get("conditions"), desired, generation, now)
    return status


def _entries(rollup: Rollup, engine_uri: Callable[[str], str]) -> list[dict]:
    entries = []
    for target in rollup.targets:
        entry = _target_entry(
            target, rollup.compile_jobs.get(target.name), rollup.rollouts.get(target.name), engine_uri
        )
        if settings := rollup.served.get(target.name):
            entry["serving"] = settings
        entries.append(entry)
    return entries


def _readiness(rollup: Rollup, entries: list[dict], serving: list[dict]) -> Readiness:
    """The phase with Ready, Compiled and Deployed: from the targets' compiles and rollouts, then a
    name conflict (only a person can free the name), then the admission checks' findings."""
    with_nodes = [e for e in entries if e["nodeCount"] > 0]
    empty = [e["hardwareClass"] for e in entries if e["nodeCount"] == 0]
    jobs = rollup.compile_jobs
    problems = {name: why for name, cj in jobs.items() if (why := compile_job_problem(cj))}
    stuck = {name for name, cj in jobs.items() if name not in problems and _on_simulated_node(cj)}
    problems |= {name: SIMULATED_POOL for name in stuck}
    cannot_start = {name: found for name, cj in jobs.items() if (found := compile_pod_cannot_start(cj))}
    compiled = _compiled(with_nodes, empty, list(rollup.products_seen), problems, cannot_start)
    if with_nodes:
        deployed = _deployed(
            with_nodes, rollup.rollouts, rollup.engines, dict(rollup.refused), dict(rollup.runtime_mismatches)
        )
    else:
        deployed = condition("Deployed", False, compiled["reason"], compiled["message"])
    # Under LeastCost a class may go unused (minReplicas 0): its Deployment at 0 replicas waits for nothing.
    unused = [e for e in with_nodes if rollup.least_cost is not None and e not in serving and e.get("replicas") == 0]
    waiting = [e for e in with_nodes if e not in serving and e not in unused]
    readiness = _phase(compiled, deployed, with_nodes, serving, waiting, unused, stuck)
    if rollup.conflicts:
        why = "; ".join(f"{where}: {message}" for where, message in sorted(rollup.conflicts.items()))[:4096]
        compiled = readiness.compiled
        if compiled["status"] != "True":
            compiled = condition("Compiled", False, NAME_CONFLICT, why)
        readiness = Readiness(
            "Degraded" if serving else "Failed",
            condition("Ready", False, NAME_CONFLICT, why),
            compiled,
            condition("Deployed", False, NAME_CONFLICT, why),
        )
    if rollup.spec_valid is not None and rollup.spec_valid["status"] == "False":
        # Admission findings stop compiling: unless it already serves, that is what the model waits for.
        ready, compiled, phase = _blocked_by_spec(
            rollup.spec_valid, readiness.ready, readiness.compiled, readiness.phase
        )
        readiness = Readiness(phase, ready, compiled, readiness.deployed)
    return readiness


def _phase(
    compiled: dict,
    deployed: dict,
    with_nodes: list[dict],
    serving: list[dict],
    waiting: list[dict],
    unused: list[dict],
    stuck: set[str],
) -> Readiness:
    if serving and not waiting:
        note = f" ({_names(unused)} unused by the least-cost placement)" if unused else ""
        ready = condition("Ready", True, "Serving", f"Triton serves on {len(serving)} targets{note}")
        return Readiness("Ready" if deployed["status"] == "True" else "Deploying", ready, compiled, deployed)
    if waiting and all(e["hardwareClass"] in stuck and "engine" not in e for e in waiting):
        # Not stuck, simulated: say so at a glance, and what really serves.
        served = f"; Triton serves on {_names(serving)}" if serving else ""
        ready = condition("Ready", False, "SimulatedPools", f"{_names(waiting)}: {SIMULATED_POOL}{served}")
        return Readiness("Simulated", ready, compiled, deployed)
    blocking = compiled if compiled["status"] != "True" else deployed
    ready = condition("Ready", False, blocking["reason"], blocking["message"])
    if serving:
        phase = "Degraded"
    elif compiled["reason"] == "NoMatchingHardware":
        phase = "Pending"
    elif blocking["reason"] == SERVING_REFUSED:
        phase = "Failed"
    elif compiled["reason"] == "CompileFailed":
        phase = "Failed" if all(e.get("compilePhase") == "Failed" for e in with_nodes) else "Degraded"
    elif compiled["status"] == "True":
        phase = "Deploying"
    else:
        phase = "Compiling"
    return Readiness(phase, ready, compiled, deployed)


WARNING_PHASES = ("Degraded", "Failed")


def phase_event(old: dict | None, new: dict) -> tuple[str, str, str] | None:
    """The Event (type, reason, message) for a change of phase, in the words of the new Ready
    condition, so that `kubectl describe` tells the model's story; None when the phase holds."""
    phase = new.get("phase")
    if not phase or (old or {}).get("phase") == phase:
        return None
    ready = next((c for c in new.get("conditions", []) if c.get("type") == "Ready"), {})
    message = f"{ready.get('reason', phase)}: {ready.get('message', '')}".rstrip(": ")
    return ("Warning" if phase in WARNING_PHASES else "Normal", phase, message)
