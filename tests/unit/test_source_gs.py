"""gs:// sources: the real google-cloud-storage client against a stand-in of the Cloud Storage JSON API on a
loopback port (STORAGE_EMULATOR_HOST), with the credentials of spec.source.credentials."""

import base64
import hashlib
import json
import os
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

import google_crc32c
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from tensorkiln_compiler import fetch as fetch_step
from tensorkiln_compiler.errors import EXIT_FAILED, EXIT_INVALID_INPUT, CompileError, InvalidInput
from tensorkiln_compiler.sources import gs
from tensorkiln_compiler.sources.credentials import Credentials

FIELD = "spec.source.uri"
MODEL = b"onnx model bytes " * 1000
TOKEN = "ya29.secret-access-token"
SA_EMAIL = "compiler@models-project.iam.gserviceaccount.com"
NO_BUCKET_METADATA = "DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA"


def _b64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class CloudStorageStandIn:
    """A stand-in of the Cloud Storage JSON API, not Cloud Storage: just the media download the client makes
    (GET /download/storage/v1/b/<bucket>/o/<object>?alt=media, with its X-Goog-Hash checksums), and of
    Google's OAuth2 token endpoint (POST /token: a service account's signed JWT for an access token).

    A request without Authorization reads the `public` buckets; a Bearer token in `tokens` reads the
    `granted` ones; any other token is answered 401, as Cloud Storage answers a bad token. Objects in
    `failing` are answered 500. `seen` records every request: (method, path, Authorization)."""

    def __init__(self):
        self.objects: dict[tuple[str, str], bytes] = {}
        self.public: set[str] = set()
        self.granted: set[str] = set()
        self.tokens: set[str] = set()
        self.failing: set[str] = set()
        self.keys: dict[str, rsa.RSAPublicKey] = {}  # service account email -> its public key
        self.seen: list[tuple[str, str, str | None]] = []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                stand_in._download(self)

            def do_POST(self):
                stand_in._token(self)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def _download(self, request):
        authorization = request.headers.get("Authorization")
        self.seen.append(("GET", request.path, authorization))
        parts = urlsplit(request.path)
        prefix, _, rest = parts.path.partition("/b/")
        bucket, _, name = rest.partition("/o/")
        name = unquote(name)
        if prefix != "/download/storage/v1" or parse_qs(parts.query).get("alt") != ["media"]:
            return self._error(request, 400, f"the stand-in serves media downloads only, not {request.path}")
        if authorization is None:
            allowed = bucket in self.public
        elif authorization.removeprefix("Bearer ") not in self.tokens:
            return self._error(request, 401, "Invalid Credentials")
        else:
            allowed = bucket in self.granted | self.public
        if not allowed:
            return self._error(request, 403, f"the caller does not have storage.objects.get access to {bucket}")
        if name in self.failing:
            return self._error(request, 500, "Backend Error")
        if (bucket, name) not in self.objects:
            return self._error(request, 404, f"No such object: {bucket}/{name}")
        body = self.objects[bucket, name]
        crc32c = base64.b64encode(struct.pack(">I", google_crc32c.value(body))).decode()
        md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
        request.send_response(200)
        request.send_header("Content-Type", "application/octet-stream")
        request.send_header("Content-Length", str(len(body)))
        request.send_header("X-Goog-Hash", f"crc32c={crc32c},md5={md5}")
        request.send_header("X-Goog-Generation", "1")
        request.end_headers()
        request.wfile.write(body)

    def _token(self, request):
        """The JWT bearer grant (RFC 7523): the assertion must be signed with a known service account's key."""
        form = parse_qs(request.rfile.read(int(request.headers["Content-Length"])).decode())
        self.seen.append(("POST", request.path, request.headers.get("Authorization")))
        header, payload, signature = form["assertion"][0].split(".")
        claims = json.loads(_b64url(payload))
        key = self.keys.get(claims.get("iss"))
        try:
            assert key and claims["aud"] == "https://oauth2.googleapis.com/token"  # what Google's endpoint takes
            assert claims["scope"] == "https://www.googleapis.com/auth/devstorage.read_only"
            assert form["grant_type"] == ["urn:ietf:params:oauth:grant-type:jwt-bearer"]
            key.verify(_b64url(signature), f"{header}.{payload}".encode(), padding.PKCS1v15(), hashes.SHA256())
        except Exception:
            return self._json(request, 400, {"error": "invalid_grant", "error_description": "Invalid JWT Signature."})
        token = f"ya29.exchanged-for-{claims['iss']}"
        self.tokens.add(token)
        self._json(request, 200, {"access_token": token, "expires_in": 3600, "token_type": "Bearer"})

    def _error(self, request, status: int, message: str):
        self._json(request, status, {"error": {"code": status, "message": message, "errors": [{"message": message}]}})

    def _json(self, request, status: int, document: dict):
        body = json.dumps(document).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)

    def service_account_key(self, known: bool = True) -> dict:
        """A service account key file's contents whose token_uri is this stand-in's; its public key known to
        the stand-in, or not (a key of another account's, or revoked)."""
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        if known:
            self.keys[SA_EMAIL] = private.public_key()
        pem = private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return {
            "type": "service_account",
            "project_id": "models-project",
            "private_key_id": "0123456789abcdef",
            "private_key": pem.decode(),
            "client_email": SA_EMAIL,
            "client_id": "1234567890",
            "token_uri": f"{self.url}/token",
        }

    def downloads(self) -> list[tuple[str, str, str | None]]:
        return [entry for entry in self.seen if entry[1].startswith("/download/")]


