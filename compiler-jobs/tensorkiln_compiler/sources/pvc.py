"""pvc://claim/path: a file on a PersistentVolumeClaim, read in place where the claim is mounted."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

from . import in_place
from .credentials import Credentials

# pvc://claim/path is read from PVC_ROOT/claim/path, where the claim is mounted. The operator gives a compile
# pod its model's claim as a file:// URI instead (builders.storage), so this serves URIs handed over as given.
PVC_ROOT_ENV = "TENSORKILN_PVC_ROOT"
DEFAULT_PVC_ROOT = "/mnt/pvc"


def fetch(uri: str, dest_dir: Path, *, field: str, what: str, credentials: Credentials) -> Path:
    return in_place(uri, local_path(uri), field=field, what=what)


def local_path(uri: str) -> Path:
    parts = urlsplit(uri)
    return Path(os.environ.get(PVC_ROOT_ENV, DEFAULT_PVC_ROOT)) / parts.netloc / unquote(parts.path).lstrip("/")
