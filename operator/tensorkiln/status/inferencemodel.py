"""InferenceModel status rolled up from its hardware targets and their CompileJobs (pure)."""

from datetime import datetime

from tensorkiln.hardware.classes import HardwareClass
from tensorkiln.status.conditions import condition, merge_conditions


def _target_entry(target: HardwareClass, compile_job: dict | None) -> dict:
    entry = {
        "hardwareClass": target.name,
        "kind": target.kind,
        "product": target.product,
        "nodeCount": len(target.nodes),
        "simulated": target.simulated,
    }
    if compile_job is not None:
        status = compile_job.get("status", {})
        entry["compileJob"] = compile_job["metadata"]["name"]
        entry["compilePhase"] = status.get("phase", "Pending")
        if "engine" in status:
            entry["engine"] = status["engine"]
    return entry


def _describe(entries: list[dict], phase: str) -> str:
    return ", ".join(e["hardwareClass"] for e in entries if e.get("compilePhase") == phase)


def inference_model_status(
    model: dict, targets: list[HardwareClass], compile_jobs: dict[str, dict], products_seen: list[str], now: datetime
) -> dict:
    """Status for `model`, given its targets and the CompileJobs that exist for them (by class)."""
    generation = model["metadata"].get("generation", 1)
    entries = [_target_entry(t, compile_jobs.get(t.name)) for t in targets]
    with_nodes = [e for e in entries if e["nodeCount"] > 0]
    succeeded = [e for e in with_nodes if e.get("compilePhase") == "Succeeded" and "engine" in e]
    failed = [e for e in with_nodes if e.get("compilePhase") == "Failed"]
    empty = [e["hardwareClass"] for e in entries if e["nodeCount"] == 0]

    if not with_nodes:
        seen = ", ".join(products_seen) or "none"
        reason, message = "NoMatchingHardware", f"no node matches spec.hardware (GPU products in the cluster: {seen})"
        if empty:
            message = f"pools {', '.join(empty)} match no node; {message}"
        compiled = condition("Compiled", False, reason, message)
        phase = "Pending"
    elif failed:
        compiled = condition("Compiled", False, "CompileFailed", f"compile failed for: {_describe(entries, 'Failed')}")
        phase = "Failed" if len(failed) == len(with_nodes) else "Degraded"
    elif len(succeeded) == len(with_nodes):
        compiled = condition("Compiled", True, "EnginesPublished", f"engines published for {len(succeeded)} targets")
        phase = "Deploying"
    else:
        compiling = [e["hardwareClass"] for e in with_nodes if e not in succeeded]
        compiled = condition("Compiled", False, "Compiling", f"compiling for: {', '.join(compiling)}")
        phase = "Compiling"

    if compiled["status"] == "True":
        deployed = condition(
            "Deployed", False, "RolloutPending", "engines are published; serving is not rolled out yet"
        )
    else:
        deployed = condition("Deployed", False, "AwaitingEngines", "serving starts once a target's engine is published")
    ready = condition(
        "Ready",
        False,
        compiled["reason"] if compiled["status"] != "True" else deployed["reason"],
        compiled["message"] if compiled["status"] != "True" else deployed["message"],
    )
    old_conditions = model.get("status", {}).get("conditions")
    return {
        "observedGeneration": generation,
        "phase": phase,
        "targetSummary": f"{len(succeeded)}/{len(with_nodes)} compiled",
        "targets": entries,
        "conditions": merge_conditions(old_conditions, [ready, compiled, deployed], generation, now),
    }
