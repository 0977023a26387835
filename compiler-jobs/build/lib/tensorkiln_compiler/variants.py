"""Model variants derived from the source ONNX, shared by the candidates that need them.

INT8 Q/DQ comes from onnxruntime's static calibration (quantize_static, QDQ, per channel):
onnxruntime runs it on CPU, and TensorRT 10/11 consume the same Q/DQ form on GPUs. Real
exports need two fixes first, each recorded as a preprocessing step: an opset upgrade
(per-channel Q/DQ needs opset >= 13) and quant_pre_process without symbolic shape inference
when that inference fails (it asserts on many dynamic-shape exports).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import onnx
from onnx import version_converter
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process

from .candidates import BuildContext, Skipped
from .inspection import default_opset

QDQ_MIN_OPSET = 13
# Without VNNI, x86 U8S8 kernels can saturate: onnxruntime advises a 7-bit weight range there.
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")


def prepared_model(ctx: BuildContext) -> Path:
    """Opset >= 13, shapes inferred, basic optimisations applied: what quantize_static wants."""
    if "prepared" in ctx.cache:
        return ctx.cache["prepared"]
    if ctx.model.opset is None:
        raise Skipped(
            "the model imports no default-domain opset (classic-ML operators only, e.g. ai.onnx.ml): "
            "Q/DQ INT8 quantizes default-domain operators (Conv, MatMul, Gemm, ...) and it has none"
        )
    out = ctx.output_dir("variants")
    source = ctx.model.path
    if ctx.model.opset < QDQ_MIN_OPSET:
        upgraded = version_converter.convert_version(onnx.load(str(source)), QDQ_MIN_OPSET)
        source = out / "upgraded.onnx"
        onnx.save(upgraded, str(source))
        ctx.record(
            f"upgraded opset {ctx.model.opset} -> {default_opset(upgraded)} with onnx.version_converter "
            f"(per-channel Q/DQ needs opset >= {QDQ_MIN_OPSET})"
        )
    prepared = out / "prepared.onnx"
    try:
        with contextlib.chdir(out):  # ORT drops sym_shape_infer_temp.onnx into the cwd when inference fails
            quant_pre_process(str(source), str(prepared))
        ctx.record("quant_pre_process: symbolic and ONNX shape inference, basic graph optimisations")
    except Exception as e:  # ORT's symbolic shape inference asserts on many dynamic-shape exports
        quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
        ctx.record(
            f"symbolic shape inference failed ({type(e).__name__}: {str(e)[:120]}); "
            "quant_pre_process with skip_symbolic_shape=True"
        )
    ctx.cache["prepared"] = prepared
    return prepared


def qdq_model(ctx: BuildContext, *, symmetric_activations: bool) -> tuple[Path, dict]:
    """Statically calibrated INT8 Q/DQ model; TensorRT needs symmetric (signed) activations."""
    key = ("qdq", symmetric_activations)
    if key in ctx.cache:
        return ctx.cache[key]
    samples = ctx.dataset.calibration_samples()
    activation = QuantType.QInt8 if symmetric_activations else QuantType.QUInt8
    reduce_range = not symmetric_activations and not any(f in ctx.cpu_isa for f in VNNI_FLAGS)
    out = ctx.output_dir("variants") / f"qdq-{activation.name.lower()}.onnx"
    quantize_static(
        str(prepared_model(ctx)),
        str(out),
        _Samples(samples),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        reduce_range=reduce_range,
        activation_type=activation,
        weight_type=QuantType.QInt8,
        calibrate_method=CalibrationMethod.MinMax,
        extra_options={"ActivationSymmetric": symmetric_activations},
    )
    settings = {
        "format": "QDQ",
        "perChannel": True,
        "activationType": activation.name,
        "weightType": "QInt8",
        "reduceRange": reduce_range,
        "calibrateMethod": "MinMax",
        "calibrationSamples": len(samples),
    }
    ctx.cache[key] = out, settings
    return out, settings


def fp16_model(ctx: BuildContext) -> Path:
    """FP16 weights and compute, FP32 inputs/outputs (so the serving contract does not change)."""
    if "fp16" not in ctx.cache:
        from onnxruntime.transformers.float16 import convert_float_to_float16

        out = ctx.output_dir("variants") / "fp16.onnx"
        onnx.save(convert_float_to_float16(onnx.load(str(ctx.model.path)), keep_io_types=True), str(out))
        ctx.cache["fp16"] = out
    return ctx.cache["fp16"]


class _Samples(CalibrationDataReader):
    def __init__(self, samples: list[dict]):
        self._samples = iter(samples)

    def get_next(self) -> dict | None:
        return next(self._samples, None)
