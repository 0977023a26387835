"""Container images on a node without images: the local machine is the image.

A container normally runs its own `command` + `args`, resolved on the pod's PATH (the
project venv's bin first, then the host's). An image whose entrypoint matters, or whose
software lives somewhere else on this machine, gets a rule in `IMAGE_RULES`: the first rule
whose glob matches the image repository (registry/path, no tag or digest; Docker Hub's
`docker.io/library/` prefix removed) rewrites the container's command, args and env.

`nvcr.io/nvidia/tritonserver` runs the real Triton server that the nvidia-pytriton wheel ships
(`pytriton/tritonserver/bin/tritonserver`, libraries in `nvidia_pytriton.libs/`). The wheel has
only the python backend, and its stub per Python version lives outside `backends/`: the stub
for this Python is copied, with the backend, into a directory the agent owns (the wheel's own
directory stays untouched). The server binds the pod IP, so every Triton pod serves the
standard ports 8000-8002 on its own 127.0.0.x.

`ghcr.io/tensorkiln/operator` (the chart's `image.repository`) runs operator/Dockerfile's
ENTRYPOINT, `tensorkiln operator run`, as `<this machine's venv Python> -m tensorkiln operator
run`, with the image's ENV. The operator reads a pvc:// registry at `$TENSORKILN_PVC_ROOT/<claim>`
(default /mnt/pvc, where the chart mounts the claim), a path it builds itself, so the rule points
TENSORKILN_PVC_ROOT into the container's mount view (`Launch.root`, see podspec). Its API
credentials come from the agent like any pod's (podspec: the in-cluster environment).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from pathlib import Path


@dataclass(frozen=True)
class Launch:
    """What a container asks to run, before $(VAR) expansion and path rewriting."""

    command: list[str]
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    # The container's mount view (podspec): a directory where every volumeMount's mountPath is a
    # symlink to the volume, for programs that build mount paths themselves. Read-only for rules.
    root: str = ""


ImageRewrite = Callable[[Launch], Launch]


@dataclass(frozen=True)
class ImageRule:
    pattern: str  # fnmatch glob over `repository(image)`
    rewrite: ImageRewrite


def docker_defaults(*, entrypoint: Sequence[str] = (), cmd: Sequence[str] = ()) -> ImageRewrite:
    """Docker's rule: `command` replaces ENTRYPOINT; `args`, or else CMD when `command` is unset."""

    def rewrite(launch: Launch) -> Launch:
        if launch.command:
            return launch
        return replace(launch, command=list(entrypoint), args=launch.args or list(cmd))

    return rewrite


@dataclass(frozen=True)
class TritonServer:
    """Where this machine's Triton server lives."""

    binary: Path
    library_path: list[str]  # LD_LIBRARY_PATH entries, first
    backend_dir: Path  # holds python/: the python backend and its stub for this Python
    # PATH entry first: the stub starts an embedded Python that ignores PYTHONPATH and takes the
    # `python3` on PATH as its executable, so a venv's bin here makes it import from that venv.
    python_bin: str


def tritonserver_launch(launch: Launch, server: TritonServer) -> Launch:
    """`tritonserver ARGS`, as the NGC image runs it, as this machine's server on the pod IP.

    The flags go last so that they win over the pod's: an address of 0.0.0.0 would make every
    Triton pod on this machine fight over the same ports, and the image's /opt/tritonserver
    does not exist here. Anything but `tritonserver` (a debugging shell) runs as written.
    """
    argv = launch.command + launch.args  # with no command, the image's entrypoint script runs the args
    if not argv or Path(argv[0]).name != "tritonserver":
        return launch
    pod_ip = launch.env["POD_IP"]
    flags = [f"--backend-directory={server.backend_dir}"]
    flags += [f"--{endpoint}-address={pod_ip}" for endpoint in ("http", "grpc", "metrics")]
    env = dict(launch.env)
    for name, first in (("LD_LIBRARY_PATH", server.library_path), ("PATH", [server.python_bin])):
        env[name] = os.pathsep.join([*first, *filter(None, [launch.env.get(name)])])
    return Launch([str(server.binary)], [*argv[1:], *flags], env)


