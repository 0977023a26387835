"""Fetch step: bring the model (or the calibration dataset) into the pod and hash it.

file:// and pvc:// are read in place (a hostPath or a mounted claim: no copy of a large model);
http(s):// and s3:// are downloaded into the work dir (s3:// with the registry's client and settings).
A missing file, an HTTP 4xx or a missing S3 key is bad input (exit 2); timeouts, 5xx and connection
errors may pass, so they exit 1.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from .errors import CompileError, InvalidInput

log = logging.getLogger(__name__)

# pvc://claim/path is read from PVC_ROOT/claim/path: the operator mounts each claim there.
PVC_ROOT_ENV = "TENSORKILN_PVC_ROOT"
DEFAULT_PVC_ROOT = "/mnt/pvc"
HTTP_TIMEOUT_S = 60


@dataclass(frozen=True)
class Fetched:
    uri: str
    path: Path  # a file, or a directory (a dataset of .npy files)
    sha256: str


def fetch(uri: str, dest_dir: Path, *, field: str, what: str) -> Fetched:
    """`field` names the spec field in errors; `what` prefixes the reason (Model, CalibrationData)."""
    parts = urlsplit(uri)
    if parts.scheme in ("file", "pvc"):
        path = local_path(uri)
        if not path.exists():
            raise InvalidInput(f"{what}Unreachable", f"{field}: {uri} does not exist ({path})")
    else:
        dest_dir.mkdir(parents=True, exist_ok=True)
        path = dest_dir / (Path(unquote(parts.path)).name or "download")
        download = _download_http if parts.scheme in ("http", "https") else _download_s3
        download(uri, path, field=field, what=what)
    fetched = Fetched(uri, path, sha256_path(path))
    log.info("fetched %s: %s (sha256 %s)", field, path, fetched.sha256)
    return fetched


def verify_digest(fetched: Fetched, expected: dict[str, str | None]) -> None:
    """Compare with every expected digest given, by the spec field that gave it."""
    for field, want in expected.items():
        if want and want != fetched.sha256:
            raise InvalidInput(
                "DigestMismatch", f"{field}: expected sha256 {want}, but {fetched.uri} has {fetched.sha256}"
            )


def local_path(uri: str) -> Path:
    parts = urlsplit(uri)
    if parts.scheme == "pvc":
        return Path(os.environ.get(PVC_ROOT_ENV, DEFAULT_PVC_ROOT)) / parts.netloc / unquote(parts.path).lstrip("/")
    return Path(unquote(parts.path))


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


def _download_http(uri: str, path: Path, *, field: str, what: str) -> None:
    try:
        with urllib.request.urlopen(uri, timeout=HTTP_TIMEOUT_S) as response, path.open("wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
    except urllib.error.HTTPError as e:
        if 400 <= e.code < 500 and e.code not in (408, 429):
            raise InvalidInput(f"{what}Unreachable", f"{field}: GET {uri} answered {e.code} {e.reason}") from e
        raise CompileError(f"{what}FetchFailed", f"{field}: GET {uri} answered {e.code} {e.reason}") from e
    except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
        raise CompileError(f"{what}FetchFailed", f"{field}: GET {uri} failed: {e}") from e


def _download_s3(uri: str, path: Path, *, field: str, what: str) -> None:
    """Through the registry's S3 client: same endpoint and credentials (TENSORKILN_S3_ENDPOINT, AWS_*)."""
    parts = urlsplit(uri)
    try:
        from minio.error import S3Error
        from tensorkiln_api.registry.s3 import S3Registry

        client = S3Registry.from_env(parts.netloc, "").client
        client.fget_object(parts.netloc, parts.path.lstrip("/"), str(path))
    except ImportError as e:
        raise CompileError(
            f"{what}FetchFailed", f"{field}: {uri} needs the s3 extra (minio), which this image lacks"
        ) from e
    except S3Error as e:
        if e.code in ("NoSuchKey", "NoSuchBucket", "AccessDenied"):
            raise InvalidInput(f"{what}Unreachable", f"{field}: {uri}: {e.code}") from e
        raise CompileError(f"{what}FetchFailed", f"{field}: {uri}: {e.code}: {e.message}") from e
    except Exception as e:  # connection errors, a malformed endpoint: maybe not there on the next try
        raise CompileError(f"{what}FetchFailed", f"{field}: {uri}: {type(e).__name__}: {e}") from e
