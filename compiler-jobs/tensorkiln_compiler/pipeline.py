"""The compile, step by step: nothing reaches the registry unless every step before it succeeded.

fetch -> cache lookup -> inspect -> fingerprint -> data -> reference outputs (batched: each output's axis 0
checked against the batch fed, at two sizes) -> candidates
(build, validate, benchmark) -> tune runtime settings -> select -> tune Triton's batcher for the winner
(spec.batcherTuning: serving_tuning) -> stage the winner's files -> publish.

Tuning runtime settings (Options.tune_runtime_settings): every (compiler, precision) candidate is built
with its compiler's default runtime settings. Trying every setting on every candidate would multiply
the compile time, so only the best passing candidate of each compiler (by the objective, the baseline
aside) gets its settings variants (Build.variants: OpenVINO's THROUGHPUT hint and streams,
onnxruntime's intra-op threads and graph-optimisation level). Each variant is validated like any
candidate (the same accuracy gate: the runs are cheap next to a build, and threads or another
optimisation level reorder floating-point sums), then benchmarked interleaved with the candidate it
varies, which is re-measured with them so the two are compared under the same load; its figures
replace the first round's. Selection then takes a variant only when it beats its default settings
beyond the overlap of their intervals (selection.select).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from tensorkiln_api import CompileJobSpec, Compiler, Precision
from tensorkiln_api.registry.manifest import Benchmark, CacheKey, Candidate, EngineManifest, ServingTuning, TensorInfo
from tensorkiln_api.serving_targets import SERVING_TARGETS, mismatch

from . import __version__, report, serving_tuning
from .accuracy import compare
from .benchmark import BenchmarkPlan, measure_all
from .candidates import Build, BuildContext, Runner, Skipped, builder, candidate_id
from .candidates import onnxruntime as ort_candidates
from .candidates import tensorrt as trt_candidates
from .data import Dataset, load_dataset, refused, synthesize
from .errors import CompilerVersionMismatch, InvalidInput, RuntimeMismatch, TensorRTUnavailable, first_line
from .fetch import Fetched, fetch, verify_digest
from .fingerprint import fingerprint, runtime_versions
from .inspection import UNBATCHED, ModelInfo, inspect_model
from .precisions import hardware_precisions
from .publish import Opener, Registry, default_opener, stage
from .selection import best_per_compiler, select
from .sources.credentials import Credentials
from .text import padding

log = logging.getLogger(__name__)
MAX_REASON = 600  # candidate reasons live in the manifest, not the termination message, but stay short


@dataclass(frozen=True)
class Options:
    benchmark: BenchmarkPlan = field(default_factory=BenchmarkPlan)
    trt: dict = field(default_factory=dict)  # tensorrt.plan_build keyword options
    tune_runtime_settings: bool = True  # the tuning stage (module docstring)
    namespace: str | None = None  # the CompileJob's, recorded in the manifest (EngineManifest.namespace)


@dataclass(frozen=True)
class Outcome:
    payload: dict  # the termination message
    manifest: EngineManifest | None  # None when the registry already had the engine


def require_target_runtimes(spec: CompileJobSpec, installed: dict[str, str]) -> None:
    """Refuse to build with other runtime versions than spec.servingTarget's Triton release serves with."""
    target = SERVING_TARGETS[spec.serving_target]
    problems = [found for compiler in spec.compilers if (found := mismatch(target, compiler.value, installed))]
    if problems:
        raise RuntimeMismatch(
            f"spec.servingTarget {target.release}: {'; '.join(problems)}. This compiler image was built for "
            f"another release: use one built with --build-arg SERVING_TARGET={target.release} (the chart's "
            "compilerImage), or set the chart's servingTarget to its serving image's release"
        )


