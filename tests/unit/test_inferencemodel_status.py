from datetime import UTC, datetime

from tensorkiln.hardware.classes import HardwareClass
from tensorkiln.status.inferencemodel import SIMULATED_POOL, Rollup, inference_model_status, phase_event
from tensorkiln.status.serving import Rollout

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
MODEL = {"metadata": {"name": "m", "generation": 3}, "spec": {}}
D1, D2 = "1" * 64, "2" * 64


def target(name, nodes=("n1",), simulated=True):
    return HardwareClass(
        name=name, kind="GPU", product=name.upper(), node_selector={}, nodes=nodes, simulated=simulated
    )


def cj(name, phase, engine=None, simulated_node=False):
    status = {"phase": phase, "simulatedNode": simulated_node}
    if engine:
        status["engine"] = {"digest": engine, "uri": "file:///r"}
    return {"metadata": {"name": name}, "status": status}


def status_of(targets, compile_jobs, rollouts=None, engines=None, products=()):
    rollup = Rollup(targets, compile_jobs, rollouts or {}, engines or {}, list(products))
    return inference_model_status(MODEL, rollup, lambda d: f"file:///r/{d}", NOW)


def conds(status):
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_no_hardware_names_the_products_seen():
    status = status_of([], {}, products=["NVIDIA-L4"])
    assert status["phase"] == "Pending"
    assert conds(status)["Ready"] == ("False", "NoMatchingHardware")
    assert "NVIDIA-L4" in status["conditions"][0]["message"]
    assert status["observedGeneration"] == 3


def test_compiling_rollup_and_summary():
    targets = [target("h100", simulated=False), target("l4", simulated=False)]
    status = status_of(targets, {"h100": cj("m-h100", "Running"), "l4": cj("m-l4", "Pending")})
    assert status["phase"] == "Compiling"
    assert status["targetSummary"] == "0/2 serving, 0 compiled"
    assert [t["compileJob"] for t in status["targets"]] == ["m-h100", "m-l4"]
    assert conds(status)["Compiled"] == ("False", "Compiling")
    assert conds(status)["Deployed"] == ("False", "AwaitingEngines")


def test_partial_failure_is_degraded_and_all_failed_is_failed():
    targets = [target("h100"), target("l4")]
    degraded = status_of(
        targets,
        {"h100": cj("a", "Failed"), "l4": cj("b", "Succeeded", D1)},
        {"l4": Rollout(D1, 1, 1, True)},
        {"l4": D1},
    )
    assert degraded["phase"] == "Degraded"
    assert conds(degraded)["Compiled"] == ("False", "CompileFailed")
    failed = status_of(targets, {"h100": cj("a", "Failed"), "l4": cj("b", "Failed")})
    assert failed["phase"] == "Failed"


def test_published_engine_rolling_out_then_ready():
    targets, jobs, engines = [target("l4")], {"l4": cj("b", "Succeeded", D1)}, {"l4": D1}
    rolling = status_of(targets, jobs, {"l4": Rollout(D1, 1, 0, False)}, engines)
    assert rolling["phase"] == "Deploying"
    assert conds(rolling)["Deployed"] == ("False", "RollingOut")
    ready = status_of(targets, jobs, {"l4": Rollout(D1, 2, 2, True)}, engines)
    assert ready["phase"] == "Ready"
    assert conds(ready)["Ready"] == ("True", "Serving")
    assert "simulated by kwok" in next(c["message"] for c in ready["conditions"] if c["type"] == "Deployed")
    assert ready["targets"][0]["engine"] == {"digest": D1, "uri": f"file:///r/{D1}"}
    assert (ready["targets"][0]["replicas"], ready["targets"][0]["readyReplicas"]) == (2, 2)
    assert ready["targetSummary"] == "1/1 serving, 1 compiled, 1 simulated"
    scaling = status_of(targets, jobs, {"l4": Rollout(D1, 3, 2, False, scaling=True)}, engines)
    assert scaling["phase"] == "Ready" and conds(scaling)["Deployed"] == ("True", "RolledOut")  # a scale-up
    stuck = Rollout(D1, 3, 2, False, problem="pod p: container triton exited 1: boom", scaling=True)
    assert conds(status_of(targets, jobs, {"l4": stuck}, engines))["Deployed"] == ("False", "RolloutBlocked")


