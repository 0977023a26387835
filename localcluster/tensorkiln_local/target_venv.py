"""A virtualenv with a serving target's runtime versions, for benchmarks that compile with them on this machine
(e2e/bench_compile.py --serving-target): the constraints the compiler image for that target installs with
(compiler-jobs/serving_targets/<release>.txt over constraints.txt), with every distribution of the tree.

Built once per merged constraints and requirements (their digest names it) under the cache. It holds the distributions'
dependencies only, not the distributions (which pip would build inside the tree): `environment` puts this
checkout's sources on PYTHONPATH, so the code that runs is the tree's, whichever clone built the virtualenv.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from tensorkiln_local.cluster import paths

TARGETS_DIR = paths.REPO_ROOT / "compiler-jobs" / "serving_targets"
RELEASES = sorted(path.stem for path in TARGETS_DIR.glob("*.txt"))  # the targets a compiler image is built for
# The distributions, each the directory of its package (the local cluster's brings the OCR models).
DISTRIBUTIONS = ("api", "operator", "compiler-jobs", "serving", "client", "localcluster")
SOURCES = [paths.REPO_ROOT / name for name in DISTRIBUTIONS]
EXTRA_PACKAGES = ("onnx-tool==1.0.1",)  # bench_compile's count of multiply-accumulates
OWN = re.compile(r"^tensorkiln(-[a-z]+)?\b")  # the tree's own distributions, which PYTHONPATH provides
MARKER = "TENSORKILN_SERVING_TARGET_VENV"  # set in the target's environment: the release it has


def constraints(release: str) -> str:
    """constraints.txt with the target's pins in place of the same packages' (as its compiler image)."""
    merged = subprocess.run(
        [sys.executable, str(TARGETS_DIR / "constraints.py"), str(paths.REPO_ROOT / "constraints.txt"),
         str(TARGETS_DIR / f"{release}.txt")],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    # The GPU image's TensorRT lines stay out: their libraries download from NVIDIA's index at install time.
    return "".join(line + "\n" for line in merged.stdout.splitlines() if not line.startswith("tensorrt"))


def ensure(release: str) -> Path:
    """The target's virtualenv's python, built the first time (minutes: pip downloads the runtimes)."""
    pins, wanted = constraints(release), requirements()
    key = hashlib.sha256("\n".join([pins, *wanted, *EXTRA_PACKAGES]).encode()).hexdigest()[:12]
    home = paths.CACHE_DIR / "target-venvs" / f"{release}-{key}"
    python = home / "bin" / "python"
    if not (home / ".complete").exists():
        shutil.rmtree(home, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(home)], check=True)
        (home / "constraints.txt").write_text(pins)
        pip = [str(python), "-m", "pip", "install", "-q", "-c", str(home / "constraints.txt")]
        subprocess.run([*pip, *wanted, *EXTRA_PACKAGES], check=True)
        (home / ".complete").touch()
    return python


def requirements() -> list[str]:
    """What the distributions need, every extra included, but one another (pure over their pyproject.toml)."""
    found = set()
    for source in SOURCES:
        project = tomllib.loads((source / "pyproject.toml").read_text())["project"]
        extras = project.get("optional-dependencies", {}).values()
        found.update(r for r in [*project.get("dependencies", []), *(r for extra in extras for r in extra)])
    return sorted(r for r in found if not OWN.match(r))


def environment(release: str) -> dict[str, str]:
    """The environment to run this checkout's code in the target's virtualenv."""
    path = os.pathsep.join([*map(str, SOURCES), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "PYTHONPATH": path, MARKER: release}
