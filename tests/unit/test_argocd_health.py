"""The Argo CD health checks (charts/tensorkiln/argocd/*.lua), run in Lua 5.1 as Argo CD runs them
(gopher-lua: Lua 5.1, only the base and table libraries, `obj` global), on statuses the
operator's own status functions write wherever they can be built here."""

import copy
from datetime import UTC, datetime
from pathlib import Path

import pytest
from lupa import lua51
from tensorkiln.hardware.classes import HardwareClass
from tensorkiln.status.compilejob import compile_job_status
from tensorkiln.status.inferencemodel import Rollup, inference_model_status

ARGOCD = Path(__file__).resolve().parents[2] / "charts/tensorkiln/argocd"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
HEALTH = {"Healthy", "Progressing", "Degraded", "Suspended", "Missing"}

# Argo CD's sandbox: the script runs with `obj` and the base and table libraries only; string
# methods ("x"):sub() are off too, as the string library is never opened there.
RUNNER = """
function(source, obj)
  local chunk = assert(loadstring(source, "=health.lua"))
  setfenv(chunk, {
    obj = obj, ipairs = ipairs, pairs = pairs, next = next, type = type, tostring = tostring,
    tonumber = tonumber, select = select, error = error, assert = assert, pcall = pcall,
    unpack = unpack, table = table,
  })
  local strings = getmetatable("")
  local methods = strings.__index
  strings.__index = nil
  local ok, hs = pcall(chunk)
  strings.__index = methods
  if not ok then error(hs) end
  return hs
end
"""


def health(kind: str, obj: dict) -> dict:
    lua = lua51.LuaRuntime()
    source = (ARGOCD / f"health-{kind.lower()}.lua").read_text()
    hs = dict(lua.eval(RUNNER)(source, lua.table_from(obj, recursive=True)).items())
    assert hs["status"] in HEALTH and isinstance(hs["message"], str), hs
    return hs


def obj(kind: str, status: dict | None, generation: int = 1) -> dict:
    body = {
        "apiVersion": "tensorkiln.dev/v1alpha1",
        "kind": kind,
        "metadata": {"name": "resnet50", "namespace": "team-a", "generation": generation},
        "spec": {},
    }
    if status is not None:
        body["status"] = status
    return body


# --- InferenceModel -------------------------------------------------------------------------

L4 = HardwareClass(name="nvidia-l4", kind="GPU", product="NVIDIA-L4", node_selector={}, nodes=("l4-0",))
H100 = HardwareClass(name="nvidia-h100", kind="GPU", product="NVIDIA-H100", node_selector={}, nodes=("h100-0",))
SLO = {"percentile": "p95", "targetMilliseconds": 25}


def model_status(targets, compile_phases: dict[str, str]) -> dict:
    model = obj("InferenceModel", None)
    jobs = {
        name: {"metadata": {"name": f"resnet50-{name}"}, "status": {"phase": p}} for name, p in compile_phases.items()
    }
    return inference_model_status(
        model, Rollup(targets, jobs, products_seen=["NVIDIA-L4"]), lambda d: f"file:///r/{d}", NOW
    )


READY = {
    "observedGeneration": 1,
    "phase": "Ready",
    "targetSummary": "1/1 serving, 1 compiled",
    "sloSummary": "p95 18.2/25 ms",
    "conditions": [
        {"type": "Ready", "status": "True", "reason": "Serving", "message": "Triton serves on 1 targets"},
        {"type": "Compiled", "status": "True", "reason": "EnginesPublished", "message": "engines published"},
        {"type": "Deployed", "status": "True", "reason": "RolledOut", "message": "every target runs"},
        {"type": "SLOMet", "status": "True", "reason": "WithinTarget", "message": "p95 within 25 ms"},
    ],
}


def test_inference_model_ready_is_healthy_with_its_latency():
    hs = health("InferenceModel", obj("InferenceModel", READY))
    assert hs == {
        "status": "Healthy",
        "message": "Triton serves on 1 targets; p95 18.2/25 ms (1/1 serving, 1 compiled)",
    }


def test_inference_model_missing_its_slo_at_max_replicas_stays_healthy_and_says_so():
    status = copy.deepcopy(READY)
    status["conditions"][3] = {
        "type": "SLOMet",
        "status": "False",
        "reason": "MaxReplicasReached",
        "message": "nvidia-l4: p95 41.0 ms over 25 ms at maxReplicas 8",
    }
    hs = health("InferenceModel", obj("InferenceModel", status))
    assert hs["status"] == "Healthy"
    assert "SLO not met: nvidia-l4: p95 41.0 ms over 25 ms at maxReplicas 8" in hs["message"]


def test_inference_model_compiling_is_progressing():
    status = model_status([L4, H100], {"nvidia-l4": "Running", "nvidia-h100": "Succeeded"})
    assert status["phase"] == "Compiling"
    hs = health("InferenceModel", obj("InferenceModel", status))
    assert hs == {"status": "Progressing", "message": "Compiling: compiling for: nvidia-l4 (0/2 serving, 1 compiled)"}


def test_inference_model_on_simulated_pools_is_progressing_and_says_why():
    job = {"metadata": {"name": "resnet50-nvidia-l4"}, "status": {"phase": "Running", "simulatedNode": True}}
    status = inference_model_status(obj("InferenceModel", None), Rollup([L4], {"nvidia-l4": job}), str, NOW)
    assert status["phase"] == "Simulated"
    hs = health("InferenceModel", obj("InferenceModel", status))
    assert hs["status"] == "Progressing"
    assert hs["message"].startswith("Simulated: nvidia-l4: simulated by kwok: no compile pod runs there")


