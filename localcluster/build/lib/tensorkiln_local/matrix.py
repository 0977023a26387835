"""Running the coverage matrix of real models on the local cluster (e2e/bench_models.py and
tests/integration/test_real_models.py): one model of tensorkiln_local.cluster.real_models applied
with its minimal spec in a namespace of its own, until Ready or its CompileJob failed; then either
its refusal checked against the fixture's, or real inputs sent through Triton and every output
compared with onnxruntime fp32 on the staged file; the selected engine and its speedup over the
raw-ONNX baseline read from the CompileJob's status."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import numpy as np
import onnxruntime as ort
from kubernetes import client
from tensorkiln_api import GROUP, VERSION
from tensorkiln_client import triton

from tensorkiln_local import install
from tensorkiln_local.cluster import real_models

SAMPLES = 4  # requests per served model


def wait_until(check, timeout: float, interval: float = 5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(interval)
    return None


def model_status(custom: client.CustomObjectsApi, namespace: str, name: str) -> dict:
    return custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", name).get("status", {})


def compile_job(custom: client.CustomObjectsApi, namespace: str) -> dict | None:
    items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "compilejobs")["items"]
    return items[0] if items else None


def condition(obj: dict, type_: str) -> dict:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == type_), {})


def settled(custom: client.CustomObjectsApi, namespace: str, name: str) -> str | None:
    """Ready; Failed (the compile failed, or the operator refuses to serve the engine); else None."""
    phase = model_status(custom, namespace, name).get("phase")
    job = compile_job(custom, namespace)
    if phase in ("Ready", "Failed") or (job and job.get("status", {}).get("phase") == "Failed"):
        return phase or "Failed"
    return None


SERVED, REFUSED = "served, matches onnxruntime", "refused as expected"
EXPECTED = (SERVED, REFUSED)  # each model's row ends in one of these, as its fixture says


def compare(served: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> tuple[float, float]:
    """(lowest cosine similarity, largest max abs error) over the outputs both have."""
    cosines, errors = [], []
    for name, want in reference.items():
        if name not in served or want.dtype.kind not in "fc":
            continue
        got, want = served[name].astype(np.float64).ravel(), want.astype(np.float64).ravel()
        if got.shape != want.shape:
            return float("nan"), float("inf")
        errors.append(float(np.max(np.abs(got - want))) if got.size else 0.0)
        norm = np.linalg.norm(got) * np.linalg.norm(want)
        cosines.append(float(got @ want / norm) if norm else 1.0)
    return min(cosines, default=1.0), max(errors, default=0.0)


def infer_and_compare(api, model: real_models.RealModel, namespace: str, staged: Path) -> tuple[float, float]:
    address = triton.service_address(api, namespace, model.name)
    triton.until_routed(lambda: triton.grpc_client(address).is_model_ready(model.name))
    session = ort.InferenceSession(str(staged / model.filename), providers=["CPUExecutionProvider"])
    arrays = model.samples(staged / model.filename, SAMPLES, 7)
    worst_cosine, worst_error = 1.0, 0.0
    for i in range(SAMPLES):
        # Unbatched: sample i at its full shape (a 0-d array for a scalar: onnxruntime takes no numpy scalar).
        feeds = {name: values[i : i + 1] if model.batched else np.asarray(values[i]) for name, values in arrays.items()}
        # Triton has no rank-0 tensor: a scalar goes as [1] (builders.tritonconfig).
        served = triton.infer(address, model.name, {name: np.atleast_1d(value) for name, value in feeds.items()})
        reference = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
        cosine, error = compare(served, reference)
        worst_cosine, worst_error = min(worst_cosine, cosine), max(worst_error, error)
    return worst_cosine, worst_error


def served_by(api, namespace: str, name: str) -> str:
    """The platform or backend Triton loaded the model with, as the server itself reports its config."""
    reported = triton.grpc_client(triton.service_address(api, namespace, name)).get_model_config(name, as_json=True)
    return reported["config"].get("platform") or reported["config"].get("backend", "")


def speedup(job: dict) -> tuple[str, str, float | None]:
    candidates = job.get("status", {}).get("candidates", [])
    selected = next((c for c in candidates if c.get("status") == "Selected"), None)
    baseline = next((c for c in candidates if c.get("id") == "baseline"), None)
    if selected is None:
        return "-", "-", None
    ratio = baseline["p50Ms"] / selected["p50Ms"] if baseline and selected.get("p50Ms") else None
    return selected["id"], f"{selected.get('p50Ms', float('nan')):.2f} ms", ratio


def run_one(api, model: real_models.RealModel, staged: Path, timeout: float) -> dict:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    namespace = f"matrix-{uuid.uuid4().hex[:6]}"
    install.create_namespace(core, namespace)  # with the registry claim compile and Triton pods mount
    body = model.inference_model()
    body["metadata"]["namespace"] = namespace
    started = time.monotonic()
    row = {"model": model.name, "category": model.category, "quirks": model.quirks}
    try:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", body)
        outcome = wait_until(lambda: settled(custom, namespace, model.name), timeout)
        row["seconds"] = time.monotonic() - started
        job = compile_job(custom, namespace) or {}
        compiled = condition(job, "Compiled")
        if model.refusal:  # by the compile (Compiled) or, for an engine Triton cannot serve, by the operator (Ready)
            reason, message = model.refusal
            ready = condition({"status": model_status(custom, namespace, model.name)}, "Ready")
            answer = ready if compiled.get("status") == "True" else compiled
            got = f"{answer.get('reason')}: {answer.get('message', '')}"
            expected = answer.get("reason") == reason and message in got
            row["result"] = REFUSED if expected else f"WRONG: {got[:300]}"
            return row
        if outcome != "Ready":
            ready = condition({"status": model_status(custom, namespace, model.name)}, "Ready")
            row["result"] = f"NOT READY ({outcome}): {ready.get('reason')}: {ready.get('message', '')[:300]}"
            return row
        row["engine"], row["p50"], row["speedup"] = speedup(job)
        cosine, error = infer_and_compare(api, model, namespace, staged)
        row["served_by"] = served_by(api, namespace, model.name)
        gate = (body["spec"].get("compile", {}).get("accuracy") or {}).get("minCosineSimilarity", 0.99)
        row["cosine"], row["max_abs_error"] = cosine, error
        row["result"] = SERVED if cosine >= gate else f"served, DIFFERS (cosine {cosine:.4f})"
        return row
    finally:
        install.delete_namespace(core, namespace)


def table(rows: list[dict]) -> list[str]:
    lines = [
        "| model | covers | quirks | result | selected engine | served by | p50 | speedup vs baseline "
        "| cosine vs onnxruntime |",
        "| --- | --- | --- | --- | --- | --- | ---: | ---: | ---: |",
    ]
    for r in rows:
        ratio = f"{r['speedup']:.2f}x" if r.get("speedup") else "-"
        cosine = f"{r['cosine']:.5f}" if "cosine" in r else "-"
        lines.append(
            f"| {r['model']} | {r['category']} | {r['quirks']} | {r['result']} | {r.get('engine', '-')} "
            f"| {r.get('served_by', '-')} | {r.get('p50', '-')} | {ratio} | {cosine} |"
        )
    return lines
