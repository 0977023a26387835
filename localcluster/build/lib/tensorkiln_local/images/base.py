"""The Python base of the product images where Docker Hub is out of reach: Debian bookworm made
with mmdebstrap from Debian's own packages, imported with podman.

It holds what the Dockerfiles' BASE must (the same as python:3.11-slim-bookworm gives): Python
3.11 with its venv module and shared libpython, CA certificates, and the environment of the
official image (PATH, LANG). Documentation and locales are left out. Cached by its package list.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

SUITE = "bookworm"
PACKAGES = ("python3-minimal", "python3-venv", "libpython3.11", "ca-certificates")
EXCLUDED = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*")
CONFIG = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["python3"]',
)
REPOSITORY = "localhost/tensorkiln/base-python"


def reference() -> str:
    """The base's tag: its inputs' digest, so another package list builds another base."""
    digest = hashlib.sha256("\n".join([SUITE, *PACKAGES, *EXCLUDED, *CONFIG]).encode()).hexdigest()[:12]
    return f"{REPOSITORY}:{SUITE}-{digest}"


def _exists(ref: str) -> bool:
    return subprocess.run(["podman", "image", "exists", ref], check=False).returncode == 0


def ensure() -> str:
    """Build the base unless it exists; return its reference."""
    ref = reference()
    if _exists(ref):
        return ref
    print(f"building the Debian {SUITE} Python base {ref} with mmdebstrap (first time only; a minute)", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="tensorkiln-base-") as tmp:
        rootfs = Path(tmp) / "rootfs.tar"
        subprocess.run(
            [
                "mmdebstrap", "--quiet", "--variant=apt", f"--include={','.join(PACKAGES)}",
                *(f"--dpkgopt=path-exclude={pattern}" for pattern in EXCLUDED),
                "--customize-hook=rm -rf \"$1\"/var/lib/apt/lists/* \"$1\"/var/cache/apt/*",
                SUITE, str(rootfs),
            ],
            check=True,
        )  # fmt: skip
        subprocess.run(
            ["podman", "import", "--quiet", *(f"--change={line}" for line in CONFIG), str(rootfs), ref],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return ref
