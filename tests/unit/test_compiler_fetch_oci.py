"""oci:// model sources against a real registry (Debian's docker-registry, as test_registry_oci runs it): a
ModelPack-style artifact pushed with oras and a modelcar image built here, fetched through fetch()."""

import gzip
import hashlib
import io
import json
import tarfile
import uuid

import pytest
import requests

oras_provider = pytest.importorskip("oras.provider", reason="the oci extra (oras) is not installed")

import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from tensorkiln_compiler.errors import EXIT_FAILED, EXIT_INVALID_INPUT, CompileError, InvalidInput  # noqa: E402
from tensorkiln_compiler.fetch import fetch  # noqa: E402

from .test_registry_oci import DistributionRegistry  # noqa: E402

FIELD = "spec.source.uri"
MODELPACK_CONFIG = "application/vnd.cncf.model.config.v1+json"
MODELPACK_WEIGHT_RAW = "application/vnd.cncf.model.weight.v1.raw"
MODELPACK_WEIGHT_TAR = "application/vnd.cncf.model.weight.v1.tar"
IMAGE_CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
LAYER_TAR_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"


def onnx_model(name: str = "identity") -> bytes:
    """A small real ONNX model: y = x."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tar_layer(files: dict[str, bytes], gzipped: bool = False) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(out.getvalue(), mtime=0) if gzipped else out.getvalue()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    registry = DistributionRegistry(tmp_path_factory.mktemp("oci-models"))
    yield registry
    registry.stop()


@pytest.fixture(autouse=True)
def no_credentials(tmp_path, monkeypatch):
    """An empty docker config: the tests never read this machine's."""
    monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))


@pytest.fixture
def repository():
    return f"models/resnet-{uuid.uuid4().hex[:8]}"


class Pusher:
    """Blobs and manifests pushed with a plain oras client, as a model's publisher would."""

    def __init__(self, server: DistributionRegistry, repository: str, tmp_path):
        self.host, self.repository, self.tmp = server.host, repository, tmp_path
        self.client = oras_provider.Registry(hostname=server.host, insecure=True)

    def container(self, tag: str):
        return self.client.get_container(f"{self.host}/{self.repository}:{tag}")

    def blob(self, data: bytes, media_type: str, title: str | None = None) -> dict:
        path = self.tmp / f"blob-{sha256(data)}"
        path.write_bytes(data)
        descriptor = {"mediaType": media_type, "digest": f"sha256:{sha256(data)}", "size": len(data)}
        response = self.client.upload_blob(str(path), self.container("latest"), descriptor)
        assert response.status_code in (200, 201, 202), response.text
        return {**descriptor, "annotations": {"org.opencontainers.image.title": title}} if title else descriptor

    def manifest(self, tag: str, config: dict, layers: list[dict], **extra) -> str:
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            **extra,
            "config": config,
            "layers": layers,
        }
        response = self.client.upload_manifest(manifest, self.container(tag))
        assert response.status_code == 201, response.text
        return response.headers["Docker-Content-Digest"]

    def modelpack(self, tag: str, files: dict[str, bytes]) -> str:
        """A ModelPack-style artifact pushed with `oras push`: one raw weight layer per file, titled by name."""
        paths = []
        for name, data in files.items():
            (self.tmp / name).write_bytes(data)
            paths.append(f"{self.tmp / name}:{MODELPACK_WEIGHT_RAW}")
        config = self.tmp / "config.json"
        config.write_text(json.dumps({"descriptor": {"name": "resnet"}, "config": {"format": "onnx"}}))
        response = self.client.push(
            target=f"{self.host}/{self.repository}:{tag}",
            files=paths,
            manifest_config=f"{config}:{MODELPACK_CONFIG}",
            manifest_annotations={"org.cncf.model.name": "resnet"},
            disable_path_validation=True,
            quiet=True,
        )
        assert response.status_code == 201, response.text
        return response.headers["Docker-Content-Digest"]

    def modelcar(self, tag: str, layers: list[tuple[bytes, str]]) -> str:
        """A modelcar image: an image config, then filesystem layers."""
        config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers"}}).encode()
        return self.manifest(tag, self.blob(config, IMAGE_CONFIG), [self.blob(d, t) for d, t in layers])


@pytest.fixture
def push(server, repository, tmp_path):
    return Pusher(server, repository, tmp_path / "push")


@pytest.fixture(autouse=True)
def _push_dir(tmp_path):
    (tmp_path / "push").mkdir()


def refused(uri: str, tmp_path) -> InvalidInput:
    with pytest.raises(InvalidInput) as error:
        fetch(uri, tmp_path / "dl", field=FIELD, what="Model")
    assert error.value.exit_code == EXIT_INVALID_INPUT and error.value.reason == "ModelUnreachable"
    assert error.value.message.startswith(f"{FIELD}: ")
    return error.value


