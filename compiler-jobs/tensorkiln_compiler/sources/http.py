"""http:// and https://: a GET downloaded into the work dir.

4xx is bad input (exit 2) but 408 and 429, which say "later"; those, 5xx, timeouts and connection
errors may pass (exit 1).
"""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request
from pathlib import Path

from ..errors import CompileError, InvalidInput
from . import download_path

TIMEOUT_S = 60


def fetch(uri: str, dest_dir: Path, *, field: str, what: str) -> Path:
    path = download_path(uri, dest_dir)
    try:
        with urllib.request.urlopen(uri, timeout=TIMEOUT_S) as response, path.open("wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
    except urllib.error.HTTPError as e:
        if 400 <= e.code < 500 and e.code not in (408, 429):
            raise InvalidInput(f"{what}Unreachable", f"{field}: GET {uri} answered {e.code} {e.reason}") from e
        raise CompileError(f"{what}FetchFailed", f"{field}: GET {uri} answered {e.code} {e.reason}") from e
    except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
        raise CompileError(f"{what}FetchFailed", f"{field}: GET {uri} failed: {e}") from e
    return path
