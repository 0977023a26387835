"""spec.source.credentials: the compile pod gets the Secret (read-only files) or runs as the ServiceAccount,
and each source reads its own keys from it, never the engine registry's credentials; a refused credential
is ModelAccessDenied naming the field, the URI and the Secret, never the value."""

import http.server
import json
import threading

import pytest
from tensorkiln.builders.compilejob import build_compile_job, options_hash
from tensorkiln.builders.job import build_job, job_name
from tensorkiln.controllers.inferencemodel import normalised_spec
from tensorkiln_api.common import ModelSource
from tensorkiln_compiler.errors import InvalidInput
from tensorkiln_compiler.fetch import fetch
from tensorkiln_compiler.sources import s3
from tensorkiln_compiler.sources.credentials import ENV, Credentials

from .test_builders import CLASSES, SETTINGS, sample_model

SECRET_DIR = "/var/run/tensorkiln/source-credentials"
TOKEN = "planted-token-7f3a"


def compile_job(credentials: dict | None) -> dict:
    model = sample_model()
    if credentials is not None:
        model["spec"]["source"]["credentials"] = credentials
    cj = build_compile_job(model, normalised_spec(model), CLASSES["nvidia-l4"], SETTINGS)
    cj["metadata"]["uid"] = "5a1d2a8e-2f0e-4d4f-8a51-3c0c4b9b7f22"
    return cj


def pod_of(cj: dict) -> dict:
    return build_job(cj)["spec"]["template"]["spec"]


def test_a_secret_is_mounted_read_only_and_named_to_the_compiler():
    pod = pod_of(compile_job({"secretName": "model-keys"}))
    (container,) = pod["containers"]
    assert pod["volumes"][-1] == {
        "name": "source-credentials",
        "secret": {"secretName": "model-keys", "defaultMode": 0o440},
    }
    assert container["volumeMounts"][-1] == {"name": "source-credentials", "mountPath": SECRET_DIR, "readOnly": True}
    assert {"name": ENV, "value": SECRET_DIR} in container["env"]
    assert pod["automountServiceAccountToken"] is False and "serviceAccountName" not in pod
    spec = json.loads(container["env"][0]["value"])
    assert spec["source"]["credentials"] == {"secretName": "model-keys"}


def test_a_service_account_runs_the_pod_with_its_token():
    pod = pod_of(compile_job({"serviceAccountName": "model-reader"}))
    assert pod["serviceAccountName"] == "model-reader"
    assert pod["automountServiceAccountToken"] is True
    assert "source-credentials" not in str(pod["volumes"])


def test_no_credentials_no_volume_no_token_and_the_names_of_before():
    cj = compile_job(None)
    pod = pod_of(cj)
    assert "source-credentials" not in json.dumps(pod)
    assert pod["automountServiceAccountToken"] is False
    with_secret = compile_job({"secretName": "model-keys"})
    # A rotated Secret is no new engine (same options hash) but a new Job (its pod template differs).
    assert with_secret["spec"]["optionsHash"] == cj["spec"]["optionsHash"] == options_hash(cj["spec"])
    assert job_name(with_secret) != job_name(cj)


def test_exactly_one_of_secret_and_service_account():
    for credentials in ({}, {"secretName": "a", "serviceAccountName": "b"}):
        with pytest.raises(ValueError, match="secretName or serviceAccountName: set exactly one"):
            ModelSource.model_validate({"uri": "s3://models/m.onnx", "credentials": credentials})


@pytest.fixture
def bearer_server(tmp_path):
    """A loopback HTTP server that serves /m.onnx to the bearer TOKEN alone, and records what it was sent."""
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.headers.get("Authorization"))
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self.send_error(401, "Unauthorized")
                return
            self.send_response(200)
            self.send_header("Content-Length", "5")
            self.end_headers()
            self.wfile.write(b"model")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/m.onnx", seen
    server.shutdown()


def secret(tmp_path, **keys) -> Credentials:
    directory = tmp_path / "secret"
    directory.mkdir()
    for key, value in keys.items():
        (directory / key).write_text(value + "\n")  # as `kubectl create secret --from-file` often holds it
    return Credentials(secret_name="model-token", directory=directory)


def test_http_sends_the_secrets_token_as_a_bearer_token(tmp_path, bearer_server):
    uri, seen = bearer_server
    fetched = fetch(
        uri, tmp_path / "dl", field="spec.source.uri", what="Model", credentials=secret(tmp_path, token=TOKEN)
    )
    assert fetched.path.read_bytes() == b"model"
    assert seen == [f"Bearer {TOKEN}"]


