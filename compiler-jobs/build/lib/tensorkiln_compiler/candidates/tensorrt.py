"""TensorRT candidates: serialized plans built with the TensorRT builder API on the target GPU.

plan_build() translates the spec into builder settings (pure, unit-tested): one optimisation
profile with min/opt/max per input from spec.shapes; on TensorRT 10 precision comes from
builder flags (FP16, BF16, INT8 with Q/DQ input); TensorRT 11 dropped those flags, so the
network is strongly typed and precision comes from the ONNX (FP16 export, INT8 as Q/DQ).
A GPU class that lists TensorRT fails with TensorRTUnavailable when it cannot build here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tensorkiln_api import Compiler, Precision

from .. import variants
from ..data import Arrays
from ..errors import TensorRTUnavailable
from ..inspection import ModelInfo, Shape
from . import Build, BuildContext, Runner, Skipped

OLDEST_MAJOR = 10
HARDWARE_COMPATIBILITY = {
    "none": "NONE",  # fastest: runs only on this GPU's compute capability
    "same-compute-capability": "SAME_COMPUTE_CAPABILITY",
    "ampere-plus": "AMPERE_PLUS",
}
TIMING_CACHE = "tensorrt.timing-cache"

_V10_FLAGS = {
    Precision.FP32: (),
    Precision.FP16: ("FP16",),
    Precision.BF16: ("BF16",),
    Precision.INT8: ("INT8", "FP16"),
}
_V11_ONNX = {Precision.FP32: "source", Precision.FP16: "fp16", Precision.INT8: "qdq"}


@dataclass(frozen=True)
class TrtPlan:
    onnx_variant: str  # source | fp16 | qdq: which ONNX the parser reads
    network_flags: tuple[str, ...]  # trt.NetworkDefinitionCreationFlag names
    builder_flags: tuple[str, ...]  # trt.BuilderFlag names
    profile: dict[str, tuple[Shape, Shape, Shape]]  # input -> (min, opt, max)
    hardware_compatibility: str  # trt.HardwareCompatibilityLevel name

    def settings(self, version: str) -> dict:
        return {
            "tensorrt": version,
            "onnx": self.onnx_variant,
            "networkFlags": list(self.network_flags),
            "builderFlags": list(self.builder_flags),
            "profile": {name: [list(s) for s in shapes] for name, shapes in self.profile.items()},
            "hardwareCompatibility": self.hardware_compatibility,
            "timingCache": TIMING_CACHE,
        }


def plan_build(
    model: ModelInfo, precision: Precision, version: str, *, hardware_compatibility: str = "none",
    version_compatible: bool = False,
) -> TrtPlan:  # fmt: skip
    major = int(version.split(".")[0])
    if major < OLDEST_MAJOR:
        raise TensorRTUnavailable(f"TensorRT {version} is older than {OLDEST_MAJOR}, the oldest this compiler drives")
    if major >= 11:  # strongly typed: the ONNX carries the precision
        if precision not in _V11_ONNX:
            raise Skipped(
                f"TensorRT {version} takes {precision.value} from the ONNX, and there is no {precision.value} export"
            )
        variant, network_flags, builder_flags = _V11_ONNX[precision], ("STRONGLY_TYPED",), ()
    else:
        variant = "qdq" if precision == Precision.INT8 else "source"
        network_flags, builder_flags = (), _V10_FLAGS[precision]
    if version_compatible:  # a plan that newer TensorRT runtimes can load (with the lean runtime)
        builder_flags += ("VERSION_COMPATIBLE", "EXCLUDE_LEAN_RUNTIME")
    return TrtPlan(
        onnx_variant=variant,
        network_flags=network_flags,
        builder_flags=builder_flags,
        profile={t.name: t.profile for t in model.inputs},
        hardware_compatibility=HARDWARE_COMPATIBILITY[hardware_compatibility],
    )


def require(ctx: BuildContext):
    """The tensorrt module, when this pod can build with it; called before any other candidate."""
    if not ctx.gpu_class:
        raise Skipped("TensorRT builds engines for GPU classes only")
    try:
        import tensorrt
    except ImportError as e:
        raise TensorRTUnavailable(f"spec.compilers lists TensorRT, but this image cannot import tensorrt: {e}") from e
    if not ctx.fingerprint.get("gpus"):
        raise TensorRTUnavailable(
            "spec.compilers lists TensorRT, but no GPU is visible (NVML and nvidia-smi found none): "
            "check the pod's nvidia.com/gpu request and the device plugin"
        )
    return tensorrt


def build(ctx: BuildContext, precision: Precision) -> Build:
    trt = require(ctx)
    plan = plan_build(ctx.model, precision, trt.__version__, **ctx.trt_options)
    onnx_path = {
        "source": lambda: ctx.model.path,
        "fp16": lambda: variants.fp16_model(ctx),
        "qdq": lambda: variants.qdq_model(ctx, symmetric_activations=True)[0],
    }[plan.onnx_variant]()
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(
        sum(1 << int(getattr(trt.NetworkDefinitionCreationFlag, f)) for f in plan.network_flags)
    )
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        raise RuntimeError(
            "TensorRT's ONNX parser: " + "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        )
    config = builder.create_builder_config()
    for flag in plan.builder_flags:
        config.set_flag(getattr(trt.BuilderFlag, flag))
    config.hardware_compatibility_level = getattr(trt.HardwareCompatibilityLevel, plan.hardware_compatibility)
    profile = builder.create_optimization_profile()
    for name, (low, opt, high) in plan.profile.items():
        profile.set_shape(name, low, opt, high)
    config.add_optimization_profile(profile)
    # One timing cache for every candidate of this compile: FP16 and INT8 builds reuse FP32's timings.
    cache_path = ctx.work_dir / TIMING_CACHE
    config.set_timing_cache(config.create_timing_cache(cache_path.read_bytes() if cache_path.exists() else b""), False)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise RuntimeError("TensorRT could not build an engine; its log above says why")
    cache_path.write_bytes(memoryview(config.get_timing_cache().serialize()))
    out = ctx.output_dir(f"tensorrt-{precision.value.lower()}") / "model.plan"
    out.write_bytes(memoryview(serialized))
    output_names = [t.name for t in ctx.model.outputs]
    return Build(
        Compiler.TENSORRT, precision, files={"model.plan": out}, settings=plan.settings(trt.__version__),
        open=lambda: PlanRunner(out, output_names),
    )  # fmt: skip


class PlanRunner(Runner):
    """Runs a plan through polygraphy, which handles device buffers and dynamic shapes."""

    def __init__(self, path: Path, output_names: list[str]):
        from polygraphy.backend.trt import EngineFromBytes, TrtRunner

        self.output_names = output_names
        self.runner = TrtRunner(EngineFromBytes(path.read_bytes()))
        self.runner.activate()

    def run(self, feeds: Arrays) -> list[np.ndarray]:
        outputs = self.runner.infer(feeds)
        return [np.asarray(outputs[name]) for name in self.output_names]

    def close(self) -> None:
        self.runner.deactivate()