def test_failed_recompile_keeps_the_previous_engine_serving_and_says_so():
    status = status_of([target("l4")], {"l4": cj("b", "Failed")}, {"l4": Rollout(D1, 1, 1, True)}, {"l4": D1})
    assert conds(status)["Ready"] == ("True", "Serving")
    assert conds(status)["Compiled"] == ("False", "CompileFailed")
    assert "previous engine keeps serving on l4" in next(
        c["message"] for c in status["conditions"] if c["type"] == "Compiled"
    )


def test_explicit_pool_without_nodes_is_reported():
    status = status_of([target("b200", nodes=())], {}, products=["NVIDIA-L4"])
    assert "pools b200 match no node" in status["conditions"][0]["message"]


def test_a_blocked_rollout_names_the_problem_while_old_pods_serve():
    blocked = Rollout(D1, 1, 1, False, problem="pod p: container engine-fetch exited 1: model.plan: sha256 mismatch")
    status = status_of([target("l4")], {"l4": cj("b", "Succeeded", D2)}, {"l4": blocked}, {"l4": D2})
    deployed = next(c for c in status["conditions"] if c["type"] == "Deployed")
    assert deployed["reason"] == "RolloutBlocked"
    assert "model.plan" in deployed["message"] and "previous pods keep serving" in deployed["message"]
    assert conds(status)["Ready"] == ("True", "Serving")


def test_a_name_held_by_another_owner_is_a_name_conflict_naming_object_and_owner():
    held = "Service ns/m--l4 is controlled by InferenceModel other (uid u2); it is never overwritten"
    status = inference_model_status(
        MODEL, Rollup([target("l4")], conflicts={"l4": held}), lambda d: f"file:///r/{d}", NOW
    )
    assert conds(status)["Ready"] == ("False", "NameConflict")
    assert conds(status)["Deployed"] == ("False", "NameConflict")
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["message"] == f"l4: {held}" and status["phase"] == "Failed"


def test_the_model_says_why_each_compile_failed_or_cannot_proceed_in_the_compile_jobs_words():
    failed = cj("a", "Failed")
    failed["status"]["conditions"] = [
        {"type": "Compiled", "status": "False", "reason": "ShapeMismatch", "message": "spec.shapes.batch: max 8 > 4"}
    ]
    stuck = cj("b", "Pending")
    stuck["status"]["conditions"] = [
        {"type": "Reconciled", "status": "False", "reason": "ReconcileError", "message": "Job ns/b: 403 Forbidden"}
    ]
    status = status_of([target("l4"), target("h100")], {"l4": failed, "h100": cj("c", "Succeeded", D1)})
    compiled = next(c for c in status["conditions"] if c["type"] == "Compiled")
    assert compiled["message"] == "compile failed for: l4: ShapeMismatch: spec.shapes.batch: max 8 > 4"
    status = status_of([target("l4")], {"l4": stuck})
    compiled = next(c for c in status["conditions"] if c["type"] == "Compiled")
    assert compiled["message"] == "compiling for: l4: ReconcileError: Job ns/b: 403 Forbidden"


def test_targets_stuck_only_because_their_pool_is_simulated_say_so_at_a_glance():
    """The demo's GPU models: a compile pod on a kwok node never runs, so they never compile."""
    targets = [target("h100"), target("cpu", simulated=False)]
    jobs = {"h100": cj("m-h100", "Running", simulated_node=True), "cpu": cj("m-cpu", "Succeeded", D1)}
    status = status_of(targets, jobs, {"cpu": Rollout(D1, 1, 1, True)}, {"cpu": D1})
    assert status["phase"] == "Simulated"
    assert status["targetSummary"] == "1/2 serving, 1 compiled, 1 simulated"
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "SimulatedPools")
    assert ready["message"] == (
        "h100: simulated by kwok: no compile pod runs there, so no engine is built; Triton serves on cpu"
    )
    compiled = next(c for c in status["conditions"] if c["type"] == "Compiled")
    assert compiled["message"] == f"compiling for: h100: {SIMULATED_POOL}"