def test_inference_model_failed_is_degraded():
    status = model_status([L4], {"nvidia-l4": "Failed"})
    assert status["phase"] == "Failed"
    hs = health("InferenceModel", obj("InferenceModel", status))
    assert hs == {"status": "Degraded", "message": "Failed: compile failed for: nvidia-l4 (0/1 serving, 0 compiled)"}


def test_inference_model_partly_failed_is_degraded():
    status = model_status([L4, H100], {"nvidia-l4": "Failed", "nvidia-h100": "Running"})
    assert status["phase"] == "Degraded"
    assert health("InferenceModel", obj("InferenceModel", status))["status"] == "Degraded"


def test_inference_model_without_matching_hardware_is_progressing():
    status = model_status([], {})
    assert status["phase"] == "Pending"
    hs = health("InferenceModel", obj("InferenceModel", status))
    assert hs["status"] == "Progressing"
    assert hs["message"].startswith("Pending: no node matches spec.hardware")


@pytest.mark.parametrize("kind", ["InferenceModel", "CompileJob"])
def test_no_status_yet_is_progressing(kind):
    assert health(kind, obj(kind, None)) == {
        "status": "Progressing",
        "message": "Waiting for the operator to report status",
    }
    assert health(kind, obj(kind, {}))["status"] == "Progressing"


@pytest.mark.parametrize("kind", ["InferenceModel", "CompileJob"])
def test_status_of_an_older_generation_is_progressing(kind):
    done = READY if kind == "InferenceModel" else SUCCEEDED
    assert health(kind, obj(kind, done))["status"] == "Healthy"
    hs = health(kind, obj(kind, done, generation=2))  # spec edited; the operator has not caught up
    assert hs == {"status": "Progressing", "message": "Waiting for the operator to observe generation 2"}
    no_generation = obj(kind, {k: v for k, v in done.items() if k != "observedGeneration"})
    assert health(kind, no_generation)["status"] == "Progressing"


# --- CompileJob -----------------------------------------------------------------------------

SUCCEEDED = {
    "observedGeneration": 1,
    "phase": "Succeeded",
    "cacheHit": True,
    "engine": {"digest": "9f2c4e1ab3d0" + "0" * 52, "uri": "file:///r/engines/9f2c"},
    "conditions": [
        {
            "type": "Compiled",
            "status": "True",
            "reason": "CacheHit",
            "message": "engine 9f2c4e1ab3d0 (onnxruntime FP32) reused from the registry: no compile ran",
        }
    ],
}


def compile_job(job_status: dict | None, pod: dict | None, simulated=frozenset()) -> dict:
    job = None if job_status is None else {"metadata": {"name": "resnet50-cpu-1a2b"}, "status": job_status}
    return compile_job_status(obj("CompileJob", None), job, pod, set(simulated), NOW)


def pod(node: str | None, phase: str = "Pending", conditions=()) -> dict:
    return {
        "metadata": {"name": "resnet50-cpu-1a2b-x"},
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase, "conditions": list(conditions)},
    }


def test_compile_job_succeeded_is_healthy():
    hs = health("CompileJob", obj("CompileJob", SUCCEEDED))
    assert hs == {"status": "Healthy", "message": SUCCEEDED["conditions"][0]["message"]}


def test_compile_job_running_is_progressing():
    status = compile_job({"active": 1}, pod("local-0", "Running"))
    assert status["phase"] == "Running"
    hs = health("CompileJob", obj("CompileJob", status))
    assert hs == {"status": "Progressing", "message": "Running: compiler running on node local-0"}


def test_compile_job_on_a_simulated_node_stays_progressing_and_says_why():
    status = compile_job({"active": 1}, pod("h100-0", "Running"), simulated={"h100-0"})
    hs = health("CompileJob", obj("CompileJob", status))
    assert hs["status"] == "Progressing" and "simulated by kwok" in hs["message"]


def test_compile_job_unschedulable_is_progressing_with_the_schedulers_message():
    waiting = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/17 nodes are available",
    }
    status = compile_job({"active": 1}, pod(None, conditions=[waiting]))
    hs = health("CompileJob", obj("CompileJob", status))
    assert hs == {"status": "Progressing", "message": "Pending: 0/17 nodes are available"}


def test_compile_job_failed_is_degraded_with_reason_and_message():
    failed = {
        "type": "Failed",
        "status": "True",
        "reason": "BackoffLimitExceeded",
        "message": "Job has reached the specified backoff limit",
    }
    status = compile_job({"failed": 3, "conditions": [failed]}, pod("local-0", "Failed"))
    assert status["phase"] == "Failed"
    hs = health("CompileJob", obj("CompileJob", status))
    assert hs == {"status": "Degraded", "message": "BackoffLimitExceeded: Job has reached the specified backoff limit"}


def test_the_sandbox_refuses_what_argo_cd_refuses():
    lua = lua51.LuaRuntime()
    with pytest.raises(lua51.LuaError):
        lua.eval(RUNNER)('return {status = string.upper("x")}', lua.table_from({}))
    with pytest.raises(lua51.LuaError):
        lua.eval(RUNNER)('return {status = ("x"):upper()}', lua.table_from({}))
