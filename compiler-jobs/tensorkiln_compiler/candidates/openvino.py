"""OpenVINO candidates: the ONNX converted to IR (model.xml + model.bin) for this CPU.

The IR's input shapes are bounded to spec.shapes, given to the converter (not reshaped after).
FP32 forces INFERENCE_PRECISION_HINT=f32, because OpenVINO otherwise computes in BF16 on CPUs that
have it (AMX, AVX512-BF16); INT8 is NNCF post-training quantization (MIXED preset) on the calibration
set, the rest of the graph in the CPU's default precision. The precision the CPU actually uses is read
back and recorded.

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
from tensorkiln.api import Compiler, Precision

from ..data import Arrays
from . import Build, BuildContext, Runner, Skipped

DEVICE = "CPU"
_HINTS = {Precision.FP32: "f32", Precision.BF16: "bf16", Precision.FP16: "f16"}


class OvRunner(Runner):
    def __init__(self, compiled: ov.CompiledModel, output_names: list[str]):
        self.request = compiled.create_infer_request()
        self.outputs = [compiled.output(name) for name in output_names]

    def run(self, feeds: Arrays) -> list[np.ndarray]:
        results = self.request.infer(feeds)
        return [np.array(results[port]) for port in self.outputs]


def build(ctx: BuildContext, precision: Precision) -> Build:
    if ctx.gpu_class:
        raise Skipped("OpenVINO builds CPU engines here; this is a GPU class")
    core = ov.Core()
    capabilities = core.get_property(DEVICE, "OPTIMIZATION_CAPABILITIES")
    if precision in (Precision.BF16, Precision.FP16) and precision.value not in capabilities:
        raise Skipped(
            f"this CPU has no {precision.value} kernels (OpenVINO CPU capabilities: {', '.join(capabilities)})"
        )
    model = ov.convert_model(str(ctx.model.path), input=input_shapes(ctx))
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
    build = Build(
        Compiler.OPENVINO,
        precision,
        files={"model.xml": out, "model.bin": out.with_suffix(".bin")},
        settings=settings,
        open=lambda: OvRunner(compiled, output_names),
        variant=variant,
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
