"""Benchmark: can NNCF's accuracy control win back the INT8 engines the accuracy gate refuses?

The compile refuses OpenVINO INT8 on nudenet-320n and layout-cdla: their outputs (box coordinates, layout
scores) move beyond spec.compile.accuracy. nncf.quantize_with_accuracy_control is OpenVINO's answer to that:
it ranks the quantizers by the accuracy they cost and reverts them to floating point, one group at a time,
until the metric drop is within a limit. This script gives it the gate itself as its metric and asks whether
the engine it returns passes the gate, and how fast it still is.

For each model, the CompileJob the operator builds from its minimal InferenceModel (as bench_compile), and
from the compiler's own code: the held-out validation batches and the onnxruntime FP32 reference
(pipeline._Validator's), OpenVINO FP32 and INT8 as a compile builds them (candidates.openvino.build). Then
accuracy control on the same calibration samples, with metric 1 - excess: excess is the worst output
element's |d| over its isclose limit, max(maxAbsError, maxRelError * |reference|), so the metric is 0 at
the gate's edge and a drop of at most 1 from the original's 1 keeps every element within it. The gate
(accuracy.compare, cosine and top-1 included) judges every engine. The passing and refused engines are then
timed together with the raw-ONNX baseline (benchmark.measure_all: interleaved rounds, the stopping rule,
bootstrap intervals) at the objective's batch size.
Writes e2e/results/int8_recovery.md.
Usage: .venv/bin/python e2e/bench_int8_recovery.py [--models nudenet-320n layout-cdla] [--reverts 40]
"""

import argparse
import logging
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse

import nncf
import numpy as np
import openvino as ov
from bench_compile import matrix_spec, speedup_bounds, staged_directory
from nncf.quantization.advanced_parameters import AdvancedAccuracyRestorerParameters
from tensorkiln_api import Precision
from tensorkiln_compiler.accuracy import compare
from tensorkiln_compiler.benchmark import BenchmarkPlan, measure_all
from tensorkiln_compiler.candidates import BuildContext
from tensorkiln_compiler.candidates import onnxruntime as ort_candidates
from tensorkiln_compiler.candidates import openvino as ov_candidates
from tensorkiln_compiler.data import load_dataset
from tensorkiln_compiler.fetch import fetch
from tensorkiln_compiler.fingerprint import fingerprint
from tensorkiln_compiler.inspection import inspect_model
from tensorkiln_local.cluster.real_models import BY_NAME

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "e2e" / "results" / "int8_recovery.md"
REFUSED = ("nudenet-320n", "layout-cdla")  # the conv nets whose INT8 the gate refuses (e2e/results/compile.md)
log = logging.getLogger("bench_int8_recovery")


def excess(outputs: list[np.ndarray], reference: list[np.ndarray], tolerance) -> float:
    """The worst element's |d| over its isclose limit (accuracy module docstring): <= 1 within the gate."""
    worst = 0.0
    for out, ref in zip(outputs, reference, strict=True):
        ref = np.asarray(ref, np.float64)
        diff = np.nan_to_num(np.abs(np.asarray(out, np.float64) - ref), nan=np.inf)
        limit = np.maximum(tolerance.max_abs_error, tolerance.max_rel_error * np.abs(ref))
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(diff == 0, 0.0, diff / limit)
        worst = max(worst, float(ratio.max(initial=0.0)))
    return worst


def recover(ctx: BuildContext, batches, reference, reverts: int) -> tuple[ov.Model, float]:
    """nncf.quantize_with_accuracy_control with the gate's excess as its metric; the model and its seconds."""
    names = [t.name for t in ctx.model.outputs]

    def validate(compiled: ov.CompiledModel, data) -> tuple[float, list[float]]:
        per_feed = []
        for feeds, expected in data:
            results = compiled(feeds)
            per_feed.append(1.0 - excess([results[compiled.output(n)] for n in names], expected, ctx.spec.accuracy))
        return min(per_feed), per_feed

    source = ov.convert_model(str(ctx.model.path), input=ov_candidates.input_shapes(ctx))
    samples = ctx.dataset.calibration_samples()
    started = time.perf_counter()
    model = nncf.quantize_with_accuracy_control(
        source, nncf.Dataset(samples), nncf.Dataset(list(zip(batches, reference, strict=True))), validate,
        max_drop=1.0, drop_type=nncf.DropType.ABSOLUTE, preset=nncf.QuantizationPreset.MIXED,
        subset_size=len(samples),
        advanced_accuracy_restorer_parameters=AdvancedAccuracyRestorerParameters(max_num_iterations=reverts),
    )  # fmt: skip
    return model, time.perf_counter() - started


def fake_quantizers(model: ov.Model) -> int:
    return sum(op.get_type_name() == "FakeQuantize" for op in model.get_ops())


