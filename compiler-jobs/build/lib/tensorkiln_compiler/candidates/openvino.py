"""OpenVINO candidates: the ONNX converted to IR (model.xml + model.bin) for this CPU.

The IR's input shapes are spec.shapes, given to the converter (not reshaped after): static where the
spec fixes a size, bounded to its range at conversion (the ONNX frontend needs ranks), and then unbounded:
Triton's openvino backend (r24.10, CompareDimsSupported) matches a config's -1 only against an unbounded
dimension and a size only against the same static one, so an IR with a bounded dimension never loads
there. The IR's output shapes are recorded (Build.output_dims) for the config to give them exactly.
FP32 forces INFERENCE_PRECISION_HINT=f32, because OpenVINO otherwise computes in BF16 on CPUs that
have it (AMX, AVX512-BF16); the serving image's CPU plugin defaults to f32 the same way (Triton's
openvino backend passes no precision but HINT_BF16=YES, tritonconfig). FP16 is not built: that backend
cannot ask for it, so an FP16 candidate would be served in another precision than it was measured in.
INT8 is NNCF post-training quantization (MIXED preset) on the calibration
set, the rest of the graph in the CPU's default precision. The precision the CPU actually uses is read
back and recorded.

Timed as served: Triton's openvino backend (r24.10 to r26.08 alike) fixes a batched model's batch to
max_batch_size (ov::set_batch) and pads every smaller batch to it (ENABLE_BATCH_PADDING), so each
execution costs a full batch's compute whatever the batch Triton formed. A batched candidate's runner
pads what it is given the same way (the last row repeated) and returns the rows it was given: its
benchmark at batch 1 is what a lone request costs in Triton, and selection and the batcher tuning
(serving_tuning) compare it with onnxruntime's as served. An earlier compile timed OpenVINO at the
batch it was fed, selected openvino-bf16 for ocr-cls at 0.76 ms, and Triton then ran every request in
12.5-13 ms, at batch 32 (e2e/bench_serving.py, stop 39).

Runtime settings: the default is PERFORMANCE_HINT LATENCY on all the container's CPUs (one stream
on one socket). Its variants (`settings_variants`) run the same IR with PERFORMANCE_HINT THROUGHPUT and the
stream count THROUGHPUT picks here, and 2 streams when it picks more: `+throughput-<n>streams`,
NUM_STREAMS pinned in the recorded config so the server runs the streams that were measured, not
what THROUGHPUT would pick for its own pod. Streams run requests in parallel; one Triton instance
runs one request at a time (the openvino backend's README: streams pay off with as many instances
or parallel clients), and so does the benchmark: a THROUGHPUT variant wins only where it is faster
as served.
"""

from __future__ import annotations

import logging

import numpy as np
import openvino as ov
from tensorkiln_api import Compiler, Precision

from ..data import Arrays
from ..errors import first_line
from . import Build, BuildContext, Runner, Skipped

DEVICE = "CPU"
_HINTS = {Precision.FP32: "f32", Precision.BF16: "bf16"}
_UNBOUNDED_ONLY = "Triton's openvino backend serves an open size only unbounded"


class OvRunner(Runner):
    """Runs the compiled model; with `padded_batch`, pads a smaller batch to it as Triton's backend does."""

    def __init__(self, compiled: ov.CompiledModel, output_names: list[str], padded_batch: int | None = None):
        self.request = compiled.create_infer_request()
        self.outputs = [compiled.output(name) for name in output_names]
        self.padded_batch = padded_batch

    def run(self, feeds: Arrays) -> list[np.ndarray]:
        target = self.padded_batch
        rows = len(next(iter(feeds.values()))) if target else 0
        if target is None or rows >= target:
            results = self.request.infer(feeds)
            return [np.array(results[port]) for port in self.outputs]
        results = self.request.infer({name: padded(array, target) for name, array in feeds.items()})
        return [np.array(results[port])[:rows] for port in self.outputs]


def padded(array: np.ndarray, rows: int) -> np.ndarray:
    """`array` with its last row repeated up to `rows` rows along axis 0 (pure)."""
    return np.concatenate([array, np.repeat(array[-1:], rows - len(array), axis=0)])


def build(ctx: BuildContext, precision: Precision) -> Build:
    if ctx.gpu_class:
        raise Skipped("OpenVINO builds CPU engines here; this is a GPU class")
    core = ov.Core()
    capabilities = core.get_property(DEVICE, "OPTIMIZATION_CAPABILITIES")
    if precision == Precision.FP16:
        raise Skipped("Triton's openvino backend sets no FP16 inference precision (only HINT_BF16=YES)")
    if precision == Precision.BF16 and precision.value not in capabilities:
        raise Skipped(
            f"this CPU has no {precision.value} kernels (OpenVINO CPU capabilities: {', '.join(capabilities)})"
        )
    model = unbounded(ov.convert_model(str(ctx.model.path), input=input_shapes(ctx)), ctx)
    settings: dict = {"device": DEVICE}
    if precision == Precision.INT8:
        model, settings["quantization"] = _quantize(model, ctx)
    out = ctx.output_dir(f"openvino-{precision.value.lower()}") / "model.xml"
    ov.save_model(model, str(out), compress_to_fp16=False)  # keep FP32 weights: precision is a runtime choice
    config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": str(ctx.threads)}
    if precision in _HINTS:
        config["INFERENCE_PRECISION_HINT"] = _HINTS[precision]
    return _compiled(core, ctx, precision, out, settings, config)


