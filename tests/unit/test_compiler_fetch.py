import hashlib
import http.server
import importlib
import re
import threading
from pathlib import Path

import pytest
from tensorkiln_api.common import MODEL_URI_PATTERN
from tensorkiln_compiler import sources
from tensorkiln_compiler.errors import EXIT_FAILED, EXIT_INVALID_INPUT, CompileError, InvalidInput
from tensorkiln_compiler.fetch import fetch, sha256_path, verify_digest
from tensorkiln_compiler.sources.pvc import PVC_ROOT_ENV, local_path

# A URI the API admits for each scheme, and the sources module that fetches it.
EXAMPLES = {
    "file": ("file:///models/m.onnx", "file"),
    "pvc": ("pvc://models/m.onnx", "pvc"),
    "http": ("http://models.local/m.onnx", "http"),
    "https": ("https://models.local/m.onnx", "http"),
    "s3": ("s3://models/m.onnx", "s3"),
    "oci": ("oci://registry.local:5000/models/resnet@sha256:" + "0" * 64, "oci"),
    "gs": ("gs://models/m.onnx", "gs"),
    "hf": ("hf://owner/model@0123abc/onnx/m.onnx", "hf"),
}


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


def test_pvc_uri_is_read_in_place_under_the_mount_root(tmp_path, monkeypatch):
    monkeypatch.setenv(PVC_ROOT_ENV, str(tmp_path / "claims"))
    model = tmp_path / "claims" / "models" / "resnet" / "model.onnx"
    model.parent.mkdir(parents=True)
    model.write_bytes(b"on the claim")
    fetched = fetch("pvc://models/resnet/model.onnx", tmp_path / "dl", field="spec.source.uri", what="Model")
    assert fetched.path == model and not (tmp_path / "dl").exists()
    assert fetched.sha256 == hashlib.sha256(b"on the claim").hexdigest()
    with pytest.raises(InvalidInput) as error:
        fetch("pvc://models/nope.onnx", tmp_path / "dl", field="spec.source.uri", what="Model")
    assert error.value.reason == "ModelUnreachable" and "pvc://models/nope.onnx does not exist" in error.value.message


def test_download_and_http_errors(http_root, tmp_path):
    root, base = http_root
    (root / "m.onnx").write_bytes(b"served")
    fetched = fetch(f"{base}/m.onnx", tmp_path / "fetched", field="spec.source.uri", what="Model")
    assert fetched.path == tmp_path / "fetched" / "m.onnx" and fetched.path.read_bytes() == b"served"
    with pytest.raises(InvalidInput, match="answered 404") as error:
        fetch(f"{base}/missing.onnx", tmp_path / "fetched", field="spec.source.uri", what="Model")
    assert error.value.reason == "ModelUnreachable"


def test_connection_failure_is_retryable(tmp_path):
    with pytest.raises(CompileError) as error:
        fetch("https://127.0.0.1:1/m.onnx", tmp_path, field="spec.source.uri", what="Model")
    assert error.value.exit_code == EXIT_FAILED and error.value.reason == "ModelFetchFailed"
    assert "GET https://127.0.0.1:1/m.onnx failed" in error.value.message  # https goes to the http download


def test_s3_connection_failure_is_retryable(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORKILN_S3_ENDPOINT", "http://127.0.0.1:1")
    with pytest.raises(CompileError) as error:
        fetch("s3://models/resnet.onnx", tmp_path, field="spec.source.uri", what="Model")
    assert error.value.exit_code == EXIT_FAILED and error.value.message.startswith(
        "spec.source.uri: s3://models/resnet.onnx"
    )


def test_sources_serve_exactly_the_schemes_the_api_admits():
    admitted = set()
    for name, optional in re.findall(r"([a-z0-9]+)(\??)://", MODEL_URI_PATTERN):  # "https?" admits http and https
        admitted |= {name, name[:-1]} if optional else {name}
    assert set(sources.SCHEMES) == admitted == set(EXAMPLES)
    for uri, _ in EXAMPLES.values():
        assert re.match(MODEL_URI_PATTERN, uri), uri


@pytest.mark.parametrize("scheme", EXAMPLES)
def test_each_scheme_dispatches_to_its_module(scheme):
    uri, module = EXAMPLES[scheme]
    found = sources.module_for(uri, field="spec.source.uri", what="Model")
    assert found is importlib.import_module(f"tensorkiln_compiler.sources.{module}")
    assert callable(getattr(found, "pull", None) or found.fetch)


@pytest.mark.parametrize(
    "uri, scheme", [("az://models/m.onnx", "az"), ("ftp://models.local/m.onnx", "ftp"), ("/models/m.onnx", "")]
)
@pytest.mark.parametrize(
    "field, what", [("spec.source.uri", "Model"), ("spec.calibration.datasetUri", "CalibrationData")]
)
def test_unknown_scheme_is_refused_by_name(tmp_path, uri, scheme, field, what):
    """Before, any scheme but http(s), file and pvc went to the S3 download, and failed as retryable."""
    with pytest.raises(InvalidInput) as error:
        fetch(uri, tmp_path / "dl", field=field, what=what)
    assert error.value.reason == f"{what}UnsupportedScheme"
    assert error.value.exit_code == EXIT_INVALID_INPUT
    assert (
        error.value.message
        == f"{field}: scheme {scheme!r} is not supported here (file, pvc, http, https, s3, oci, gs, hf)"
    )
    assert not (tmp_path / "dl").exists()
