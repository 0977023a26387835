"""Build Triton's native onnxruntime and openvino backends from pinned sources (build time only).

    python3 build.py PINS.json PREFIX [--vendor DIR] [--downloads DIR] [--jobs N]

PINS.json (one per Triton release, e.g. r24.10.json) pins everything the build reads:
- the commits of Triton's common, core, backend, onnxruntime_backend and openvino_backend
  repositories: read from DIR/<repo>.tar.gz (`git archive` tarballs, with DIR/COMMITS naming the
  same commits) when --vendor is given, else fetched from GitHub at those commits;
- ONNX Runtime's C library (the onnxruntime-node npm package carries it for linux x64 and arm64)
  and its C API header, by URL and sha256: the header and the library must be the same version;
- OpenVINO's wheel per architecture, by URL and sha256 (it ships include/ and libs/).

Each backend is configured with CMake against those prebuilt runtimes (not the Docker builds its
CMakeLists would otherwise start) and installed as NGC's tritonserver image lays it out:
PREFIX/onnxruntime/ and PREFIX/openvino/, each with its libtriton_<name>.so and the runtime's
libraries beside it (the backends load them from $ORIGIN). Needs cmake, g++, make and the Debian
packages rapidjson-dev libre2-dev libb64-dev zlib1g-dev libnuma-dev googletest; stdlib only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import ssl
import subprocess
import tarfile
import tempfile
import urllib.request
import zipfile
from pathlib import Path

REPOSITORIES = ("common", "core", "backend", "onnxruntime_backend", "openvino_backend")
GITHUB = "https://github.com/triton-inference-server/{name}/archive/{commit}.tar.gz"
ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64"}
# What the openvino backend loads for IR models on CPU: the runtime, its CPU plugin, the IR frontend
# and oneTBB. The GPU and NPU plugins and the other frontends stay out of the image.
OPENVINO_LIBRARIES = (
    "libopenvino.so.*",
    "libopenvino_c.so.*",
    "libopenvino_intel_cpu_plugin.so",
    "libopenvino_auto_plugin.so",
    "libopenvino_auto_batch_plugin.so",
    "libopenvino_hetero_plugin.so",
    "libopenvino_ir_frontend.so.*",
    "libopenvino_onnx_frontend.so.*",
    "libtbb.so.*",
    "libtbbmalloc.so.*",
    "libhwloc.so.*",
)
CMAKE_COMMON = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DTRITON_ENABLE_GPU=OFF",
    "-DFETCHCONTENT_FULLY_DISCONNECTED=ON",
    "-DFETCHCONTENT_SOURCE_DIR_GOOGLETEST=/usr/src/googletest",
)


def _ssl_context() -> ssl.SSLContext:
    # A build host behind a TLS-inspecting proxy gives its CA bundle as the `ca-bundle` build secret.
    bundle = Path("/run/secrets/ca-bundle")
    return (
        ssl.create_default_context(cafile=str(bundle))
        if bundle.is_file() and bundle.stat().st_size
        else ssl.create_default_context()
    )


def sha256(path: Path) -> str:
    with open(path, "rb") as data:
        return hashlib.file_digest(data, "sha256").hexdigest()


def download(url: str, downloads: Path, expected: str | None) -> Path:
    """`url`'s content in `downloads` (kept between builds), checked against its sha256 when pinned."""
    target = downloads / (expected or hashlib.sha256(url.encode()).hexdigest()) / url.rsplit("/", 1)[-1]
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + ".partial")
        with urllib.request.urlopen(url, context=_ssl_context(), timeout=300) as answer, open(partial, "wb") as out:
            shutil.copyfileobj(answer, out)
        partial.rename(target)
    if expected and sha256(target) != expected:
        target.unlink()
        raise SystemExit(f"{url}: sha256 is not the pinned {expected}")
    return target


