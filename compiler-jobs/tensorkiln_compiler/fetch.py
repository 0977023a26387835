"""Fetch step: bring the model (or the calibration dataset) into the pod and hash it.

Each URI scheme has its module in sources/ (file:// and pvc:// read in place, http(s)://, s3:// and oci://
downloaded into the work dir); a scheme none serves is refused by name. Bad input (a missing file, an
HTTP 4xx, a missing S3 key, an unsupported scheme) exits 2; timeouts, 5xx and connection errors may
pass, so they exit 1.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

from . import sources
from .errors import InvalidInput
from .sources.credentials import NONE, Credentials

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Fetched:
    uri: str
    path: Path  # a file, or a directory (a dataset of .npy files)
    sha256: str
    artifact: dict | None = None  # an oci:// source's manifest descriptor: what an engine links to


def fetch(uri: str, dest_dir: Path, *, field: str, what: str, credentials: Credentials = NONE) -> Fetched:
    """`field` names the spec field in errors; `what` prefixes the reason (Model, CalibrationData);
    `credentials`: spec.source.credentials, for the source alone."""
    pull = sources.puller(uri, field=field, what=what)
    path, artifact = pull(uri, dest_dir, field=field, what=what, credentials=credentials)
    fetched = Fetched(uri, path, sha256_path(path), artifact)
    log.info("fetched %s: %s (sha256 %s)", field, path, fetched.sha256)
    return fetched


def verify_digest(fetched: Fetched, expected: dict[str, str | None]) -> None:
    """Compare with every expected digest given, by the spec field that gave it."""
    for field, want in expected.items():
        if want and want != fetched.sha256:
            raise InvalidInput(
                "DigestMismatch", f"{field}: expected sha256 {want}, but {fetched.uri} has {fetched.sha256}"
            )


def sha256_path(path: Path) -> str:
    """SHA-256 of a file; of a directory, over its sorted (name, file digest) pairs."""
    if path.is_dir():
        listing = "".join(f"{p.name}\0{sha256_path(p)}\n" for p in sorted(path.iterdir()) if p.is_file())
        return hashlib.sha256(listing.encode()).hexdigest()
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