def compiler_version(spec: CompileJobSpec) -> str:
    """The version the engine's cache key names: spec.compilerVersion, the operator's name for this build (a
    development build's `<release>+<build>`), which must be of this compiler's release; else the release's."""
    wanted = spec.compiler_version or __version__
    if wanted.split("+", 1)[0] != __version__:
        raise CompilerVersionMismatch(
            f"spec.compilerVersion {wanted} names another release than this compiler's {__version__}: set the "
            "chart's compilerVersion to the release of its compilerImage, or leave it unset"
        )
    return wanted


def run(
    spec: CompileJobSpec, work_dir: Path, options: Options | None = None, opener: Opener = default_opener
) -> Outcome:
    options = options or Options()
    version = compiler_version(spec)  # like the runtimes, checked before any download or build
    if spec.serving_target:
        require_target_runtimes(spec, runtime_versions())
    work_dir.mkdir(parents=True, exist_ok=True)
    source = _fetch(spec, spec.source.uri, work_dir / "model", "spec.source.uri", "Model")
    verify_digest(source, {"spec.modelDigest": spec.model_digest, "spec.source.sha256": spec.source.sha256})
    key = CacheKey(
        model_digest=source.sha256,
        options_hash=spec.options_hash,
        hardware_class=spec.hardware.class_name,
        compiler_version=version,
    )
    model = inspect_model(  # bad input: exit 2
        source.path,
        spec.shapes,
        spec.objective.batch_size,
        spec.io,
        batched=spec.batched,
        sequence=spec.sequence_batching,
    )
    registry = Registry(opener, spec.registry.uri)
    if digest := registry.lookup(key):  # a retry after a publish that was not reported
        log.info("engine %s already in the registry for this key", digest)
        return Outcome(report.cached(digest, registry.engine_uri(digest)), None)

    node = fingerprint()
    log.info("node: %s", node)
    ctx = BuildContext(
        spec=spec,
        model=model,
        dataset=_dataset(spec, model, work_dir),
        fingerprint=node,
        threads=node["cpu"]["usableCpus"],
        work_dir=work_dir,
        trt_options=options.trt,
    )
    if Compiler.TENSORRT in spec.compilers and ctx.gpu_class:
        trt_candidates.require(ctx)  # fail before minutes of other candidates, never fall back
    candidates, builds = _evaluate_all(ctx, options.benchmark, options.tune_runtime_settings)
    selection = select(candidates, spec.objective)
    candidates = [c.model_copy(update={"status": "Selected"}) if c.id == selection.winner else c for c in candidates]
    winner = builds[selection.winner]
    tuning = _serving_tuning(ctx, winner, next(c for c in candidates if c.id == selection.winner), options.benchmark)
    files_dir = work_dir / "engine"
    manifest = EngineManifest(
        key=key,
        model_name=spec.model_name,
        source_uri=spec.source.uri,
        source_artifact=source.artifact,
        hardware_kind=spec.hardware.kind.value,
        fingerprint=node,
        compiler=winner.compiler.value,
        runtime_versions=node["runtimes"],
        precision=winner.precision.value,
        inputs=[t.info() for t in model.inputs],
        outputs=engine_outputs([t.info() for t in model.outputs], winner.output_dims),
        profiles=_profiles(spec, model),
        calibration=ctx.dataset.manifest(),
        preprocessing_steps=ctx.steps,
        candidates=candidates,
        selection=selection,
        artifacts=stage(winner.files, files_dir),
        created_at=datetime.now(UTC),
        serving_tuning=tuning,
        namespace=options.namespace,
    )
    (work_dir / "manifest.json").write_text(manifest.model_dump_json(by_alias=True, indent=2))
    digest, uri = registry.publish(manifest, files_dir)
    log.info("published %s as %s (%s)", selection.winner, digest, uri)
    return Outcome(report.success(digest, uri, manifest), manifest)


def engine_outputs(outputs: list[TensorInfo], engine_dims: dict[str, list[int]] | None) -> list[TensorInfo]:
    """The ONNX graph's outputs with the shapes the engine itself gives them, where it records them (pure)."""
    if not engine_dims:
        return outputs
    return [o.model_copy(update={"dims": engine_dims.get(o.name, o.dims)}) for o in outputs]


