"""Triton of the nvidia-pytriton wheel as a process of this machine, for the tests and benchmarks
that time it outside a pod (bench_serving pins it to one core and the load generator to the other,
which a pod on this node cannot ask for) or check the serving image's model layout without a
cluster (test_triton_local).

It is the same server as the serving image's (serving/Dockerfile lays the wheel out as NGC's
image; here the wheel is used where pip put it): its python backend and the stub for this Python
are copied into a directory of the caller's, with the serving image's native onnxruntime and
openvino backends beside them (copied out of the image `make images` built, once per image), and
the server binds one loopback address of its own, so several run beside each other on the standard
ports 8000-8002.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tensorkiln_local.cluster import binaries, paths
from tensorkiln_local.images import build as images

PORTS = (8000, 8001, 8002)


@dataclass(frozen=True)
class TritonServer:
    """Where this machine's Triton server lives."""

    binary: Path
    library_path: list[str]  # LD_LIBRARY_PATH entries, first
    backend_dir: Path  # python/ (the python backend and its stub for this Python), onnxruntime/, openvino/
    # PATH entry first: the stub starts an embedded Python that ignores PYTHONPATH and takes the
    # `python3` on PATH as its executable, so a venv's bin here makes it import from that venv.
    python_bin: str


def local_tritonserver(backends_root: Path) -> TritonServer:
    """The nvidia-pytriton wheel's server, with its python backend set up under `backends_root`."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("the nvidia-pytriton wheel is not installed: pip install tensorkiln-local (it pins it)")
    package = Path(spec.origin).parent
    dist = package / "tritonserver"
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    backend_dir = backends_root / f"tritonserver-{importlib.metadata.version('nvidia-pytriton')}-py{python}"
    backend = [path for path in (dist / "backends" / "python").iterdir() if path.is_file()]
    for source in [*backend, dist / "python_backend_stubs" / python / "triton_python_backend_stub"]:
        _install(source, backend_dir / "python" / source.name)
    libraries_dir = backend_dir / "lib"
    if native := native_backends():
        for name in NATIVE_BACKENDS:
            binaries.link(native / name, backend_dir / name)
        # The wheel names the server library libtritonserver-<hash>.so; the native backends link libtritonserver.so.
        (server_library,) = (package.parent / "nvidia_pytriton.libs").glob("libtritonserver-*.so")
        binaries.link(server_library, libraries_dir / "libtritonserver.so")
    # The stub embeds libpython: this interpreter's own, when it has one, so the stub's Python is this one.
    libraries = [sysconfig.get_config_var("LIBDIR") if sysconfig.get_config_var("Py_ENABLE_SHARED") else ""]
    libraries += [str(package.parent / "nvidia_pytriton.libs"), str(dist / "lib"), str(libraries_dir)]
    return TritonServer(
        binary=dist / "bin" / "tritonserver",
        library_path=[path for path in libraries if path and Path(path).is_dir()],
        backend_dir=backend_dir,
        python_bin=os.path.dirname(sys.executable),
    )


NATIVE_BACKENDS = ("onnxruntime", "openvino")


def native_backends() -> Path | None:
    """The serving image's native backends (NATIVE_BACKENDS under /opt/tritonserver/backends), the files its pods
    load, copied out of the image once per image; None when this machine has not built it (`make images`)."""
    image = images.built("serving")
    if image is None:
        return None
    target = paths.CACHE_DIR / "triton-backends" / image.image_id[:16]
    if target.is_dir():
        return target
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    container = subprocess.run(["podman", "create", image.reference], check=True, capture_output=True, text=True)
    try:
        for name in NATIVE_BACKENDS:
            subprocess.run(["podman", "cp", f"{container.stdout.strip()}:/opt/tritonserver/backends/{name}",
                            str(partial / name)], check=True)  # fmt: skip
    finally:
        subprocess.run(["podman", "rm", container.stdout.strip()], check=False, capture_output=True)
    partial.rename(target)  # atomic: a killed copy never leaves half the backends in the cache
    return target


def command(server: TritonServer, args: list[str], address: str, env: dict[str, str]) -> tuple[list[str], dict]:
    """argv and environment of `tritonserver ARGS` bound to `address`: the flags go last so that
    they win over the arguments'."""
    flags = [f"--backend-directory={server.backend_dir}"]
    flags += [f"--{endpoint}-address={address}" for endpoint in ("http", "grpc", "metrics")]
    env = dict(env)
    for name, first in (("LD_LIBRARY_PATH", server.library_path), ("PATH", [server.python_bin])):
        env[name] = os.pathsep.join([*first, *filter(None, [env.get(name)])])
    return [str(server.binary), *args, *flags], env


def free_loopback_address(ports: tuple[int, ...] = PORTS) -> str:
    """A 127.0.0.x (2-254) where every port is free."""
    for host in range(2, 255):
        address = f"127.0.0.{host}"
        if all(_free(address, port) for port in ports):
            return address
    raise RuntimeError(f"no loopback address 127.0.0.2-254 has ports {ports} free")


def _free(address: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((address, port))
        except OSError:
            return False
    return True


def _install(source: Path, target: Path) -> None:
    """Copy a file unless an equal-sized copy is there; atomic, so concurrent starts are safe."""
    if target.exists() and target.stat().st_size == source.stat().st_size:
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(fd)
    shutil.copy2(source, partial)  # keeps the stub executable
    os.replace(partial, target)
