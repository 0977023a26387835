"""hf:// sources: the real huggingface_hub client against a stand-in of the Hugging Face Hub's file API on a
loopback port (HF_ENDPOINT), with the token of spec.source.credentials or none."""

import hashlib
import threading
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

import pytest
from huggingface_hub import constants
from huggingface_hub.utils import _http as hub_http
from tensorkiln_compiler import fetch as fetch_step
from tensorkiln_compiler.errors import EXIT_FAILED, EXIT_INVALID_INPUT, CompileError, InvalidInput
from tensorkiln_compiler.sources import hf
from tensorkiln_compiler.sources.credentials import Credentials

FIELD = "spec.source.uri"
MODEL = b"onnx model bytes " * 1000
TOKEN = "hf_secretAccessToken0123456789"
URI = "hf://acme/resnet-50@v1.0/onnx/model.onnx"


class HubStandIn:
    """A stand-in of the Hugging Face Hub's file API, not the Hub: just what hf_hub_download asks of it,
    HEAD and GET /<owner>/<repo>/resolve/<revision>/<path>, answered with the headers the client checks
    (X-Repo-Commit, ETag, Content-Length) and the Hub's error headers (X-Error-Code: RepoNotFound,
    RevisionNotFound, EntryNotFound, GatedRepo; X-Error-Message).

    `repos`: repository id -> revision -> path -> bytes. A request without Authorization reads all but the
    `gated` repositories; a Bearer token in `tokens` reads all; any other token is answered 401 as the Hub
    answers it. Paths in `failing` are answered 500. `seen` records every request: (method, path,
    Authorization)."""

    def __init__(self):
        self.repos: dict[str, dict[str, dict[str, bytes]]] = {}
        self.gated: set[str] = set()
        self.tokens: set[str] = set()
        self.failing: set[str] = set()
        self.seen: list[tuple[str, str, str | None]] = []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_HEAD(self):
                stand_in._resolve(self, body=False)

            def do_GET(self):
                stand_in._resolve(self, body=True)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def _resolve(self, request, body: bool):
        authorization = request.headers.get("Authorization")
        self.seen.append((request.command, request.path, authorization))
        owner, name, resolve, revision, path = (unquote(part) for part in request.path.split("?")[0][1:].split("/", 4))
        repo = f"{owner}/{name}"
        if resolve != "resolve":
            return self._answer(request, 400, {"X-Error-Message": "the stand-in serves /resolve/ alone"})
        if authorization is not None and authorization.removeprefix("Bearer ") not in self.tokens:
            return self._answer(request, 401, {"X-Error-Message": "Invalid credentials in Authorization header"})
        if repo not in self.repos:  # 401 to an anonymous request, as to one for a private repository
            return self._answer(request, 404 if authorization else 401, {"X-Error-Code": "RepoNotFound"})
        if repo in self.gated and authorization is None:
            return self._answer(request, 403, {"X-Error-Code": "GatedRepo", "X-Error-Message": "Access restricted"})
        if revision not in self.repos[repo]:
            return self._answer(request, 404, {"X-Error-Code": "RevisionNotFound"})
        commit = hashlib.sha1(f"{repo}@{revision}".encode()).hexdigest()
        if path in self.failing:
            return self._answer(request, 500, {"X-Repo-Commit": commit})
        files = self.repos[repo][revision]
        if path not in files:
            return self._answer(request, 404, {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": commit})
        content = files[path]
        self._answer(
            request, 200,
            {"X-Repo-Commit": commit, "ETag": f'"{hashlib.sha256(content).hexdigest()}"'},
            content if body else None, len(content),
        )  # fmt: skip

    def _answer(self, request, status: int, headers: dict, content: bytes | None = None, length: int = 0):
        request.send_response(status)
        for header, value in headers.items():
            request.send_header(header, value)
        request.send_header("Content-Length", str(length))
        request.end_headers()
        if content is not None:
            request.wfile.write(content)

    def files_served(self) -> list[str]:
        return [path for method, path, _ in self.seen if method == "GET"]


@pytest.fixture
def hub(monkeypatch, tmp_path):
    stand_in = HubStandIn()
    stand_in.repos["acme/resnet-50"] = {"v1.0": {"onnx/model.onnx": MODEL, "README.md": b"# resnet"}}
    stand_in.tokens.add(TOKEN)
    monkeypatch.setenv("HF_ENDPOINT", stand_in.url)
    monkeypatch.setenv("HF_TOKEN", "hf_thePodsOwnTokenNeverSent")
    # The pod's HF_HOME (read when the library was imported): its cache and token file, which no fetch uses.
    home = tmp_path / "pod-hf-home"
    for name, path in {"HF_HOME": "", "HF_HUB_CACHE": "hub", "HF_XET_CACHE": "xet", "HF_TOKEN_PATH": "token"}.items():
        monkeypatch.setattr(constants, name, str(home / path))
    home.mkdir()
    (home / "token").write_text("hf_thePodsTokenFileNeverSent")
    yield stand_in
    stand_in.server.shutdown()
    stand_in.server.server_close()


def secret(tmp_path, token: str) -> Credentials:
    """The Secret hf-token as the compile pod holds it: a file per key."""
    directory = tmp_path / "secret"
    directory.mkdir()
    (directory / "token").write_text(f"{token}\n")
    return Credentials(secret_name="hf-token", directory=directory)


def only_under(directory: Path, root: Path) -> None:
    """Nothing was written in root but under directory (the secret aside)."""
    written = {p for p in root.rglob("*") if p.is_file()} - {root / "secret" / "token", root / "pod-hf-home" / "token"}
    assert written and all(p.is_relative_to(directory) for p in written), sorted(written)


def test_secret_token_downloads_the_file_at_the_revision(hub, tmp_path):
    dest = tmp_path / "dl"
    path = hf.fetch(URI, dest, field=FIELD, what="Model", credentials=secret(tmp_path, TOKEN))
    assert path == dest / "onnx" / "model.onnx" and path.read_bytes() == MODEL
    resolve = "/acme/resnet-50/resolve/v1.0/onnx/model.onnx"
    assert hub.seen == [("HEAD", resolve, f"Bearer {TOKEN}"), ("GET", resolve, f"Bearer {TOKEN}")]
    only_under(dest, tmp_path)


def test_anonymous_sends_no_token_not_even_the_pods(hub, tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # as HF_HUB_OFFLINE=1 in the pod would have set it
    fetched = fetch_step.fetch(URI, tmp_path / "dl", field=FIELD, what="Model", credentials=Credentials())
    assert fetched.sha256 == hashlib.sha256(MODEL).hexdigest()
    assert [auth for _, _, auth in hub.seen] == [None, None] and len(hub.files_served()) == 1
    only_under(tmp_path / "dl", tmp_path)


def test_a_gated_repository_is_access_denied_without_a_token(hub, tmp_path):
    hub.gated.add("acme/resnet-50")
    with pytest.raises(InvalidInput) as error:
        hf.fetch(URI, tmp_path / "dl", field=FIELD, what="Model", credentials=Credentials())
    assert error.value.reason == "ModelAccessDenied"
    assert error.value.message == f"{FIELD}: {URI}: a gated repository with no spec.source.credentials (anonymous)"
    assert hub.seen == [("HEAD", "/acme/resnet-50/resolve/v1.0/onnx/model.onnx", None)]


def test_a_wrong_token_is_access_denied_naming_the_secret(hub, tmp_path):
    wrong = "hf_wrongToken9876543210"
    with pytest.raises(InvalidInput) as error:
        fetch_step.fetch(URI, tmp_path / "dl", field=FIELD, what="Model", credentials=secret(tmp_path, wrong))
    assert error.value.reason == "ModelAccessDenied" and error.value.exit_code == EXIT_INVALID_INPUT
    assert error.value.message == f"{FIELD}: {URI}: 401 Unauthorized with spec.source.credentials.secretName 'hf-token'"
    assert wrong not in error.value.message
    assert hub.seen == [("HEAD", "/acme/resnet-50/resolve/v1.0/onnx/model.onnx", f"Bearer {wrong}")]


@pytest.mark.parametrize(
    "uri, why",
    [
        (
            "hf://acme/resnet-18@v1.0/onnx/model.onnx",
            "no repository acme/resnet-18, or a private one (tried with no spec.source.credentials (anonymous))",
        ),
        ("hf://acme/resnet-50@v2.0/onnx/model.onnx", "repository acme/resnet-50 has no revision v2.0"),
        (
            "hf://acme/resnet-50@v1.0/onnx/model-int8.onnx",
            "repository acme/resnet-50 has no file onnx/model-int8.onnx at revision v1.0",
        ),
    ],
)
def test_a_missing_repository_revision_or_file_is_unreachable(hub, tmp_path, uri, why):
    with pytest.raises(InvalidInput) as error:
        hf.fetch(uri, tmp_path / "dl", field=FIELD, what="Model", credentials=Credentials())
    assert error.value.reason == "ModelUnreachable" and error.value.exit_code == EXIT_INVALID_INPUT
    assert error.value.message == f"{FIELD}: {uri}: {why}"
    assert [method for method, _, _ in hub.seen] == ["HEAD"]


def test_a_server_error_may_pass_on_a_retry(hub, tmp_path, monkeypatch):
    monkeypatch.setattr(hub_http, "time", types.SimpleNamespace(sleep=lambda seconds: None))  # its backoff
    hub.failing.add("onnx/model.onnx")
    with pytest.raises(CompileError) as error:
        hf.fetch(URI, tmp_path / "dl", field=FIELD, what="Model", credentials=secret(tmp_path, TOKEN))
    assert not isinstance(error.value, InvalidInput) and error.value.exit_code == EXIT_FAILED
    assert (
        error.value.reason == "ModelFetchFailed" and error.value.message == f"{FIELD}: {URI}: 500 Internal Server Error"
    )
    assert len(hub.seen) > 1 and {method for method, _, _ in hub.seen} == {"HEAD"}  # retried, then given up


@pytest.mark.parametrize(
    "uri",
    [
        "hf://acme/resnet-50/onnx/model.onnx",
        "hf://resnet-50@v1.0/model.onnx",
        "hf://acme/resnet-50@v1.0/",
        "hf://acme/resnet-50@v1.0/a/../model.onnx",
    ],
)
def test_a_malformed_uri_is_unreachable_naming_the_form(uri, tmp_path):
    with pytest.raises(InvalidInput) as error:
        hf.fetch(uri, tmp_path, field=FIELD, what="Model", credentials=Credentials())
    assert error.value.reason == "ModelUnreachable"
    assert error.value.message == (
        f"{FIELD}: {uri} is no Hugging Face file: expected hf://owner/repository@revision/path/file.onnx"
    )


def test_no_hub_at_the_endpoint_may_pass_on_a_retry(tmp_path, monkeypatch):
    monkeypatch.setattr(hub_http, "time", types.SimpleNamespace(sleep=lambda seconds: None))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:1")
    with pytest.raises(CompileError) as error:
        hf.fetch(URI, tmp_path / "dl", field=FIELD, what="Model", credentials=Credentials())
    assert not isinstance(error.value, InvalidInput) and error.value.reason == "ModelFetchFailed"
    assert error.value.message.startswith(f"{FIELD}: {URI}: ConnectError: ")