def _serving_tuning(ctx: BuildContext, winner: Build, record: Candidate, plan: BenchmarkPlan) -> ServingTuning | None:
    """Triton's batcher and instance settings for the winner (serving_tuning.tune); a failure there loses
    only them: the engine is published, and served with the fixed defaults."""
    try:
        return serving_tuning.tune(ctx, winner, record, plan)
    except Exception:
        log.exception("tuning the batcher for %s failed; Triton gets the fixed defaults", record.id)
        return None


def _fetch(spec: CompileJobSpec, uri: str, dest_dir: Path, field: str, what: str) -> Fetched:
    """A URI of the spec (the model's, its calibration dataset's) with spec.source.credentials."""
    return fetch(uri, dest_dir, field=field, what=what, credentials=Credentials.of(spec.source.credentials))


def _dataset(spec: CompileJobSpec, model: ModelInfo, work_dir: Path) -> Dataset:
    if spec.calibration is None:
        log.info("no calibration dataset: synthesising inputs; accuracy is checked on synthetic data only")
        dataset = synthesize(model.inputs, model.batched, model.table_rows, spec.synthetic_inputs)
        log.info("synthetic inputs: %s", dataset.drawn)
        if dataset.text:
            log.info("text encoder: synthetic inputs shaped like tokenised text: %s", dataset.text)
        return dataset
    fetched = _fetch(
        spec, spec.calibration.dataset_uri, work_dir / "data", "spec.calibration.datasetUri", "CalibrationData"
    )
    return load_dataset(fetched, model.inputs, spec.calibration.samples, model.batched)


def _profiles(spec: CompileJobSpec, model: ModelInfo) -> dict:
    """spec.shapes and each input's shapes; unbatched, `batched: false` instead of the batch range it ignored."""
    shapes = spec.shapes.model_dump(by_alias=True, mode="json")
    if not model.batched:
        shapes = {"batched": False, "dynamicDims": shapes["dynamicDims"]}
    return {**shapes, "inputs": {t.name: dict(zip(("min", "opt", "max"), map(list, t.profile))) for t in model.inputs}}


def _precisions(ctx: BuildContext) -> list[Precision]:
    if ctx.spec.precisions:
        return ctx.spec.precisions
    found = hardware_precisions(ctx.gpu_class, ctx.fingerprint)
    ctx.record(f"precisions from the node's hardware (spec.compile.precisions unset): {', '.join(found)}")
    return found


def _evaluate_all(
    ctx: BuildContext, plan: BenchmarkPlan, tune: bool = True
) -> tuple[list[Candidate], dict[str, Build]]:
    """Validate the baseline and every (compiler, precision) pair, benchmark the survivors together, then
    (`tune`) the runtime-settings variants of each compiler's best with it."""
    validate = _Validator(ctx)
    records, builds, runners = [], {}, {}
    try:
        jobs = [(lambda: ort_candidates.baseline(ctx), Compiler.ONNX_RUNTIME, Precision.FP32, True)] + [
            (lambda c=c, p=p: builder(c)(ctx, p), c, p, False)
            for c, p in itertools.product(ctx.spec.compilers, _precisions(ctx))
        ]  # fmt: skip
        for make, compiler, precision, baseline in jobs:
            record, build, runner = validate(make, compiler, precision, baseline)
            records.append(record)
            if runner:
                builds[record.id], runners[record.id] = build, runner
        benchmarks, failures = _benchmark(ctx, runners, plan)
        done = _measured(records, benchmarks, failures)
        if tune:
            done = _tune(ctx, validate, done, builds, runners, plan)
    finally:
        for runner in runners.values():
            runner.close()
    measured = {record.id for record in done if record.status == "Passed"}
    return done, {id: build for id, build in builds.items() if id in measured}