@pytest.mark.parametrize("token", [None, "wrong-token-91c2"])
def test_http_refused_credentials_name_the_field_the_uri_and_the_secret_not_the_value(tmp_path, bearer_server, token):
    uri, seen = bearer_server
    credentials = secret(tmp_path, token=token) if token else Credentials()
    with pytest.raises(InvalidInput) as error:
        fetch(uri, tmp_path / "dl", field="spec.source.uri", what="Model", credentials=credentials)
    assert error.value.reason == "ModelAccessDenied"
    assert error.value.message.startswith(f"spec.source.uri: GET {uri} answered 401")
    assert error.value.message.endswith(
        "with spec.source.credentials.secretName 'model-token'"
        if token
        else "with no spec.source.credentials (anonymous)"
    )
    assert seen == [f"Bearer {token}" if token else None]
    assert TOKEN not in error.value.message and "wrong-token" not in error.value.message


REGISTRY_ENV = {
    "TENSORKILN_S3_ENDPOINT": "http://registry-s3.example.test:7070",
    "AWS_ACCESS_KEY_ID": "registry-key",
    "AWS_SECRET_ACCESS_KEY": "registry-secret",
    "SSL_CERT_FILE": "/etc/ssl/ca.pem",
}


def test_s3_reads_the_secrets_keys_and_endpoint_never_the_registrys(tmp_path, monkeypatch):
    for name, value in REGISTRY_ENV.items():
        monkeypatch.setenv(name, value)
    credentials = secret(
        tmp_path,
        AWS_ACCESS_KEY_ID="model-key",
        AWS_SECRET_ACCESS_KEY="model-secret",
        AWS_ENDPOINT_URL="http://s3.test:9000",
    )
    assert s3._environment(credentials) == {
        "SSL_CERT_FILE": "/etc/ssl/ca.pem",
        "AWS_ACCESS_KEY_ID": "model-key",
        "AWS_SECRET_ACCESS_KEY": "model-secret",
        "AWS_ENDPOINT_URL": "http://s3.test:9000",
    }
    # Anonymous, and a workload identity: the pod's settings, no keys, not the registry's endpoint.
    assert s3._environment(Credentials()) == {"SSL_CERT_FILE": "/etc/ssl/ca.pem"}
    assert s3._environment(Credentials(service_account_name="reader")) == {"SSL_CERT_FILE": "/etc/ssl/ca.pem"}


def test_s3_refused_keys_are_access_denied_naming_the_secret(tmp_path, monkeypatch):
    """A refusal as minio raises it for a wrong secret key, at a stand-in endpoint that answers 403."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = (
                b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SignatureDoesNotMatch</Code>'
                b"<Message>The request signature we calculated does not match</Message></Error>"
            )
            self.send_response(403)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_HEAD = do_GET

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        credentials = secret(
            tmp_path,
            AWS_ACCESS_KEY_ID="model-key",
            AWS_SECRET_ACCESS_KEY="wrong-secret-5d1e",
            AWS_ENDPOINT_URL=f"http://127.0.0.1:{server.server_port}",
        )
        with pytest.raises(InvalidInput) as error:
            fetch("s3://models/m.onnx", tmp_path / "dl", field="spec.source.uri", what="Model", credentials=credentials)
    finally:
        server.shutdown()
    assert error.value.reason == "ModelAccessDenied"
    # minio asks with a HEAD first, whose 403 has no body: it names the refusal by its status.
    assert error.value.message == (
        "spec.source.uri: s3://models/m.onnx: AccessDenied with spec.source.credentials.secretName 'model-token'"
    )


def test_credentials_come_from_the_spec_and_the_mounted_directory(tmp_path):
    source = ModelSource.model_validate({"uri": "s3://models/m.onnx", "credentials": {"secretName": "keys"}})
    found = Credentials.of(source.credentials, {ENV: str(tmp_path)})
    assert found == Credentials(secret_name="keys", directory=tmp_path)
    assert Credentials.of(None, {ENV: str(tmp_path)}) == Credentials()
    ambient = ModelSource.model_validate({"uri": "gs://models/m.onnx", "credentials": {"serviceAccountName": "sa"}})
    assert Credentials.of(ambient.credentials, {}).ambient
