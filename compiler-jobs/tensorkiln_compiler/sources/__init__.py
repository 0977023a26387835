"""Model and dataset sources: one module per URI scheme, each bringing what a URI names into the pod.

A source module exposes `fetch(uri, dest_dir, *, field, what, credentials) -> Path`: the file (or
directory) to hash, read in place (`in_place`) or downloaded under dest_dir (`download_path`), with
`credentials` (credentials.py: spec.source.credentials) and nothing else; a source whose URI names an
OCI artifact exposes `pull` instead, which returns the manifest's descriptor too (an engine links to
it: `puller`). `field` names the spec
field in its errors and `what` prefixes their reasons (Model, CalibrationData): `{what}Unreachable`
(InvalidInput, exit 2) where the same URI would fail again, `{what}FetchFailed` (exit 1) where a
retry may pass; credentials the source refuses are `{what}AccessDenied` (exit 2), naming the source
and `credentials.described`. A scheme with no module here is refused by name (`{what}UnsupportedScheme`, exit 2)
rather than guessed at.

Adding a scheme: one module here with its `fetch` (or `pull`), one entry in SCHEMES, and the scheme in
tensorkiln_api.common.MODEL_URI_PATTERN, which the CRD admits URIs by
(tests/unit/test_compiler_fetch.py holds the two equal).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from urllib.parse import unquote, urlsplit

from ..errors import InvalidInput

# scheme -> module: imported on demand, as the candidates are, so a compile loads only the source it uses.
SCHEMES = {
    "file": "file",
    "pvc": "pvc",
    "http": "http",
    "https": "http",
    "s3": "s3",
    "oci": "oci",
    "gs": "gs",
    "hf": "hf",
}


def puller(uri: str, *, field: str, what: str) -> Callable[..., tuple[Path, dict | None]]:
    """What brings the URI in with the artifact it came from: an OCI source's `pull` (the file and its
    manifest's descriptor, which an engine links to), any other source's `fetch` (no artifact)."""
    module = module_for(uri, field=field, what=what)
    if hasattr(module, "pull"):
        return module.pull
    return lambda *args, **kwargs: (module.fetch(*args, **kwargs), None)


def module_for(uri: str, *, field: str, what: str) -> ModuleType:
    """The module of the URI's scheme; InvalidInput for a scheme none serves."""
    scheme = urlsplit(uri).scheme
    if scheme not in SCHEMES:
        raise InvalidInput(
            f"{what}UnsupportedScheme", f"{field}: scheme {scheme!r} is not supported here ({', '.join(SCHEMES)})"
        )
    return importlib.import_module(f"{__name__}.{SCHEMES[scheme]}")


def in_place(uri: str, path: Path, *, field: str, what: str) -> Path:
    """`path`, which `uri` names on this pod's filesystem, when it exists (no copy of a large model)."""
    if not path.exists():
        raise InvalidInput(f"{what}Unreachable", f"{field}: {uri} does not exist ({path})")
    return path


def download_path(uri: str, dest_dir: Path) -> Path:
    """Where a download of `uri` goes: dest_dir/<the URI's file name>."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    return dest_dir / (Path(unquote(urlsplit(uri).path)).name or "download")
