"""s3://bucket/key: downloaded into the work dir through the registry's S3 client, with the same endpoint and
credentials (TENSORKILN_S3_ENDPOINT, AWS_*).

A missing key or bucket and denied access are bad input (exit 2); any other S3 error, a connection error or
an image without minio may pass (exit 1).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from ..errors import CompileError, InvalidInput
from . import download_path


def fetch(uri: str, dest_dir: Path, *, field: str, what: str) -> Path:
    path = download_path(uri, dest_dir)
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
    return path