@pytest.fixture
def storage(monkeypatch):
    stand_in = CloudStorageStandIn()
    stand_in.objects["models-bkt", "resnet/v1/model.onnx"] = MODEL
    stand_in.granted.add("models-bkt")
    stand_in.tokens.add(TOKEN)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", stand_in.url)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.delenv(NO_BUCKET_METADATA, raising=False)  # fetch sets it: no call but the download
    yield stand_in
    os.environ.pop(NO_BUCKET_METADATA, None)
    stand_in.server.shutdown()
    stand_in.server.server_close()


def secret(tmp_path, keys: dict[str, str]) -> Credentials:
    """The Secret gcs-key as the compile pod holds it: a file per key."""
    directory = tmp_path / "secret"
    directory.mkdir()
    for key, value in keys.items():
        (directory / key).write_text(value)
    return Credentials(secret_name="gcs-key", directory=directory)


def test_secret_token_downloads_the_object(storage, tmp_path):
    path = gs.fetch(
        "gs://models-bkt/resnet/v1/model.onnx", tmp_path / "dl", field=FIELD, what="Model",
        credentials=secret(tmp_path, {"token": f"{TOKEN}\n"}),
    )  # fmt: skip
    assert path == tmp_path / "dl" / "model.onnx" and path.read_bytes() == MODEL
    assert storage.seen == [
        ("GET", "/download/storage/v1/b/models-bkt/o/resnet%2Fv1%2Fmodel.onnx?alt=media", f"Bearer {TOKEN}")
    ]


def test_secret_service_account_key_is_exchanged_for_a_token(storage, tmp_path):
    key = json.dumps(storage.service_account_key())
    path = gs.fetch(
        "gs://models-bkt/resnet/v1/model.onnx", tmp_path / "dl", field=FIELD, what="Model",
        credentials=secret(tmp_path, {"service-account.json": key}),
    )  # fmt: skip
    assert path.read_bytes() == MODEL
    exchanged = f"Bearer ya29.exchanged-for-{SA_EMAIL}"
    assert [(method, url.partition("?")[0], auth) for method, url, auth in storage.seen] == [
        ("POST", "/token", None),
        ("GET", "/download/storage/v1/b/models-bkt/o/resnet%2Fv1%2Fmodel.onnx", exchanged),
    ]


def test_service_account_name_uses_the_pods_google_identity(storage, tmp_path, monkeypatch):
    """google.auth.default(): here the pod's GOOGLE_APPLICATION_CREDENTIALS (on GKE, Workload Identity)."""
    key_file = tmp_path / "pod-identity.json"
    key_file.write_text(json.dumps(storage.service_account_key()))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key_file))
    fetched = fetch_step.fetch(
        "gs://models-bkt/resnet/v1/model.onnx", tmp_path / "dl", field=FIELD, what="Model",
        credentials=Credentials(service_account_name="compiler"),
    )  # fmt: skip
    assert fetched.sha256 == hashlib.sha256(MODEL).hexdigest()
    assert storage.downloads()[-1][2] == f"Bearer ya29.exchanged-for-{SA_EMAIL}"


def test_anonymous_reads_a_public_bucket_without_authorization(storage, tmp_path):
    storage.objects["public-models", "m.onnx"] = b"public model"
    storage.public.add("public-models")
    path = gs.fetch("gs://public-models/m.onnx", tmp_path / "dl", field=FIELD, what="Model", credentials=Credentials())
    assert path.read_bytes() == b"public model"
    assert storage.seen == [("GET", "/download/storage/v1/b/public-models/o/m.onnx?alt=media", None)]