def local_tritonserver(backends_root: Path) -> TritonServer:
    """The nvidia-pytriton wheel's server, with its python backend set up under `backends_root`."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "nvcr.io/nvidia/tritonserver runs the Triton server of the nvidia-pytriton wheel on this node, "
            "and it is not installed: pip install 'tensorkiln[serving]'"
        )
    package = Path(spec.origin).parent
    dist = package / "tritonserver"
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    backend_dir = backends_root / f"tritonserver-{importlib.metadata.version('nvidia-pytriton')}-py{python}"
    backend = [path for path in (dist / "backends" / "python").iterdir() if path.is_file()]
    for source in [*backend, dist / "python_backend_stubs" / python / "triton_python_backend_stub"]:
        _install(source, backend_dir / "python" / source.name)
    # The stub embeds libpython: this interpreter's own, when it has one, so the stub's Python is this one.
    libraries = [sysconfig.get_config_var("LIBDIR") if sysconfig.get_config_var("Py_ENABLE_SHARED") else ""]
    libraries += [str(package.parent / "nvidia_pytriton.libs"), str(dist / "lib")]
    return TritonServer(
        binary=dist / "bin" / "tritonserver",
        library_path=[path for path in libraries if path and Path(path).is_dir()],
        backend_dir=backend_dir,
        python_bin=os.path.dirname(sys.executable),
    )


def _install(source: Path, target: Path) -> None:
    """Copy a file unless an equal-sized copy is there; atomic, so concurrent pod starts are safe."""
    if target.exists() and target.stat().st_size == source.stat().st_size:
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(fd)
    shutil.copy2(source, partial)  # keeps the stub executable
    os.replace(partial, target)


# operator/Dockerfile: ENTRYPOINT and ENV. registry/locations.py: PVC_ROOT_ENV and DEFAULT_PVC_ROOT.
OPERATOR_ENTRYPOINT = ("tensorkiln", "operator", "run")
OPERATOR_IMAGE_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
PVC_ROOT_ENV = "TENSORKILN_PVC_ROOT"
DEFAULT_PVC_ROOT = "/mnt/pvc"


def operator_launch(launch: Launch, python: str = sys.executable) -> Launch:
    """The operator image on this machine: Docker's rule for command and args; `tensorkiln` (the
    entrypoint, or a pod's command naming it) as `python -m tensorkiln` with this Python, the
    project venv's (any other command runs as written, on the pod's PATH: that venv's bin first);
    the image's ENV and TENSORKILN_PVC_ROOT (into the mount view) unless the pod sets them."""
    launch = docker_defaults(entrypoint=OPERATOR_ENTRYPOINT)(launch)
    command = launch.command
    if command[:1] == [OPERATOR_ENTRYPOINT[0]]:
        command = [python, "-m", "tensorkiln", *command[1:]]
    env = {**OPERATOR_IMAGE_ENV, **launch.env}
    if launch.root:
        env.setdefault(PVC_ROOT_ENV, f"{launch.root.rstrip('/')}{DEFAULT_PVC_ROOT}")
    return replace(launch, command=command, env=env)


def _tritonserver(launch: Launch) -> Launch:
    # The agent points tempfile at <state dir>/tmp, so the backend copy lives in the agent's state.
    return tritonserver_launch(launch, local_tritonserver(Path(tempfile.gettempdir())))


IMAGE_RULES: tuple[ImageRule, ...] = (
    ImageRule("busybox", docker_defaults(cmd=["sh"])),
    ImageRule("alpine", docker_defaults(cmd=["/bin/sh"])),
    ImageRule("debian", docker_defaults(cmd=["bash"])),
    ImageRule("ubuntu", docker_defaults(cmd=["/bin/bash"])),
    ImageRule("python", docker_defaults(cmd=["python3"])),
    ImageRule("nvcr.io/nvidia/tritonserver", _tritonserver),
    ImageRule("ghcr.io/tensorkiln/operator", operator_launch),
)


def repository(image: str) -> str:
    name = image.split("@", 1)[0]
    last_slash = name.rfind("/")
    if ":" in name[last_slash + 1 :]:
        name = name[: name.rfind(":")]
    for prefix in ("docker.io/library/", "docker.io/", "library/"):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def rule_for(image: str, rules: tuple[ImageRule, ...] = IMAGE_RULES) -> ImageRule | None:
    repo = repository(image)
    return next((rule for rule in rules if fnmatchcase(repo, rule.pattern)), None)
