"""The GPU compiler image's TensorRT, as the image itself reports it: `make images-gpu` runs `import tensorrt`
in it after building it and fails unless that is the TensorRT of the image's serving target
(api.serving_targets), the only version whose plans that target's Triton loads. No GPU is needed to
import TensorRT; building a plan needs one (the compiler then says TensorRTUnavailable here).
"""

from __future__ import annotations

import subprocess

from tensorkiln_api.serving_targets import SERVING_TARGETS, same_release
from tensorkiln_local.images.catalog import Image

# podman here: runc (crun refuses cgroup v1 hybrid mode), cgroupfs, and rlimits no higher than the host's.
PODMAN_RUN = ("podman", "run", "--rm", "--network", "none", "--runtime", "runc", "--cgroup-manager", "cgroupfs",
              "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096")  # fmt: skip
IMPORT_TENSORRT = "import tensorrt; print(tensorrt.__version__)"


def tensorrt_version(reference: str) -> str:
    """What `import tensorrt` reports in the image; raises with the image's own error when it cannot import."""
    found = subprocess.run([*PODMAN_RUN, reference, "python", "-c", IMPORT_TENSORRT], capture_output=True, text=True)
    if found.returncode != 0:
        last = (found.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{reference}: `import tensorrt` failed: {last}")
    return found.stdout.strip()


def check_tensorrt(image: Image, reference: str) -> str:
    """The image's TensorRT version, checked against its serving target's (a SystemExit naming both if not)."""
    target = SERVING_TARGETS[dict(image.build_args)["SERVING_TARGET"]]
    version = tensorrt_version(reference)
    if not same_release(version, target.tensorrt):
        raise SystemExit(
            f"{image.name}: TensorRT {version} in the image, but Triton {target.release} serves plans with "
            f"TensorRT {target.tensorrt}"
        )
    return version