@pytest.mark.parametrize(
    "uri, token, status",
    [
        ("gs://models-bkt/resnet/v1/model.onnx", "ya29.wrong-token", "401 Unauthorized"),
        ("gs://other-bkt/resnet/v1/model.onnx", TOKEN, "403 Forbidden"),  # a good token, no access
    ],
)
def test_refused_credentials_are_access_denied_naming_the_secret(storage, tmp_path, uri, token, status):
    storage.objects["other-bkt", "resnet/v1/model.onnx"] = MODEL
    with pytest.raises(InvalidInput) as error:
        gs.fetch(uri, tmp_path / "dl", field=FIELD, what="Model", credentials=secret(tmp_path, {"token": token}))
    assert error.value.reason == "ModelAccessDenied" and error.value.exit_code == EXIT_INVALID_INPUT
    assert error.value.message == f"{FIELD}: {uri}: {status} with spec.source.credentials.secretName 'gcs-key'"
    assert token not in error.value.message
    assert storage.downloads()[0][2] == f"Bearer {token}"


def test_a_service_account_key_the_token_endpoint_refuses_is_access_denied(storage, tmp_path):
    key = storage.service_account_key(known=False)
    with pytest.raises(InvalidInput) as error:
        fetch_step.fetch(
            "gs://models-bkt/resnet/v1/model.onnx", tmp_path / "dl", field=FIELD, what="Model",
            credentials=secret(tmp_path, {"service-account.json": json.dumps(key)}),
        )  # fmt: skip
    assert error.value.reason == "ModelAccessDenied"
    assert error.value.message == (
        f"{FIELD}: gs://models-bkt/resnet/v1/model.onnx: token exchange refused with "
        "spec.source.credentials.secretName 'gcs-key'"
    )
    assert [entry[:2] for entry in storage.seen] == [("POST", "/token")] and not storage.downloads()


def test_a_missing_object_is_unreachable(storage, tmp_path):
    with pytest.raises(InvalidInput) as error:
        gs.fetch(
            "gs://models-bkt/resnet/v2/model.onnx", tmp_path / "dl", field=FIELD, what="Model",
            credentials=secret(tmp_path, {"token": TOKEN}),
        )  # fmt: skip
    assert error.value.reason == "ModelUnreachable" and error.value.exit_code == EXIT_INVALID_INPUT
    assert error.value.message == (
        f"{FIELD}: gs://models-bkt/resnet/v2/model.onnx: 404 Not Found: No such object: models-bkt/resnet/v2/model.onnx"
    )
    assert len(storage.downloads()) == 1


def test_a_server_error_may_pass_on_a_retry(storage, tmp_path, monkeypatch):
    monkeypatch.setattr(gs, "RETRY_TIMEOUT_S", 0.3)  # the library's retries, cut short
    storage.failing.add("resnet/v1/model.onnx")
    with pytest.raises(CompileError) as error:
        gs.fetch(
            "gs://models-bkt/resnet/v1/model.onnx", tmp_path / "dl", field=FIELD, what="Model",
            credentials=secret(tmp_path, {"token": TOKEN}),
        )  # fmt: skip
    assert not isinstance(error.value, InvalidInput) and error.value.exit_code == EXIT_FAILED
    assert error.value.reason == "ModelFetchFailed"
    assert error.value.message == (
        f"{FIELD}: gs://models-bkt/resnet/v1/model.onnx: still failing after 0.3s of retries: "
        "500 Internal Server Error: Backend Error"
    )
    assert storage.downloads()


def test_a_malformed_uri_is_unreachable(tmp_path):
    with pytest.raises(InvalidInput) as error:
        gs.fetch("gs://Bad_Bucket/m.onnx", tmp_path, field=FIELD, what="Model", credentials=Credentials())
    assert error.value.reason == "ModelUnreachable" and "expected gs://bucket/object" in error.value.message


def test_no_storage_at_the_endpoint_may_pass_on_a_retry(tmp_path, monkeypatch):
    monkeypatch.setattr(gs, "RETRY_TIMEOUT_S", 0.3)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:1")
    with pytest.raises(CompileError) as error:
        gs.fetch("gs://models-bkt/m.onnx", tmp_path / "dl", field=FIELD, what="Model", credentials=Credentials())
    assert not isinstance(error.value, InvalidInput) and error.value.reason == "ModelFetchFailed"
    assert error.value.message.startswith(
        f"{FIELD}: gs://models-bkt/m.onnx: still failing after 0.3s of retries: ConnectionError: "
    )
