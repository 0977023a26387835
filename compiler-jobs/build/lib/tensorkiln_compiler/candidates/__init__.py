"""Candidate engines: one builder module per compiler, each turning (context, precision) into a Build.

A builder raises Skipped when a precision does not apply to this hardware (recorded with the
reason); any other exception fails only that candidate, except TensorRTUnavailable, which
fails the whole compile.

A Build may offer runtime-settings variants of itself (`Build.variants`): the same engine run with
other settings the server can be configured with (OpenVINO's performance hint and streams,
onnxruntime's intra-op threads and graph-optimisation level). The pipeline's tuning stage builds
them for the best candidate of each compiler only; their ids are the engine's plus `+variant`.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tensorkiln_api import CompileJobSpec, Compiler, HardwareKind, Precision

from ..data import Arrays, Dataset
from ..inspection import ModelInfo

log = logging.getLogger(__name__)

_MODULES = {Compiler.ONNX_RUNTIME: "onnxruntime", Compiler.OPENVINO: "openvino", Compiler.TENSORRT: "tensorrt"}


class Skipped(Exception):
    """The candidate does not apply here (e.g. FP16 on a CPU without FP16 kernels)."""


class Runner:
    """A loaded engine: outputs come back in the ONNX graph's output order."""

    def run(self, feeds: Arrays) -> list[np.ndarray]:
        raise NotImplementedError

    def close(self) -> None:
        """Release device resources; most runtimes free them when collected."""


@dataclass
class BuildContext:
    spec: CompileJobSpec
    model: ModelInfo
    dataset: Dataset
    fingerprint: dict
    threads: int
    work_dir: Path
    trt_options: dict = field(default_factory=dict)  # tensorrt.plan_build keyword options
    steps: list[str] = field(default_factory=list)  # the manifest's preprocessingSteps
    cache: dict = field(default_factory=dict)  # derived models shared by builders

    @property
    def gpu_class(self) -> bool:
        return self.spec.hardware.kind == HardwareKind.GPU

    @property
    def served_max_batch_size(self) -> int | None:
        """Triton's max_batch_size for the engine (spec.batcherTuning, which the operator sets whenever the
        dynamic batcher serves it); None when that is not known here (unbatched, or the sequence batcher)."""
        tuning = self.spec.batcher_tuning
        return tuning.max_batch_size if tuning is not None and self.model.batched else None

    @property
    def cpu_isa(self) -> list[str]:
        return self.fingerprint["cpu"]["isa"]

    def record(self, step: str) -> None:
        log.info("preprocessing: %s", step)
        self.steps.append(step)

    def output_dir(self, name: str) -> Path:
        path = self.work_dir / "candidates" / name
        path.mkdir(parents=True, exist_ok=True)
        return path


@dataclass
class Build:
    compiler: Compiler
    precision: Precision
    files: dict[str, Path]  # artifact path inside the engine -> file built here
    settings: dict  # what the server must configure to run the engine as measured
    open: Callable[[], Runner]
    baseline: bool = False
    variant: str = ""  # a runtime-settings variant of another Build's engine: e.g. "throughput-2streams"
    # The runtime-settings variants of this engine, built on demand (the tuning stage); None: it has none.
    variants: Callable[[], list[Build]] | None = None
    # Each output's shape as the engine itself has it (-1: dynamic), where the engine fixes sizes the ONNX
    # leaves open (OpenVINO's IR after conversion at fixed input sizes); None: the ONNX graph's. The served
    # config gives these: Triton's openvino backend compares output dims exactly.
    output_dims: dict[str, list[int]] | None = None

    @property
    def id(self) -> str:
        return candidate_id(self.compiler, self.precision, self.baseline, self.variant)


def candidate_id(compiler: Compiler, precision: Precision, baseline: bool = False, variant: str = "") -> str:
    """`baseline`, `openvino-bf16`, or a settings variant of one: `openvino-bf16+throughput-2streams`."""
    engine = "baseline" if baseline else f"{compiler.value.lower()}-{precision.value.lower()}"
    return f"{engine}{VARIANT_SEPARATOR}{variant}" if variant else engine


VARIANT_SEPARATOR = "+"


def default_settings_of(candidate_id: str) -> str:
    """The id of the candidate a settings variant varies (itself when it is none)."""
    return candidate_id.split(VARIANT_SEPARATOR, 1)[0]


def builder(compiler: Compiler) -> Callable[[BuildContext, Precision], Build]:
    """Imported on demand: a CPU image need not load TensorRT, nor a GPU image OpenVINO."""
    return importlib.import_module(f"{__name__}.{_MODULES[compiler]}").build