def _compiled(
    core: ov.Core, ctx: BuildContext, precision: Precision, out, settings: dict, config: dict, variant: str = ""
) -> Build:
    compiled = core.compile_model(str(out), DEVICE, config)  # from the saved IR: measure what is shipped
    settings = {**settings, "config": config}
    settings["inferencePrecision"] = compiled.get_property("INFERENCE_PRECISION_HINT").to_string()
    output_names = [t.name for t in ctx.model.outputs]
    served_batch = ctx.served_max_batch_size
    if served_batch is not None:
        settings["paddedToBatch"] = served_batch  # how it was timed (module docstring); Triton pads the same
    build = Build(
        Compiler.OPENVINO,
        precision,
        files={"model.xml": out, "model.bin": out.with_suffix(".bin")},
        settings=settings,
        open=lambda: OvRunner(compiled, output_names, served_batch),
        variant=variant,
        output_dims=output_dims(compiled),  # the compiled IR in hand: its outputs are the saved IR's
    )
    if not variant:
        default_streams = streams(compiled)
        build.variants = lambda: settings_variants(core, ctx, precision, out, settings, config, default_streams)
    return build


def streams(compiled: ov.CompiledModel) -> int:
    found = compiled.get_property("NUM_STREAMS")  # an int here; an ov.properties.streams.Num in older releases
    return int(found.to_integer() if hasattr(found, "to_integer") else found)


def stream_counts(auto: int, default: int, threads: int) -> list[int]:
    """The stream counts worth a THROUGHPUT variant (pure): what THROUGHPUT picks here, and 2 when it picks
    more; never the default's own count, nor more streams than threads."""
    return sorted({n for n in (auto, min(auto, 2)) if 1 < n <= max(threads, 1) and n != default})


def settings_variants(
    core: ov.Core, ctx: BuildContext, precision: Precision, out, settings: dict, config: dict, default_streams: int
) -> list[Build]:
    """THROUGHPUT variants of the engine `out` compiled with `config` (see the module docstring)."""
    throughput = {**config, "PERFORMANCE_HINT": "THROUGHPUT"}
    auto = streams(core.compile_model(str(out), DEVICE, throughput))
    return [
        _compiled(core, ctx, precision, out, settings, {**throughput, "NUM_STREAMS": str(n)}, f"throughput-{n}streams")
        for n in stream_counts(auto, default_streams, ctx.threads)
    ]


def input_shapes(ctx: BuildContext) -> dict[str, ov.PartialShape]:
    """Each input's profile as bounded dimensions (static where min == max, a scalar as []), given at
    conversion rather than by reshape afterwards: the ONNX frontend then knows every rank while it
    converts, which graphs with If/Loop/LSTM or Squeeze need ("rank has to be known (static)"); and the
    engine accepts exactly spec.shapes, which the CPU plugin can plan for."""
    return {
        t.name: ov.PartialShape([ov.Dimension(lo, hi) for lo, hi in zip(t.profile[0], t.profile[2])])
        for t in ctx.model.inputs
    }


def unbounded(model: ov.Model, ctx: BuildContext) -> ov.Model:
    """The converted model with every size the spec leaves open (min < max) unbounded, but a batched model's
    batch axis, which the backend fixes to max_batch_size itself (module docstring); Skipped where the graph's
    output ranks then depend on those sizes (a Squeeze over them), which neither OpenVINO nor Triton serves."""
    skip_batch = 1 if ctx.model.batched else 0
    open_dims = {}
    for tensor in ctx.model.inputs:
        low, high = tensor.profile[0], tensor.profile[2]
        if any(lo != hi for lo, hi in zip(low[skip_batch:], high[skip_batch:])):
            open_dims[tensor.name] = ov.PartialShape(
                [ov.Dimension(lo, hi) if axis < skip_batch else ov.Dimension(lo) if lo == hi else ov.Dimension()
                 for axis, (lo, hi) in enumerate(zip(low, high))]
            )  # fmt: skip
    if not open_dims:
        return model
    try:
        model.reshape(open_dims)
    except RuntimeError as error:
        reason = f"{_UNBOUNDED_ONLY}, and this graph does not take its open sizes unbounded: {first_line(error)}"
        raise Skipped(reason) from error
    ranked = [port.get_any_name() for port in model.outputs if port.get_partial_shape().rank.is_dynamic]
    if ranked:
        raise Skipped(f"{_UNBOUNDED_ONLY}, and unbounded, the rank of output {ranked[0]!r} depends on the open sizes")
    return model


def output_dims(model: ov.Model | ov.CompiledModel) -> dict[str, list[int]]:
    """Each output's shape in the IR, -1 where it is dynamic (pure over the model)."""
    return {
        name: [d.get_length() if d.is_static else -1 for d in port.get_partial_shape()]
        for port in model.outputs
        for name in port.get_names()  # a tensor may carry several names; the ONNX output's is one of them
    }


def _quantize(model: ov.Model, ctx: BuildContext) -> tuple[ov.Model, dict]:
    import nncf

    nncf.set_log_level(logging.WARNING)
    samples = ctx.dataset.calibration_samples()
    # MIXED (asymmetric activations): the PERFORMANCE default lost PP-OCR det to cosine 0.84; MIXED keeps 0.994.
    preset = nncf.QuantizationPreset.MIXED
    quantized = nncf.quantize(model, nncf.Dataset(samples), subset_size=len(samples), preset=preset)
    return quantized, {
        "method": "nncf.quantize",
        "preset": preset.value,
        "nncf": nncf.__version__,
        "calibrationSamples": len(samples),
    }
