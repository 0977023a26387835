import hashlib
import http.server
import threading
from pathlib import Path

import pytest
from tensorkiln_compiler.errors import EXIT_FAILED, EXIT_INVALID_INPUT, CompileError, InvalidInput
from tensorkiln_compiler.fetch import PVC_ROOT_ENV, _download_http, fetch, local_path, sha256_path, verify_digest


@pytest.fixture
def http_root(tmp_path):
    """A loopback HTTP server over tmp_path/www (https is not needed to test the download path)."""
    root = tmp_path / "www"
    root.mkdir()
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(root))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_file_uri_is_read_in_place_and_hashed(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"model bytes")
    fetched = fetch(f"file://{model}", tmp_path / "dl", field="spec.source.uri", what="Model")
    assert fetched.path == model
    assert fetched.sha256 == hashlib.sha256(b"model bytes").hexdigest()


def test_missing_file_is_invalid_input_naming_the_field(tmp_path):
    with pytest.raises(InvalidInput) as error:
        fetch(f"file://{tmp_path}/nope.onnx", tmp_path, field="spec.source.uri", what="Model")
    assert error.value.reason == "ModelUnreachable"
    assert error.value.exit_code == EXIT_INVALID_INPUT
    assert "spec.source.uri" in error.value.message and "nope.onnx" in error.value.message


def test_digest_mismatch_names_the_field(tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(b"x")
    fetched = fetch(f"file://{model}", tmp_path, field="spec.source.uri", what="Model")
    verify_digest(fetched, {"spec.modelDigest": None, "spec.source.sha256": fetched.sha256})
    with pytest.raises(InvalidInput, match="spec.modelDigest: expected sha256 0000") as error:
        verify_digest(fetched, {"spec.modelDigest": "0" * 64})
    assert error.value.reason == "DigestMismatch"


def test_pvc_uri_maps_under_the_mount_root(monkeypatch):
    monkeypatch.setenv(PVC_ROOT_ENV, "/mnt/claims")
    assert local_path("pvc://models/resnet/model.onnx") == Path("/mnt/claims/models/resnet/model.onnx")


def test_directory_digest_covers_names_and_contents(tmp_path):
    (tmp_path / "a.npy").write_bytes(b"1")
    first = sha256_path(tmp_path)
    (tmp_path / "a.npy").write_bytes(b"2")
    assert sha256_path(tmp_path) != first


def test_download_and_http_errors(http_root, tmp_path):
    root, base = http_root
    (root / "m.onnx").write_bytes(b"served")
    fetched = fetch(f"{base}/m.onnx", tmp_path / "fetched", field="spec.source.uri", what="Model")
    assert fetched.path.read_bytes() == b"served"
    _download_http(f"{base}/m.onnx", tmp_path / "m.onnx", field="spec.source.uri", what="Model")
    assert (tmp_path / "m.onnx").read_bytes() == b"served"
    with pytest.raises(InvalidInput, match="answered 404") as error:
        _download_http(f"{base}/missing.onnx", tmp_path / "x.onnx", field="spec.source.uri", what="Model")
    assert error.value.reason == "ModelUnreachable"


def test_connection_failure_is_retryable(tmp_path):
    with pytest.raises(CompileError) as error:
        fetch("https://127.0.0.1:1/m.onnx", tmp_path, field="spec.source.uri", what="Model")
    assert error.value.exit_code == EXIT_FAILED and error.value.reason == "ModelFetchFailed"


def test_s3_connection_failure_is_retryable(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORKILN_S3_ENDPOINT", "http://127.0.0.1:1")
    with pytest.raises(CompileError) as error:
        fetch("s3://models/resnet.onnx", tmp_path, field="spec.source.uri", what="Model")
    assert error.value.exit_code == EXIT_FAILED and error.value.message.startswith(
        "spec.source.uri: s3://models/resnet.onnx"
    )