def _measured(records: list[Candidate], benchmarks: dict, failures: dict) -> list[Candidate]:
    """Validated records with their benchmarks, or why benchmarking failed."""
    done = []
    for record in records:
        if record.id in benchmarks:
            record = _logged(record.model_copy(update={"benchmarks": benchmarks[record.id]}))
        elif record.id in failures:
            record = _logged(
                record.model_copy(update={"status": "Failed", "reason": f"benchmark failed: {failures[record.id]}"})
            )
        done.append(record)
    return done


def _tune(
    ctx: BuildContext,
    validate: _Validator,
    done: list[Candidate],
    builds: dict[str, Build],
    runners: dict[str, Runner],
    plan: BenchmarkPlan,
) -> list[Candidate]:
    """The tuning stage (module docstring): `done` with each compiler's best re-measured and its settings
    variants appended. Opened variants join `builds` and `runners` (closed by the caller)."""
    group, added = {}, []
    for parent in best_per_compiler(done, ctx.spec.objective):
        build = builds[parent.id]
        if build.variants is None:
            continue
        try:
            made = build.variants()
        except Exception as e:  # the default settings stand; nothing else is lost
            log.exception("building the settings variants of %s failed", parent.id)
            ctx.record(f"runtime-settings variants of {parent.id} not tried: {type(e).__name__}: {e}")
            continue
        group[parent.id] = runners[parent.id]
        for variant in made:
            record, opened, runner = validate(lambda v=variant: v, build.compiler, build.precision, False,
                                              variant.variant)  # fmt: skip
            added.append(record)
            if runner:
                builds[record.id], runners[record.id] = opened, runner
                group[record.id] = runner
    if not any(builds[id].variant for id in group):
        return done + added  # no variant passed validation: nothing to compare
    log.info("tuning runtime settings: benchmarking %s", ", ".join(group))
    benchmarks, failures = _benchmark(ctx, group, plan)
    # A re-measured candidate takes its new figures; one that failed this time keeps the first round's.
    remeasured = [
        _logged(r.model_copy(update={"benchmarks": benchmarks[r.id]})) if r.id in benchmarks else r for r in done
    ]
    return remeasured + _measured(added, benchmarks, failures)


def _benchmark(
    ctx: BuildContext, runners: dict[str, Runner], plan: BenchmarkPlan
) -> tuple[dict[str, list[Benchmark]], dict[str, str]]:
    """At objective.batchSize, then at the smallest batch the engines take (shapes.batch.min: a
    lone request's latency; unbatched, objective.batchSize is 1: one request of full shapes):
    candidate id -> benchmarks, and id -> why it failed."""
    size = ctx.spec.objective.batch_size
    smallest = ctx.spec.shapes.batch.min if ctx.model.batched else 1
    results: dict[str, list[Benchmark]] = {}
    failures: dict[str, str] = {}
    live = dict(runners)
    for batch in [size] if size == smallest else [size, smallest]:
        measured, errors = measure_all(live, ctx.dataset.batches(batch)[0], batch, plan, ctx.threads)
        for id, error in errors.items():
            log.error("benchmarking %s at batch %d failed: %s", id, batch, error)
            failures[id] = f"{type(error).__name__}: {error}"
            live.pop(id)
            results.pop(id, None)
        for id, benchmark in measured.items():
            results.setdefault(id, []).append(benchmark)
    return results, failures


