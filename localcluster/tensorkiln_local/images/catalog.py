"""The images TensorKiln ships and the ones its local cluster runs, with what each is built from.

Product images (operator, compiler, engine-fetch, serving) are what a user's cluster pulls; each
Dockerfile takes its Python base as the build argument BASE (python:3.11-slim on a build host with
Docker Hub, a Debian-made base here). Cluster images (pause, coredns, cert-manager) exist only for
the local cluster: a static Go binary in an image FROM scratch.

`inputs` are the repository paths the Dockerfile copies: with the Dockerfile and the base, they
are the image's cache key, so an unchanged tree rebuilds nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

PROJECT = "tensorkiln"
# The Triton release of the serving image (serving/triton_backends/r24.10.json), which the compiler
# image is built for (compiler-jobs/serving_targets/) and the local install names as servingTarget.
SERVING_TARGET = "24.10"


@dataclass(frozen=True)
class Image:
    name: str
    dockerfile: str  # repository-relative
    inputs: tuple[str, ...] = ()  # repository-relative files and directories it copies
    # Cluster images: the binary (tensorkiln_local.cluster.binaries) the build context holds.
    binary: str | None = None
    user: str = ""  # the numeric user it runs as (USER), checked against what pods set
    # A local copy of pinned sources the build would otherwise fetch: (directory under paths.VENDOR_DIR,
    # context-relative directory the Dockerfile looks for it in). Used when the copy exists.
    vendored: tuple[str, str] | None = None
    build_args: tuple[tuple[str, str], ...] = ()  # what this machine's build passes besides BASE

    @property
    def repository(self) -> str:
        return f"{PROJECT}/{self.name}"

    @property
    def needs_base(self) -> bool:
        return self.binary is None


_CONTRACT = ("constraints.txt", "api/pyproject.toml", "api/tensorkiln_api")
# Each image's own distributions (its Dockerfile installs these and no other).
_OPERATOR = (*_CONTRACT, "operator/pyproject.toml", "operator/tensorkiln")
_COMPILER = (
    *_CONTRACT,
    "compiler-jobs/pyproject.toml",
    "compiler-jobs/tensorkiln_compiler",
    "compiler-jobs/serving_targets",
    "serving/pyproject.toml",
    "serving/tensorkiln_serving",
)
# Triton pods' init container: the contract and the serving side alone, so that its key (the tag and digest the
# local install pins) changes only with engine-fetch's own code, never with the compiler's.
_ENGINE_FETCH = (*_CONTRACT, "serving/pyproject.toml", "serving/tensorkiln_serving")

# The images the local cluster runs (`prepare` and `install` build them).
LOCAL_PRODUCT = (
    Image("operator", "operator/Dockerfile", _OPERATOR, user="65532"),
    # Built for the serving image's Triton release: engines are timed with the runtimes that serve them.
    Image(
        "compiler",
        "compiler-jobs/Dockerfile",
        _COMPILER,
        user="65532",
        build_args=(("SERVING_TARGET", SERVING_TARGET),),
    ),
    Image("engine-fetch", "serving/engine-fetch.Dockerfile", _ENGINE_FETCH, user="65532"),
    Image(
        "serving",
        "serving/Dockerfile",
        ("constraints.txt", "serving/layout_tritonserver.py", "serving/triton_backends"),
        user="1000",
        vendored=("triton-r24.10", "serving/triton_backends/vendor"),
    ),
)
# The TensorRT release of production's Triton (the chart's default servingTarget and servingImage).
GPU_SERVING_TARGET = "25.10"
# The compiler of GPU classes' compile Jobs (the chart's compilerGPUImage): with TensorRT. Built only by name
# (`make images-gpu`): the local cluster's GPU pools are kwok's SIMULATION, where no pod runs, and PyPI's
# tensorrt-cu<N>-libs is a stub that downloads the libraries from NVIDIA's own package index at install, which
# a build host must reach (this machine does not).
COMPILER_GPU = Image(
    "compiler-gpu",
    "compiler-jobs/Dockerfile",
    _COMPILER,
    user="65532",
    build_args=(("SERVING_TARGET", GPU_SERVING_TARGET), ("VARIANT", "gpu")),
)
PRODUCT = (*LOCAL_PRODUCT, COMPILER_GPU)
CLUSTER = (
    Image("pause", "localcluster/images/pause/Dockerfile", binary="pause", user="65535"),
    Image("coredns", "localcluster/images/coredns/Dockerfile", binary="coredns", user="65532"),
    Image("cert-manager", "localcluster/images/cert-manager/Dockerfile", binary="certmanager", user="65532"),
)
ALL = {image.name: image for image in (*PRODUCT, *CLUSTER)}