def run_model(name: str, staged: Path, work: Path, reverts: int, node: dict) -> dict:
    spec = matrix_spec(name, staged)
    path = Path(urlparse(spec.source.uri).path)
    model = inspect_model(path, spec.shapes, spec.objective.batch_size, spec.io, batched=spec.batched)
    data = fetch(
        spec.calibration.dataset_uri, work / "data", field="spec.calibration.datasetUri", what="CalibrationData"
    )
    dataset = load_dataset(data, model.inputs, spec.calibration.samples, model.batched)
    ctx = BuildContext(spec=spec, model=model, dataset=dataset, fingerprint=node,
                       threads=node["cpu"]["usableCpus"], work_dir=work / name)  # fmt: skip
    batches = dataset.batches(spec.objective.batch_size)
    truth = ort_candidates.reference(path, ctx.threads)
    reference = [truth.run(b) for b in batches]

    builds = {
        "openvino-fp32": ov_candidates.build(ctx, Precision.FP32),
        "openvino-int8": ov_candidates.build(ctx, Precision.INT8),
    }
    print(f"{name}: accuracy control, up to {reverts} reverts ...", flush=True)
    recovered, seconds = recover(ctx, batches, reference, reverts)
    xml = ctx.output_dir("openvino-int8-accuracy-control") / "model.xml"
    ov.save_model(recovered, str(xml), compress_to_fp16=False)
    config = builds["openvino-int8"].settings["config"]
    compiled = ov.Core().compile_model(str(xml), ov_candidates.DEVICE, config)
    names = [t.name for t in model.outputs]
    runners = {"baseline": ort_candidates.baseline(ctx).open(), **{id: b.open() for id, b in builds.items()},
               "openvino-int8-accuracy-control": ov_candidates.OvRunner(compiled, names)}  # fmt: skip
    gates = {}
    for id, runner in runners.items():
        outputs = [runner.run(b) for b in batches]
        accuracy, rejection = compare(reference, outputs, spec.accuracy, synthetic=False,
                                      samples=dataset.manifest()["validationSamples"],
                                      batched=model.batched, names=names)  # fmt: skip
        gates[id] = (accuracy, rejection, excess([o for feed in outputs for o in feed],
                                                 [r for feed in reference for r in feed], spec.accuracy))  # fmt: skip
    benchmarks, failures = measure_all(runners, batches[0], spec.objective.batch_size, BenchmarkPlan(), ctx.threads)
    quantizers = {"openvino-int8": fake_quantizers(ov.Core().read_model(str(builds["openvino-int8"].files["model.xml"]))),
                  "openvino-int8-accuracy-control": fake_quantizers(recovered)}  # fmt: skip
    return {"name": name, "spec": spec, "gates": gates, "benchmarks": benchmarks, "failures": failures,
            "seconds": seconds, "quantizers": quantizers, "reverts": reverts}  # fmt: skip


def attempt(name: str, staged: Path, work: Path, reverts: int, node: dict) -> dict:
    """run_model, or the reason this model could not be measured (an OpenVINO conversion that fails, ...):
    one model's failure leaves the others' figures standing, and the report says why."""
    try:
        return run_model(name, staged, work, reverts, node)
    except Exception as e:
        log.exception("%s could not be measured", name)
        # The whole message on one line: OpenVINO's conversion errors end with their summary.
        return {"name": name, "error": f"{type(e).__name__}: {' '.join(str(e).split())}"}


def report(results: list[dict], cpu: dict, started: datetime, elapsed: float) -> str:
    lines = [
        "# INT8 with accuracy control: the engines the gate refuses, on this CPU",
        "",
        f"`e2e/bench_int8_recovery.py`, {started:%Y-%m-%d %H:%M} UTC, {elapsed / 60:.1f} min. Machine: "
        f"{cpu['model']}, {cpu['usableCpus']} usable CPUs (ISA {', '.join(cpu['isa'])}). "
        f"nncf {nncf.__version__}, openvino {ov.__version__}. How each figure is made: the script's docstring.",
        "",
        "| model | engine | passes the gate | worst excess (<= 1 passes) | max abs err | cosine | FakeQuantize ops "
        "| p50 ms [95% CI] | speedup over baseline (p50) |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    measured = [r for r in results if "error" not in r]
    for r in measured:
        base = r["benchmarks"].get("baseline")
        for id, (accuracy, rejection, worst) in r["gates"].items():
            bench = r["benchmarks"].get(id)
            timing = (
                f"{bench.p50_ms:.1f} [{bench.p50_interval_ms[0]:.1f}, {bench.p50_interval_ms[1]:.1f}]"
                if bench
                else f"failed: {r['failures'].get(id)}"
            )
            speedup = "-"
            if bench and base:
                low, high = speedup_bounds(base, bench)
                speedup = f"{base.p50_ms / bench.p50_ms:.2f}x [{low:.2f}, {high:.2f}]"
            lines.append(
                f"| {r['name']} | `{id}` | {'yes' if rejection is None else 'no'} | {worst:.3g} "
                f"| {accuracy.max_abs_error:.3g} | {accuracy.cosine_similarity:.5f} | {r['quantizers'].get(id, '-')} "
                f"| {timing} | {speedup} |"
            )
    lines.append("")
    lines += [f"- {r['name']}: not measured: {r['error']}" for r in results if "error" in r]
    for r in measured:
        gate = r["spec"].accuracy
        accuracy, rejection, worst = r["gates"]["openvino-int8-accuracy-control"]
        verdict = "passes the gate" if rejection is None else f"is still refused: {rejection}"
        lines.append(
            f"- {r['name']} (gate: maxAbsError {gate.max_abs_error:g}, maxRelError {gate.max_rel_error:g}, "
            f"minCosineSimilarity {gate.min_cosine_similarity:g}): accuracy control ran {r['seconds']:.0f} s with "
            f"up to {r['reverts']} reverts, kept {r['quantizers']['openvino-int8-accuracy-control']} of "
            f"{r['quantizers']['openvino-int8']} FakeQuantize ops, and its engine {verdict}."
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(REFUSED), choices=sorted(BY_NAME),
                        help="models of the coverage matrix (default: the conv nets whose INT8 is refused)")  # fmt: skip
    parser.add_argument("--reverts", type=int, default=40, help="accuracy control's max_num_iterations")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    nncf.set_log_level(logging.WARNING)
    started, t0 = datetime.now(UTC), time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-int8-") as tmp:
        staged = staged_directory(args.models, Path(tmp))
        node = fingerprint()
        results = [attempt(name, staged, Path(tmp), args.reverts, node) for name in args.models]
    args.output.write_text(report(results, node["cpu"], started, time.perf_counter() - t0))
    print(args.output.read_text())


if __name__ == "__main__":
    main()