def test_a_real_target_still_compiling_is_compiling_whatever_the_simulated_ones_do():
    targets = [target("h100"), target("cpu", simulated=False)]
    jobs = {"h100": cj("m-h100", "Running", simulated_node=True), "cpu": cj("m-cpu", "Running")}
    status = status_of(targets, jobs)
    assert status["phase"] == "Compiling"
    assert conds(status)["Ready"] == ("False", "Compiling")


def test_a_simulated_target_waiting_for_the_registry_is_not_blamed_on_the_simulation():
    waiting = cj("m-h100", "Pending")  # no compile pod yet: the registry is asked first
    status = status_of([target("h100")], {"h100": waiting})
    assert status["phase"] == "Compiling"


def test_a_change_of_phase_is_an_event_in_the_words_of_ready():
    ready = {"type": "Ready", "status": "True", "reason": "Serving", "message": "Triton serves on 1 targets"}
    new = {"phase": "Ready", "conditions": [ready]}
    assert phase_event({"phase": "Deploying"}, new) == ("Normal", "Ready", "Serving: Triton serves on 1 targets")
    assert phase_event(None, new) == ("Normal", "Ready", "Serving: Triton serves on 1 targets")
    assert phase_event({"phase": "Ready"}, new) is None  # no change, no event
    failed = {"phase": "Failed", "conditions": [ready | {"status": "False", "reason": "CompileFailed", "message": "x"}]}
    assert phase_event(new, failed) == ("Warning", "Failed", "CompileFailed: x")


def test_a_targets_price_or_why_it_has_none_is_in_its_entry():
    priced = HardwareClass(name="l4", kind="GPU", product="NVIDIA-L4", node_selector={}, nodes=("n",),
                           price_per_hour=0.8)  # fmt: skip
    broken = HardwareClass(name="a100", kind="GPU", product="A100", node_selector={}, nodes=("m",),
                           price_error="node m: tensorkiln.dev/price-per-hour 'abc' is not a positive number")  # fmt: skip
    model = {"metadata": {"generation": 1}, "spec": {}}
    status = inference_model_status(model, Rollup([priced, broken]), str, datetime.now(UTC))
    entries = {e["hardwareClass"]: e for e in status["targets"]}
    assert entries["l4"]["pricePerHour"] == 0.8 and "priceError" not in entries["l4"]
    assert "'abc' is not a positive number" in entries["a100"]["priceError"] and "pricePerHour" not in entries["a100"]


def test_a_compile_pod_that_cannot_start_is_the_models_reason_not_compiling():
    """A wrong compiler image: the model says ImagePullBackOff and the kubelet's words, naming the image."""
    waiting = {
        "type": "Compiled",
        "status": "Unknown",
        "reason": "ImagePullBackOff",
        "message": "compile pod x cannot start: container compiler (image bad/image:1): Back-off pulling image",
    }
    stuck = cj("m-cpu", "Pending")
    stuck["status"]["conditions"] = [waiting]
    status = status_of([target("cpu", simulated=False)], {"cpu": stuck})
    assert status["phase"] == "Compiling"
    assert conds(status)["Compiled"] == ("False", "ImagePullBackOff")
    assert conds(status)["Ready"] == ("False", "ImagePullBackOff")
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["message"] == (
        "compile pods cannot start: cpu: compile pod x cannot start: container compiler (image bad/image:1): "
        "Back-off pulling image"
    )


def test_an_engine_held_back_for_its_runtime_versions_is_the_deployed_reason_while_old_pods_serve():
    why = "engine 222222222222 was built and timed with tensorrt 10.9.0, but the serving image ... 10.5.0"
    rollup = Rollup(
        [target("l4")],
        {"l4": cj("b", "Succeeded", D2)},
        {"l4": Rollout(D1, 1, 1, True)},
        runtime_mismatches={"l4": why},
    )
    status = inference_model_status(MODEL, rollup, lambda d: f"file:///r/{d}", NOW)
    deployed = next(c for c in status["conditions"] if c["type"] == "Deployed")
    assert (deployed["status"], deployed["reason"]) == ("False", "RuntimeMismatch")
    assert deployed["message"] == f"l4: {why}"
    assert conds(status)["Ready"] == ("True", "Serving")
    assert conds(status)["Stalled"][0] == "False"  # it heals: the CompileJob compiles for the serving image
