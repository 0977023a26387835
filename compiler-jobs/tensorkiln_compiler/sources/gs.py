"""gs://bucket/object: downloaded into the work dir with the google-cloud-storage client (the gcs extra).

Credentials, from spec.source.credentials:

- a Secret: its `service-account.json` (a service account key), else its `token` (an OAuth2 access token);
- a ServiceAccount: the pod's own Google identity (GKE Workload Identity, GOOGLE_APPLICATION_CREDENTIALS),
  through google.auth.default();
- none: anonymous (a public object).

The endpoint is Cloud Storage's, or the library's own STORAGE_EMULATOR_HOST (an emulator, a stand-in): the
library sends the credentials above to that endpoint too, so TensorKiln has no endpoint setting of its own.

A missing bucket or object and any other 4xx but 408 and 429 are bad input (exit 2); refused credentials (401,
403, a token exchange refused, no Google identity on the pod, a key file that is none) are AccessDenied
(exit 2); 5xx, 408, 429, connection errors and timeouts, once the library's own retries give up, may pass
(exit 1).
"""

from __future__ import annotations

import os
import re
from http import HTTPStatus
from pathlib import Path

from tensorkiln_api.common import GCS_BUCKET

from ..errors import CompileError, InvalidInput
from . import download_path
from .credentials import Credentials

READ_ONLY = ["https://www.googleapis.com/auth/devstorage.read_only"]
TIMEOUT_S = 60
RETRY_TIMEOUT_S = 120.0  # how long the library retries 5xx, 408, 429 and connection errors


def fetch(uri: str, dest_dir: Path, *, field: str, what: str, credentials: Credentials) -> Path:
    bucket, _, name = uri.removeprefix("gs://").partition("/")
    if not uri.startswith("gs://") or not re.fullmatch(GCS_BUCKET, bucket) or not name:
        raise InvalidInput(
            f"{what}Unreachable", f"{field}: {uri} is no Cloud Storage object: expected gs://bucket/object"
        )
    try:
        import requests
        from google.api_core import exceptions as api
        from google.auth import exceptions as auth
        from google.cloud import storage
        from google.cloud.storage.retry import DEFAULT_RETRY
        from google.oauth2.credentials import Credentials as AccessToken
    except ImportError as e:
        raise CompileError(
            f"{what}FetchFailed", f"{field}: {uri} needs the gcs extra (google-cloud-storage), which this image lacks"
        ) from e
    path = download_path(uri, dest_dir)
    # The client fetches the bucket's metadata in the background, for tracing alone: a second request, which
    # needs storage.buckets.get besides the object's storage.objects.get.
    os.environ.setdefault("DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA", "true")

    def denied(why: str) -> InvalidInput:
        return InvalidInput(f"{what}AccessDenied", f"{field}: {uri}: {why} with {credentials.described}")

    try:
        identity, project = _identity(credentials)
    except (auth.DefaultCredentialsError, ValueError) as e:  # no identity on the pod, a key file that is none
        raise denied(f"no usable Google credentials ({type(e).__name__})") from e
    try:
        if identity is None:
            client = storage.Client.create_anonymous_client()
        else:
            client = storage.Client(project=project, credentials=identity)
        retry = DEFAULT_RETRY.with_timeout(RETRY_TIMEOUT_S)
        client.bucket(bucket).blob(name).download_to_filename(str(path), timeout=TIMEOUT_S, retry=retry)
    except (api.Unauthorized, api.Forbidden) as e:
        raise denied(_status(e.code)) from e
    except api.ClientError as e:  # NotFound and the other 4xx but 408 and 429, which say "later"
        if e.code in (408, 429):
            raise CompileError(f"{what}FetchFailed", f"{field}: {uri}: {_answer(e)}") from e
        raise InvalidInput(f"{what}Unreachable", f"{field}: {uri}: {_answer(e)}") from e
    except auth.RefreshError as e:
        if isinstance(identity, AccessToken):  # which cannot be refreshed: the library tries on a 401
            raise denied(_status(401)) from e
        if getattr(e, "retryable", False):
            raise CompileError(f"{what}FetchFailed", f"{field}: {uri}: token exchange failed: {e}") from e
        raise denied("token exchange refused") from e
    except api.RetryError as e:
        raise CompileError(
            f"{what}FetchFailed",
            f"{field}: {uri}: still failing after {RETRY_TIMEOUT_S:g}s of retries: {_answer(e.cause)}",
        ) from e
    except (api.GoogleAPICallError, auth.TransportError, requests.RequestException, OSError) as e:
        raise CompileError(f"{what}FetchFailed", f"{field}: {uri}: {_answer(e)}") from e
    return path


def _identity(credentials: Credentials):
    """The google-auth credentials and project of spec.source.credentials; none: anonymous."""
    if key := credentials.path("service-account.json"):
        from google.oauth2 import service_account

        return service_account.Credentials.from_service_account_file(str(key), scopes=READ_ONLY), None
    if token := credentials.read("token"):
        from google.oauth2.credentials import Credentials as AccessToken

        return AccessToken(token), None
    if credentials.ambient:
        import google.auth

        return google.auth.default(scopes=READ_ONLY)
    return None, None


def _status(code: int) -> str:
    try:
        return f"{code} {HTTPStatus(code).phrase}"
    except ValueError:
        return str(code)


def _answer(error) -> str:
    """What the server answered (its status and Cloud Storage's own words), else the error."""
    response = getattr(error, "response", None)
    if not isinstance(getattr(response, "status_code", None), int):
        return f"{type(error).__name__}: {error}"
    try:
        words = response.json()["error"]["message"]
    except Exception:  # not Cloud Storage's JSON error
        words = response.reason
    return f"{_status(response.status_code)}: {words}"[:500]