def test_a_modelpack_artifact_by_tag_and_by_digest(server, repository, push, tmp_path):
    model = onnx_model()
    digest = push.modelpack("v1", {"resnet.onnx": model, "README.md": b"# resnet\n"})

    fetched = fetch(f"oci://{server.host}/{repository}:v1", tmp_path / "dl", field=FIELD, what="Model")
    assert fetched.path == tmp_path / "dl" / "resnet.onnx" and fetched.sha256 == sha256(model)
    assert onnx.load_from_string(fetched.path.read_bytes()).graph.name == "identity"

    pinned = fetch(f"oci://{server.host}/{repository}@{digest}", tmp_path / "pinned", field=FIELD, what="Model")
    assert pinned.sha256 == sha256(model)
    # What the engine links to (its subject): the manifest the reference named, by tag or by digest.
    assert pinned.artifact == fetched.artifact
    assert (
        pinned.artifact["digest"] == digest
        and pinned.artifact["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    )
    assert pinned.artifact["size"] > 0
    assert sorted(p.name for p in (tmp_path / "pinned").iterdir()) == ["resnet.onnx"]  # nothing left beside


def test_a_modelpack_tar_weight_layer_holds_the_model(server, repository, push, tmp_path):
    model = onnx_model("tarred")
    layer = push.blob(tar_layer({"weights/model.onnx": model}), MODELPACK_WEIGHT_TAR, title="model.onnx")
    config = push.blob(b"{}", MODELPACK_CONFIG)
    push.manifest("v1", config, [layer], artifactType="application/vnd.cncf.model.manifest.v1+json")
    fetched = fetch(f"oci://{server.host}/{repository}:v1", tmp_path / "dl", field=FIELD, what="Model")
    assert fetched.path.name == "model.onnx" and fetched.sha256 == sha256(model)
    assert [p.name for p in (tmp_path / "dl").iterdir()] == ["model.onnx"]


def test_a_file_pushed_with_oras_defaults_is_the_model_though_its_media_type_says_tar(
    server, repository, push, tmp_path
):
    """`oras push host/repo:v1 model.onnx` (the CLI and oras-py alike) types the file
    application/vnd.oci.image.layer.v1.tar: the blob is the file itself, not an archive."""
    model = onnx_model("plain")
    (push.tmp / "model.onnx").write_bytes(model)
    response = push.client.push(
        target=f"{server.host}/{repository}:v1", files=[str(push.tmp / "model.onnx")], disable_path_validation=True
    )
    assert response.status_code == 201, response.text
    manifest = push.client.get_manifest(f"{server.host}/{repository}:v1")
    assert [layer["mediaType"] for layer in manifest["layers"]] == ["application/vnd.oci.image.layer.v1.tar"]
    fetched = fetch(f"oci://{server.host}/{repository}:v1", tmp_path / "dl", field=FIELD, what="Model")
    assert fetched.path == tmp_path / "dl" / "model.onnx" and fetched.sha256 == sha256(model)
    assert [p.name for p in (tmp_path / "dl").iterdir()] == ["model.onnx"]


def test_a_modelcar_image_later_layers_win(server, repository, push, tmp_path):
    model = onnx_model("modelcar")
    base = tar_layer({"bin/sh": b"#!", "models/stale.onnx": onnx_model("stale"), "etc/m.onnx": b"elsewhere"}, True)
    top = tar_layer({"./models/.wh.stale.onnx": b"", "./models/resnet/1/model.onnx": model})
    amd = push.modelcar("v1", [(base, LAYER_TAR_GZIP), (top, LAYER_TAR)])
    fetched = fetch(f"oci://{server.host}/{repository}:v1", tmp_path / "dl", field=FIELD, what="Model")
    assert fetched.path == tmp_path / "dl" / "model.onnx" and fetched.sha256 == sha256(model)
    assert [p.name for p in (tmp_path / "dl").iterdir()] == ["model.onnx"]  # the layers are gone

    # A multi-platform index: read through its linux/amd64 image.
    arm = push.modelcar("arm", [(tar_layer({"models/other.onnx": b"another model"}), LAYER_TAR)])

    def entry(digest: str, architecture: str) -> dict:
        head = requests.head(f"http://{server.host}/v2/{repository}/manifests/{digest}", headers={"Accept": OCI})
        size = int(head.headers["Content-Length"])
        return {
            "mediaType": OCI,
            "digest": digest,
            "size": size,
            "platform": {"os": "linux", "architecture": architecture},
        }

    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [entry(arm, "arm64"), entry(amd, "amd64")]}
    put = requests.put(
        f"http://{server.host}/v2/{repository}/manifests/multi",
        data=json.dumps(index),
        headers={"Content-Type": OCI_INDEX},
    )
    assert put.status_code == 201, put.text
    fetched = fetch(f"oci://{server.host}/{repository}:multi", tmp_path / "multi", field=FIELD, what="Model")
    assert fetched.sha256 == sha256(model)


def test_a_missing_tag_or_repository_is_bad_input(server, repository, push, tmp_path):
    push.modelpack("v1", {"m.onnx": onnx_model()})
    error = refused(f"oci://{server.host}/{repository}:v2", tmp_path)
    assert f"oci://{server.host}/{repository}:v2: manifest v2: HTTP 404" in error.message
    refused(f"oci://{server.host}/nobody/nothing@sha256:{'0' * 64}", tmp_path)


def test_an_artifact_with_two_or_no_onnx_layers_is_refused_naming_the_titles(server, repository, push, tmp_path):
    push.modelpack("two", {"a.onnx": onnx_model("a"), "b.onnx": onnx_model("b")})
    error = refused(f"oci://{server.host}/{repository}:two", tmp_path)
    assert "several layers titled *.onnx (layer titles: a.onnx, b.onnx)" in error.message
    push.modelpack("none", {"model.safetensors": b"weights"})
    error = refused(f"oci://{server.host}/{repository}:none", tmp_path)
    assert "no layer titled *.onnx (layer titles: model.safetensors)" in error.message


def test_an_image_with_no_models_onnx_is_refused(server, repository, push, tmp_path):
    push.modelcar("plain", [(tar_layer({"bin/sh": b"#!", "opt/model.onnx": b"not under /models"}, True), LAYER_TAR)])
    error = refused(f"oci://{server.host}/{repository}:plain", tmp_path)
    assert "must hold one /models/**/*.onnx file; it holds 0 (none)" in error.message
    hidden = tar_layer({"models/.wh.m.onnx": b""})
    push.modelcar("hidden", [(tar_layer({"models/m.onnx": b"x"}), LAYER_TAR), (hidden, LAYER_TAR)])
    refused(f"oci://{server.host}/{repository}:hidden", tmp_path)
    two = tar_layer({"models/a.onnx": b"a", "models/b/b.onnx": b"b"})
    push.modelcar("two", [(two, LAYER_TAR)])
    assert (
        "it holds 2 (/models/a.onnx, /models/b/b.onnx)"
        in refused(f"oci://{server.host}/{repository}:two", tmp_path).message
    )


def test_the_calibration_dataset_is_the_npz(server, repository, push, tmp_path):
    push.modelpack("data", {"m.onnx": onnx_model(), "calibration.npz": b"PK npz"})
    fetched = fetch(
        f"oci://{server.host}/{repository}:data", tmp_path / "dl", field="datasetUri", what="CalibrationData"
    )
    assert fetched.path.name == "calibration.npz" and fetched.sha256 == sha256(b"PK npz")


def test_credentials_in_the_uri_are_refused_and_never_echoed(server, repository, tmp_path):
    error = refused(f"oci://user:s3cret@{server.host}/{repository}:v1", tmp_path)
    assert "s3cret" not in error.message and "carries no credentials" in error.message


def test_an_unreachable_registry_may_pass_on_a_retry(tmp_path):
    with pytest.raises(CompileError) as error:
        fetch("oci://127.0.0.1:1/models/m:v1", tmp_path / "dl", field=FIELD, what="Model")
    assert error.value.exit_code == EXIT_FAILED and error.value.reason == "ModelFetchFailed"
    assert error.value.message.startswith(f"{FIELD}: oci://127.0.0.1:1/models/m:v1: manifest v1: ")


def test_a_blob_that_does_not_match_its_digest_is_not_kept(server, repository, push, tmp_path):
    model = onnx_model()
    push.modelpack("v1", {"m.onnx": model})
    hexdigest = sha256(model)  # corrupted in the registry's own storage, same size
    stored = server.log.parent / f"data/docker/registry/v2/blobs/sha256/{hexdigest[:2]}/{hexdigest}/data"
    data = bytearray(stored.read_bytes())
    data[-1] ^= 0xFF
    stored.write_bytes(bytes(data))
    with pytest.raises(CompileError) as error:
        fetch(f"oci://{server.host}/{repository}:v1", tmp_path / "dl", field=FIELD, what="Model")
    assert error.value.exit_code == EXIT_FAILED and error.value.reason == "ModelFetchFailed"
    assert f"blob sha256:{hexdigest} does not match its digest" in error.value.message
    assert list((tmp_path / "dl").iterdir()) == []


def test_the_operator_mounts_nothing_for_an_oci_source_and_checks_no_path_of_it():
    from tensorkiln.builders.storage import Access, model_source
    from tensorkiln.review.checks import check_file_uris, referenced_claims

    uri = "oci://registry.example.com/models/resnet@sha256:" + "a" * 64
    assert model_source(uri) == Access(uri)  # handed to the compile pod as given, no volume
    spec = {"source": {"uri": uri}, "compile": {"calibration": {"datasetUri": uri.replace("resnet", "data")}}}
    assert check_file_uris(spec, ["/models"]) == [] and referenced_claims(spec, None) == []
