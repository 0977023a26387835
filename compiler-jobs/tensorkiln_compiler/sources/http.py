"""http:// and https://: a GET downloaded into the work dir, with the Secret's `token` as a bearer token
when spec.source.credentials names one.

401 and 403 are credentials refused (exit 2); any other 4xx is bad input (exit 2) but 408 and 429,
which say "later"; those, 5xx, timeouts and connection errors may pass (exit 1).
"""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request
from pathlib import Path

from ..errors import CompileError, InvalidInput
from . import download_path
from .credentials import Credentials

TIMEOUT_S = 60


def fetch(uri: str, dest_dir: Path, *, field: str, what: str, credentials: Credentials) -> Path:
    path = download_path(uri, dest_dir)
    token = credentials.read("token")
    request = urllib.request.Request(uri, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response, path.open("wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
    except urllib.error.HTTPError as e:
        if e.code in (401, 403):
            raise InvalidInput(
                f"{what}AccessDenied", f"{field}: GET {uri} answered {e.code} {e.reason} with {credentials.described}"
            ) from e
        if 400 <= e.code < 500 and e.code not in (408, 429):
            raise InvalidInput(f"{what}Unreachable", f"{field}: GET {uri} answered {e.code} {e.reason}") from e
        raise CompileError(f"{what}FetchFailed", f"{field}: GET {uri} answered {e.code} {e.reason}") from e
    except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
        raise CompileError(f"{what}FetchFailed", f"{field}: GET {uri} failed: {e}") from e
    return path
