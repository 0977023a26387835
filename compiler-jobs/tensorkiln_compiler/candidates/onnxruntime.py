"""onnxruntime candidates, the baseline, and the FP32 reference every candidate is checked against.

Candidates bake ORT_ENABLE_ALL graph optimisations into a saved model
(SessionOptions.optimized_model_filepath): the served file is already optimised for this
hardware class. INT8 is the calibrated Q/DQ variant, optimised the same way.

Runtime settings: a candidate runs on all the container's CPUs at ORT_ENABLE_ALL. Its variants
(`settings_variants`): `+1thread`, the same file on one intra-op thread (CPU only: Triton then scales by
instances, and one thread skips the thread pool's hand-offs that dominate small models), and
`+extended`, the source optimised at ORT_ENABLE_EXTENDED instead (no NCHWc layout
transformations, which cost reorders on some graphs): its own file, since a file saved at
ORT_ENABLE_ALL keeps the layout ALL gave it whatever level later loads it.

Output shapes: each build records those onnxruntime itself gives its file's outputs (Build.output_dims), which
Triton's onnxruntime backend checks the config against: onnxruntime's shape inference can fix a size the file
declares symbolic (minilm-l3's '461', declared [?, ?], is [?, 384] to onnxruntime 1.19 and 1.32 alike), and the
backend refuses a config's -1 against a fixed size (minilm-l3's Triton pod crash-looped so, make matrix 12-07).
They are read from a session at the optimisation level the backend opens the file with (the config's, else
ORT_ENABLE_ALL, its default): constant folding fixes more (akiki-vad's 'probability', behind an If, is [?]
unoptimised and [1] from ORT_ENABLE_BASIC up; its pod crash-looped so, make matrix 12-07).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from tensorkiln_api import Compiler, Precision

from .. import variants
from ..data import Arrays
from ..errors import InvalidInput
from ..inspection import MODEL_FIELD
from . import Build, BuildContext, Runner, Skipped

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
# How onnxruntime says it lacks an operator (custom domains, kernels missing for a type or opset).
UNSUPPORTED_OPERATOR = ("is not a registered function/op", "Could not find an implementation")


class OrtRunner(Runner):
    def __init__(self, path: Path, options: ort.SessionOptions, providers: list[str]):
        self.session = ort.InferenceSession(str(path), options, providers=providers)

    def run(self, feeds: Arrays) -> list[np.ndarray]:
        return self.session.run(None, feeds)


def session_options(threads: int, level: ort.GraphOptimizationLevel | None = None) -> ort.SessionOptions:
    """Default options but the thread count: the container's CPUs, not the host's cores."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    if level is not None:
        options.graph_optimization_level = level
    return options


def providers(ctx: BuildContext) -> list[str]:
    if ctx.gpu_class and CUDA in ort.get_available_providers():
        return [CUDA, CPU]
    return [CPU]


def reference(path: Path, threads: int) -> OrtRunner:
    """The FP32 truth: the unmodified ONNX, default options, CPU. A model it cannot load is bad input."""
    try:
        return OrtRunner(path, session_options(threads), [CPU])
    except Exception as e:  # onnxruntime's pybind errors: NotImplemented, InvalidGraph, Fail, ...
        unsupported = type(e).__name__ == "NotImplemented" or any(s in str(e) for s in UNSUPPORTED_OPERATOR)
        reason = "UnsupportedOperator" if unsupported else "ModelMalformed"
        custom = unregistered_operators(path) if unsupported else []
        named = (
            f"custom operator(s) {', '.join(custom)}: onnxruntime here registers no such domain (custom "
            "operators need their own library, e.g. onnxruntime-extensions, which neither this compiler nor "
            "Triton's onnxruntime backend loads); "
            if custom
            else ""
        )
        raise InvalidInput(reason, f"{MODEL_FIELD}: onnxruntime cannot load {path.name}: {named}{e}") from e


def unregistered_operators(path: Path) -> list[str]:
    """DOMAIN::OP for each operator (subgraphs included) whose domain has no onnxruntime kernels here and
    no model-local function: e.g. ai.onnx.contrib::SentencepieceTokenizer (onnxruntime-extensions)."""
    try:
        from onnxruntime.capi.onnxruntime_pybind11_state import get_all_opkernel_def

        model = onnx.load(str(path), load_external_data=False)
        known = {"", "ai.onnx"} | {k.domain for k in get_all_opkernel_def()} | {f.domain for f in model.functions}
    except Exception:  # a build without the kernel registry, or a file onnx cannot read: nothing to add
        return []
    found: dict[str, None] = {}
    graphs = [model.graph]
    while graphs:
        for node in graphs.pop().node:
            if node.domain not in known:
                found[f"{node.domain}::{node.op_type}"] = None
            graphs += [a.g for a in node.attribute if a.HasField("g")] + [g for a in node.attribute for g in a.graphs]
    return list(found)