class _Validator:
    """Build one candidate and check its outputs against the FP32 reference; keep it open if it passes."""

    def __init__(self, ctx: BuildContext):
        self.ctx = ctx
        self.batches = ctx.dataset.batches(ctx.spec.objective.batch_size)
        reference = ort_candidates.reference(ctx.model.path, ctx.threads)
        try:
            self.reference = [reference.run(batch) for batch in self.batches]
        except Exception as error:  # the unmodified model refuses what it was fed: no candidate can pass
            raise refused(ctx.dataset, ctx.model.inputs, error) from error
        # A text encoder's padded positions are left out of the comparison (text module docstring).
        self.padding = padding(self.batches, ctx.model.inputs, ctx.model.outputs)
        if ctx.model.batched:
            _check_output_batch_axes(ctx, reference, self.reference[0])

    def __call__(
        self, make: Callable[[], Build], compiler: Compiler, precision: Precision, baseline: bool, variant: str = ""
    ) -> tuple[Candidate, Build | None, Runner | None]:
        record = Candidate(id=candidate_id(compiler, precision, baseline, variant), compiler=compiler.value,
                           precision=precision.value, baseline=baseline, status="Failed")  # fmt: skip
        try:
            build = make()
        except Skipped as e:
            return _logged(record.model_copy(update={"reason": f"skipped: {e}"})), None, None
        except TensorRTUnavailable:
            raise
        except Exception as e:
            log.exception("building %s failed", record.id)
            return _logged(record.model_copy(update={"reason": f"build failed: {first_line(e)}"})), None, None
        record = record.model_copy(update={"settings": build.settings})
        runner = None
        try:
            runner = build.open()
            outputs = [runner.run(batch) for batch in self.batches]
            accuracy, rejection = compare(
                self.reference, outputs, self.ctx.spec.accuracy,
                samples=self.ctx.dataset.manifest()["validationSamples"], synthetic=self.ctx.dataset.synthetic,
                batched=self.ctx.dataset.batched, names=[t.name for t in self.ctx.model.outputs],
                padding=self.padding,
            )  # fmt: skip
        except Exception as e:
            log.exception("running %s failed", record.id)
            if runner:
                runner.close()
            return _logged(record.model_copy(update={"reason": f"run failed: {first_line(e)}"})), None, None
        if rejection:
            runner.close()
            update = {"status": "RejectedAccuracy", "reason": rejection, "accuracy": accuracy}
            return _logged(record.model_copy(update=update)), None, None
        return record.model_copy(update={"status": "Passed", "accuracy": accuracy}), build, runner


def _check_output_batch_axes(ctx: BuildContext, reference: Runner, outputs: list) -> None:
    """Batched, axis 0 of every output is the batch: on the reference run, at objective.batchSize and at
    one other size the profile allows, each output has as many rows as the batch fed, or ShapeMismatch
    naming it. Inspection cannot see this when the graph names no batch symbol on the output, as for
    NonMaxSuppression's selected_indices [detections, 3]; Triton would split such rows as requests."""
    size, batch = ctx.spec.objective.batch_size, ctx.spec.shapes.batch
    other = next((b for b in (1, batch.min, batch.max) if batch.min <= b <= batch.max and b != size), None)
    runs = [(size, outputs)] + ([(other, reference.run(ctx.dataset.batches(other)[0]))] if other else [])
    for fed, results in runs:
        for tensor, result in zip(ctx.model.outputs, results):
            if result.ndim == 0 or result.shape[0] != fed:
                found = (
                    "is a scalar"
                    if result.ndim == 0
                    else f"has size {result.shape[0]} on axis 0 (shape {list(result.shape)})"
                )
                raise InvalidInput(
                    "ShapeMismatch",
                    f"spec.serving.maxBatchSize: output {tensor.name!r} ({tensor.written()}) {found} for a batch of "
                    f"{fed} on the reference run: its axis 0 is not the batch; axis 0 of every output must be the "
                    f"batch when serving.maxBatchSize > 0; {UNBATCHED}",
                )


def _logged(record: Candidate) -> Candidate:
    if len(record.reason) > MAX_REASON:
        record = record.model_copy(update={"reason": record.reason[:MAX_REASON] + " ..."})
    first = record.benchmarks[0] if record.benchmarks else None
    log.info(
        "candidate %s: %s%s%s", record.id, record.status,
        f" p50 {first.p50_ms:.2f} ms p95 {first.p95_ms:.2f} ms at batch {first.batch_size}" if first else "",
        f" ({record.reason})" if record.reason else "",
    )  # fmt: skip
    return record
