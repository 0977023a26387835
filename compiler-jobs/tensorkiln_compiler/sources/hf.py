"""hf://owner/repository@revision/path/in/repo/file.onnx: a file of a Hugging Face model repository at a
revision (a commit, a tag or a branch), downloaded with huggingface_hub (the hf extra). The path is taken as
written (no percent-decoding).

Credentials: the Secret's `token` (a user access token); none: anonymous, never a token the pod holds
(HF_TOKEN, a token file). The endpoint: the library's own HF_ENDPOINT (a mirror, a stand-in), read at each
fetch; unset, huggingface.co.

Nothing is written outside dest_dir (the pod's root filesystem is read-only): the file and the library's
metadata go under it, and its cache under HF_HOME is neither read nor written. Offline mode is off and so is
telemetry, whatever the pod's environment says, and so is Xet storage, whose client keeps a chunk cache
under HF_HOME: the Hub serves every file over plain HTTPS too.

A missing repository, revision or file is bad input (exit 2), and so is any other 4xx but 408 and 429;
refused credentials (401, 403, a gated repository) are AccessDenied (exit 2); 5xx, 408, 429, connection
errors and timeouts, once the library's own retries give up, may pass (exit 1).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from tensorkiln_api.common import HF_REPO_ID, HF_REVISION

from ..errors import CompileError, InvalidInput
from .credentials import Credentials

URI = re.compile(rf"hf://(?P<repo>{HF_REPO_ID})@(?P<revision>{HF_REVISION})/(?P<path>[^/]+(/[^/]+)*)")


def fetch(uri: str, dest_dir: Path, *, field: str, what: str, credentials: Credentials) -> Path:
    match = URI.fullmatch(uri)
    if not match or any(part in (".", "..") for part in match["path"].split("/")):
        raise InvalidInput(
            f"{what}Unreachable",
            f"{field}: {uri} is no Hugging Face file: expected hf://owner/repository@revision/path/file.onnx",
        )
    repo, revision, filename = match["repo"], match["revision"], match["path"]
    try:
        from huggingface_hub import constants, errors, hf_hub_download
        from huggingface_hub.utils import disable_progress_bars
    except ImportError as e:
        raise CompileError(
            f"{what}FetchFailed", f"{field}: {uri} needs the hf extra (huggingface-hub), which this image lacks"
        ) from e
    # The library reads these from the environment once, when it is imported: set here for every fetch.
    constants.HF_HUB_OFFLINE = False
    constants.HF_HUB_DISABLE_TELEMETRY = True
    constants.HF_HUB_DISABLE_XET = True
    disable_progress_bars()  # a Job's log, not a terminal

    def unreachable(why: str) -> InvalidInput:
        return InvalidInput(f"{what}Unreachable", f"{field}: {uri}: {why}")

    def denied(why: str) -> InvalidInput:
        return InvalidInput(f"{what}AccessDenied", f"{field}: {uri}: {why} with {credentials.described}")

    try:
        downloaded = hf_hub_download(
            repo,
            filename,
            revision=revision,
            token=credentials.read("token") or False,  # False: no token of the pod's
            endpoint=os.environ.get("HF_ENDPOINT") or None,
            local_dir=dest_dir,
            cache_dir=dest_dir / ".cache" / "huggingface" / "hub",  # only looked into; never the pod's
        )
    except Exception as e:
        # With no copy at hand, the library raises what kept it from the file's metadata as the cause of a
        # LocalEntryNotFoundError (itself an EntryNotFoundError, which a missing file also is).
        cause = e.__cause__ if isinstance(e, errors.LocalEntryNotFoundError) and e.__cause__ else e
        response = cause.response if isinstance(cause, errors.HfHubHTTPError) else None
        status = response.status_code if response is not None else None
        if isinstance(cause, errors.GatedRepoError):  # a RepositoryNotFoundError too
            raise denied("a gated repository") from e
        if isinstance(cause, errors.RepositoryNotFoundError):  # the Hub answers a private one so too
            raise unreachable(f"no repository {repo}, or a private one (tried with {credentials.described})") from e
        if status in (401, 403):
            raise denied(f"{status} {response.reason_phrase}") from e
        if isinstance(cause, errors.RevisionNotFoundError):
            raise unreachable(f"repository {repo} has no revision {revision}") from e
        if isinstance(cause, errors.RemoteEntryNotFoundError):
            raise unreachable(f"repository {repo} has no file {filename} at revision {revision}") from e
        if isinstance(cause, errors.HFValidationError):  # a repository id or revision the Hub does not take
            raise unreachable(str(cause)) from e
        if status is not None and 400 <= status < 500 and status not in (408, 429):
            raise unreachable(f"{status} {response.reason_phrase}") from e
        detail = f"{status} {response.reason_phrase}" if response is not None else f"{type(cause).__name__}: {cause}"
        raise CompileError(f"{what}FetchFailed", f"{field}: {uri}: {detail}") from e
    return Path(downloaded)
