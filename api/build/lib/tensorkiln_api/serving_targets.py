"""The Triton releases TensorKiln serves engines with, and the runtime versions each one runs.

An engine is built and timed with the runtime of the release that serves it: a TensorRT plan loads
only into the TensorRT that built it, and an onnxruntime or OpenVINO engine timed on another version
was chosen on something that will not run it. The chart's `servingTarget` names the release of its
`servingImage`; the CompileJob carries it (spec.servingTarget) and the compiler refuses to build with
other versions (`mismatch`, reason RuntimeMismatch). The compiler image for a release installs its
runtimes (compiler-jobs/serving_targets/<release>.txt, the build argument SERVING_TARGET).

Versions: NGC's Triton release notes (server, CUDA) and framework support matrix (TensorRT), and the
ONNX Runtime and OpenVINO each release's build.py builds its backends with. 24.10 is the local
cluster's: TensorKiln's serving image builds Triton 2.51's backends against the same runtimes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServingTarget:
    release: str  # NGC's tag of nvcr.io/nvidia/tritonserver, e.g. "25.10"
    server: str  # Triton Inference Server
    onnxruntime: str
    openvino: str
    tensorrt: str | None  # None: not recorded here (NGC's support matrix was out of reach)
    cuda: str | None

    def runtime(self, compiler: str) -> tuple[str, str | None] | None:
        """(distribution, version) of what serves a `compiler` engine; None where no runtime does (the simulation)."""
        dist = RUNTIME_OF.get(compiler)
        return (dist, getattr(self, dist)) if dist else None


# The runtime distribution that builds and serves each compiler's engines (names as in importlib.metadata).
RUNTIME_OF = {"OnnxRuntime": "onnxruntime", "OpenVINO": "openvino", "TensorRT": "tensorrt"}

SERVING_TARGETS = {
    target.release: target
    for target in (
        ServingTarget("24.10", "2.51.0", "1.19.2", "2024.4.0", "10.5.0", "12.6.2"),
        ServingTarget("25.10", "2.62.0", "1.23.1", "2025.3.0", "10.13.3", "13.0.2"),
        ServingTarget("26.06", "2.70.0", "1.24.4", "2026.2.0", None, None),
    )
}


def same_release(found: str, wanted: str) -> bool:
    """`found` is `wanted` or a build of it: TensorRT 10.13.3.9 is 10.13.3, OpenVINO 2024.4.0-16579-... is 2024.4.0."""
    return found == wanted or found.startswith((f"{wanted}.", f"{wanted}-"))


def runtime_difference(
    target: ServingTarget, compiler: str, runtime_versions: dict[str, str]
) -> tuple[str, str, str] | None:
    """(distribution, version found, version `target` serves with) where a `compiler` engine built with
    `runtime_versions` must not be served by `target`; None when it may (or nothing records the version)."""
    runtime = target.runtime(compiler)
    if runtime is None or runtime[1] is None:
        return None
    dist, wanted = runtime
    found = runtime_versions.get(dist)
    if found is None or same_release(found, wanted):
        return None
    return dist, found, wanted


def mismatch(target: ServingTarget, compiler: str, runtime_versions: dict[str, str]) -> str | None:
    """Why a compiler with `runtime_versions` must not build a `compiler` engine for `target`; None when it may."""
    difference = runtime_difference(target, compiler, runtime_versions)
    if difference is None:
        return None
    dist, found, wanted = difference
    return (
        f"{dist} {found} here, but Triton {target.release} (server {target.server}) serves {compiler} engines "
        f"with {dist} {wanted}"
    )
