"""s3://bucket/key: downloaded into the work dir with the engine registry's S3 client code, but never its
credentials: those of spec.source.credentials alone.

- a Secret: its AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (AWS_SESSION_TOKEN, AWS_REGION) and
  AWS_ENDPOINT_URL (an S3-compatible store; unset: AWS);
- a ServiceAccount: the pod's workload identity (IRSA's AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN,
  which EKS injects, then the instance metadata), through minio's IAM provider;
- none: anonymous, at AWS_ENDPOINT_URL of the pod's environment if set (the pod's own setting, never the
  registry's TENSORKILN_S3_ENDPOINT), else AWS.

A missing key or bucket is bad input (exit 2), refused credentials too (AccessDenied and the like); any
other S3 error, a connection error or an image without minio may pass (exit 1).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import CompileError, InvalidInput
from . import download_path
from .credentials import Credentials

# What S3 answers to credentials it does not take.
DENIED = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken")
SECRET_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_ENDPOINT_URL")
# The pod's own settings a fetch keeps (a CA bundle, a proxy's), never its S3 credentials or endpoint.
POD_SETTINGS = ("SSL_CERT_FILE", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy")


def _environment(credentials: Credentials) -> dict[str, str]:
    """What S3Registry.from_env reads, from the Secret alone; no Secret: the pod's endpoint setting."""
    env = {name: os.environ[name] for name in POD_SETTINGS if name in os.environ}
    if credentials.secret_name:
        env |= {key: value for key in SECRET_KEYS if (value := credentials.read(key))}
    elif os.environ.get("AWS_ENDPOINT_URL"):
        env["AWS_ENDPOINT_URL"] = os.environ["AWS_ENDPOINT_URL"]
    return env


def fetch(uri: str, dest_dir: Path, *, field: str, what: str, credentials: Credentials) -> Path:
    path = download_path(uri, dest_dir)
    parts = urlsplit(uri)
    try:
        from minio.credentials.providers import IamAwsProvider
        from minio.error import S3Error
        from tensorkiln_api.registry.s3 import S3Registry

        # Not EnvAWSProvider: the pod's AWS_* environment holds an S3 engine registry's keys.
        identity = IamAwsProvider() if credentials.ambient else None
        client = S3Registry.from_env(parts.netloc, "", env=_environment(credentials), provider=identity).client
        client.fget_object(parts.netloc, parts.path.lstrip("/"), str(path))
    except ImportError as e:
        raise CompileError(
            f"{what}FetchFailed", f"{field}: {uri} needs the s3 extra (minio), which this image lacks"
        ) from e
    except S3Error as e:
        if e.code in DENIED:
            raise InvalidInput(f"{what}AccessDenied", f"{field}: {uri}: {e.code} with {credentials.described}") from e
        if e.code in ("NoSuchKey", "NoSuchBucket"):
            raise InvalidInput(f"{what}Unreachable", f"{field}: {uri}: {e.code}") from e
        raise CompileError(f"{what}FetchFailed", f"{field}: {uri}: {e.code}: {e.message}") from e
    except Exception as e:  # connection errors, a malformed endpoint: maybe not there on the next try
        raise CompileError(f"{what}FetchFailed", f"{field}: {uri}: {type(e).__name__}: {e}") from e
    return path