def baseline(ctx: BuildContext) -> Build:
    """The unmodified ONNX on onnxruntime with default SessionOptions (threads aside)."""
    chosen = providers(ctx)
    return Build(
        Compiler.ONNX_RUNTIME,
        Precision.FP32,
        files={"model.onnx": ctx.model.path},
        settings={"graphOptimizationLevel": "default", "intraOpNumThreads": ctx.threads, "providers": chosen},
        open=lambda: OrtRunner(ctx.model.path, session_options(ctx.threads), chosen),
        baseline=True,
        output_dims=output_dims(ctx.model.path),
    )


def build(ctx: BuildContext, precision: Precision) -> Build:
    chosen = providers(ctx)
    settings: dict = {"graphOptimizationLevel": "ORT_ENABLE_ALL", "intraOpNumThreads": ctx.threads, "providers": chosen}
    if precision == Precision.FP32:
        source = ctx.model.path
    elif precision == Precision.INT8:
        source, settings["quantization"] = variants.qdq_model(ctx, symmetric_activations=False)
    elif precision == Precision.FP16 and CUDA in chosen:
        source = variants.fp16_model(ctx)
    elif precision == Precision.FP16:
        raise Skipped("FP16 needs the CUDA execution provider; onnxruntime's CPU kernels run FP16 slower than FP32")
    else:
        raise Skipped(f"onnxruntime has no {precision.value} conversion; use OpenVINO or TensorRT for it")
    name = f"onnxruntime-{precision.value.lower()}"
    build = _optimised(ctx, precision, source, name, settings, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    build.variants = lambda: settings_variants(ctx, build, source)
    return build


def _optimised(
    ctx: BuildContext,
    precision: Precision,
    source: Path,
    name: str,
    settings: dict,
    level: ort.GraphOptimizationLevel,
    variant: str = "",
) -> Build:
    """`source` optimised at `level` for this hardware, saved, and opened at that level."""
    out = ctx.output_dir(name) / "model.onnx"
    options = session_options(ctx.threads, level)
    options.optimized_model_filepath = str(out)
    options.log_severity_level = 3  # ORT warns that the saved model is hardware-specific: that is the point
    ort.InferenceSession(str(source), options, providers=settings["providers"])  # writes the optimised model
    return _opened(precision, out, {**settings, "graphOptimizationLevel": level.name}, variant)


def _opened(precision: Precision, out: Path, settings: dict, variant: str = "") -> Build:
    level = getattr(ort.GraphOptimizationLevel, settings["graphOptimizationLevel"])
    threads, chosen = settings["intraOpNumThreads"], settings["providers"]
    return Build(
        Compiler.ONNX_RUNTIME,
        precision,
        files={"model.onnx": out},
        settings=settings,
        open=lambda: OrtRunner(out, session_options(threads, level), chosen),
        variant=variant,
        output_dims=output_dims(out, level),
    )


def output_dims(
    path: Path, level: ort.GraphOptimizationLevel = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
) -> dict[str, list[int]]:
    """Each output's shape as onnxruntime gives it for the file opened at `level` (the one Triton's backend
    will open it with: ORT_ENABLE_ALL unless the config says otherwise), -1 where a size stays symbolic."""
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=[CPU])
    return {o.name: [d if isinstance(d, int) else -1 for d in o.shape] for o in session.get_outputs()}


def settings_variants(ctx: BuildContext, build: Build, source: Path) -> list[Build]:
    """`+1thread` (CPU, more than one thread to start from) and `+extended` (see the module docstring)."""
    found = []
    if CUDA not in build.settings["providers"] and build.settings["intraOpNumThreads"] > 1:
        found.append(_opened(build.precision, build.files["model.onnx"], {**build.settings, "intraOpNumThreads": 1},
                             "1thread"))  # fmt: skip
    name = f"onnxruntime-{build.precision.value.lower()}+extended"
    level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    found.append(_optimised(ctx, build.precision, source, name, build.settings, level, "extended"))
    return found