def sources(pins: dict, vendor: Path | None, downloads: Path, work: Path) -> dict[str, Path]:
    """Each Triton repository's tree at its pinned commit, under work/src."""
    if vendor:
        listed = dict(line.split() for line in (vendor / "COMMITS").read_text().splitlines() if line.strip())
        differ = {name: listed.get(name) for name in REPOSITORIES if listed.get(name) != pins["sources"][name]}
        if differ:
            raise SystemExit(f"{vendor}/COMMITS differs from the pins for {differ}")
    trees = {}
    for name in REPOSITORIES:
        commit = pins["sources"][name]
        archive = (
            vendor / f"{name}.tar.gz" if vendor else download(GITHUB.format(name=name, commit=commit), downloads, None)
        )
        unpacked = work / "src" / name
        unpacked.mkdir(parents=True)
        with tarfile.open(archive) as tar:
            # Extraction filters came with Python 3.11.4; Debian bookworm's is 3.11.2.
            tar.extractall(unpacked, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        (top,) = unpacked.iterdir()  # `git archive` puts <repo>/, GitHub <repo>-<commit>/
        trees[name] = top
    return trees


def onnxruntime(pins: dict, vendor: Path | None, downloads: Path, work: Path, arch: str) -> tuple[Path, Path]:
    """(include dir, lib dir) of the pinned ONNX Runtime: the header and the C library of one version."""
    ort = pins["onnxruntime"]
    header_pin = ort["header"]
    vendored = (
        vendor / f"onnxruntime-{'.'.join(ort['version'].split('.')[:2])}-include" / "onnxruntime_c_api.h"
        if vendor
        else None
    )
    header = (
        vendored if vendored and vendored.exists() else download(header_pin["url"], downloads, header_pin["sha256"])
    )
    if sha256(header) != header_pin["sha256"]:
        raise SystemExit(f"{header}: sha256 is not the pinned {header_pin['sha256']}")
    include, lib = work / "onnxruntime" / "include", work / "onnxruntime" / "lib"
    include.mkdir(parents=True)
    lib.mkdir(parents=True)
    shutil.copy2(header, include / "onnxruntime_c_api.h")
    package = download(ort["library"]["url"], downloads, ort["library"]["sha256"])
    prefix = ort["library"]["paths"][arch]
    real = f"libonnxruntime.so.{ort['version']}"
    with tarfile.open(package) as tar:
        member = tar.getmember(prefix + real)
        with tar.extractfile(member) as source, open(lib / real, "wb") as out:
            shutil.copyfileobj(source, out)
    # The library's SONAME is libonnxruntime.so.1; the linker looks for libonnxruntime.so.
    for alias in ("libonnxruntime.so.1", "libonnxruntime.so"):
        (lib / alias).symlink_to(real)
    return include, lib


def openvino(pins: dict, downloads: Path, arch: str, build_dir: Path) -> None:
    """Pre-fill build_dir/openvino/{include,lib} where the backend's CMake would put its Docker build's
    output, from the pinned wheel."""
    wheel = pins["openvino"]["wheels"][arch]
    archive = download(wheel["url"], downloads, wheel["sha256"])
    target = build_dir / "openvino"
    with zipfile.ZipFile(archive) as whl:
        for name in whl.namelist():
            for part, place in (("openvino/include/", "include"), ("openvino/libs/", "lib")):
                if name.startswith(part) and not name.endswith("/"):
                    destination = target / place / name[len(part) :]
                    destination.parent.mkdir(parents=True, exist_ok=True)
                    with whl.open(name) as source, open(destination, "wb") as out:
                        shutil.copyfileobj(source, out)
    lib = target / "lib"
    (real,) = lib.glob("libopenvino.so.*")
    # The linker's name, and the one the backend's CMake links (its Docker build's output, which it
    # rebuilds unless the file exists).
    for alias in ("libopenvino.so", "openvino.so"):
        (lib / alias).symlink_to(real.name)
    # Only the CPU plugin is shipped, so only it is listed (what the backend's own build writes). Its
    # default precision is f32: the backend passes no INFERENCE_PRECISION_HINT (it reads HINT_BF16=YES
    # only), and the CPU plugin's own default is bf16 on AVX512-BF16 and AMX CPUs, which would serve an
    # FP32 engine in bf16. A model's HINT_BF16 still overrides it (compile_model's properties win).
    (lib / "plugins.xml").write_text(
        '<ie><plugins><plugin name="CPU" location="libopenvino_intel_cpu_plugin.so"><properties>'
        '<property key="INFERENCE_PRECISION_HINT" value="f32"/></properties></plugin></plugins></ie>\n'
    )


def cmake(source: Path, build_dir: Path, flags: list[str], target: str, jobs: int) -> None:
    subprocess.run(["cmake", "-S", str(source), "-B", str(build_dir), *CMAKE_COMMON, *flags], check=True)
    subprocess.run(["cmake", "--build", str(build_dir), "--target", target, "-j", str(jobs)], check=True)


def repositories(trees: dict[str, Path]) -> list[str]:
    return [f"-DFETCHCONTENT_SOURCE_DIR_REPO-{name.upper()}={trees[name]}" for name in ("common", "core", "backend")]


def build(pins: dict, prefix: Path, vendor: Path | None, downloads: Path, jobs: int) -> None:
    arch = ARCHITECTURES[platform.machine()]
    with tempfile.TemporaryDirectory(prefix="triton-backends-") as tmp:
        work = Path(tmp)
        trees = sources(pins, vendor, downloads, work)

        include, lib = onnxruntime(pins, vendor, downloads, work, arch)
        ort_build = work / "build" / "onnxruntime"
        cmake(trees["onnxruntime_backend"], ort_build, [
            *repositories(trees),
            "-DTRITON_ENABLE_ONNXRUNTIME_TENSORRT=OFF", "-DTRITON_ENABLE_ONNXRUNTIME_OPENVINO=OFF",
            f"-DTRITON_ONNXRUNTIME_INCLUDE_PATHS={include}", f"-DTRITON_ONNXRUNTIME_LIB_PATHS={lib}",
        ], "triton-onnxruntime-backend", jobs)  # fmt: skip
        installed = prefix / "onnxruntime"
        installed.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ort_build / "libtriton_onnxruntime.so", installed)
        for library in lib.iterdir():  # the symlinks stay symlinks
            shutil.copy2(library, installed, follow_symlinks=False)

        ov_build = work / "build" / "openvino"
        openvino(pins, downloads, arch, ov_build)
        cmake(trees["openvino_backend"], ov_build, [
            *repositories(trees),
            f"-DTRITON_BUILD_OPENVINO_VERSION={pins['openvino']['version']}",
            f"-DTRITON_BUILD_CONTAINER_VERSION={pins['release'].removeprefix('r')}",
            # The wheel's libraries use the old C++ string ABI.
            "-DCMAKE_CXX_FLAGS=-D_GLIBCXX_USE_CXX11_ABI=0",
        ], "triton-openvino-backend", jobs)  # fmt: skip
        installed = prefix / "openvino"
        installed.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ov_build / "libtriton_openvino.so", installed)
        for pattern in OPENVINO_LIBRARIES:
            for library in (ov_build / "openvino" / "lib").glob(pattern):
                shutil.copy2(library, installed, follow_symlinks=False)
        shutil.copy2(ov_build / "openvino" / "lib" / "plugins.xml", installed)
    for backend in prefix.iterdir():
        for path in backend.iterdir():
            if not path.is_symlink():
                os.chmod(path, 0o755 if path.suffix == ".so" or ".so." in path.name else 0o644)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pins", type=Path)
    parser.add_argument("prefix", type=Path, help="the backends directory, e.g. /opt/tritonserver/backends")
    parser.add_argument("--vendor", type=Path, help="a local copy of the pinned sources (tarballs and COMMITS)")
    parser.add_argument("--downloads", type=Path, default=Path(tempfile.gettempdir()) / "triton-backend-downloads")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    build(json.loads(args.pins.read_text()), args.prefix, args.vendor, args.downloads, args.jobs)


if __name__ == "__main__":
    main()
