"""file:///abs/path: a file on the node (a hostPath the operator mounts at the same path), read in place."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

from . import in_place
from .credentials import Credentials


def fetch(uri: str, dest_dir: Path, *, field: str, what: str, credentials: Credentials) -> Path:
    return in_place(uri, Path(unquote(urlsplit(uri).path)), field=field, what=what)
