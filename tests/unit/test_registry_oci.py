"""The OCI registry backend against a real registry: Debian's `docker-registry` (the CNCF distribution
registry 2.8) started as a plain process on a free loopback port, storage under tmp_path."""

import base64
import hashlib
import re
import shutil
import socket
import time
import uuid
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import requests
import yaml

oras_provider = pytest.importorskip("oras.provider", reason="the oci extra (oras) is not installed")

from local_server import LocalServer  # noqa: E402
from registry_fixtures import PLAN, flip_byte, make_engine, read_tree  # noqa: E402
from tensorkiln_api.registry import (  # noqa: E402
    ArtifactIntegrityError,
    EngineNotFound,
    RegistryError,
    RegistryUnavailable,
    oci,
    open_registry,
)
from tensorkiln_api.registry.manifest import CacheKey, SourceArtifact  # noqa: E402

DOCKER_REGISTRY = shutil.which("docker-registry") or "/usr/bin/docker-registry"
TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")


class DistributionRegistry(LocalServer):
    """`docker-registry serve` on `address`:<free port> (loopback unless a test needs pods to reach it: the real
    node's gateway, tensorkiln_local.cluster.network.node_gateway), optionally behind htpasswd auth."""

    def __init__(self, root: Path, htpasswd: Path | None = None, address: str = "127.0.0.1"):
        if not Path(DOCKER_REGISTRY).is_file():
            pytest.skip(f"{DOCKER_REGISTRY} is absent (Debian's docker-registry package: the distribution registry)")
        root.mkdir(parents=True, exist_ok=True)

        def command(port: int) -> list[str]:
            config = {
                "version": 0.1,
                "log": {"level": "warn", "accesslog": {"disabled": True}},
                "storage": {"filesystem": {"rootdirectory": str(root / "data")}, "delete": {"enabled": True}},
                "http": {"addr": f"{address}:{port}"},
            }
            if htpasswd is not None:
                config["auth"] = {"htpasswd": {"realm": "tensorkiln-test", "path": str(htpasswd)}}
            (root / "config.yml").write_text(yaml.safe_dump(config))
            return [DOCKER_REGISTRY, "serve", str(root / "config.yml")]

        super().__init__("docker-registry", command, root / "registry.log", address)
        self.host = f"{address}:{self.port}"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    registry = DistributionRegistry(tmp_path_factory.mktemp("oci"))
    yield registry
    registry.stop()


@pytest.fixture
def no_credentials(tmp_path, monkeypatch):
    """An empty docker config: the tests never read this machine's."""
    monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))


@pytest.fixture
def repository():
    return f"team/engines-{uuid.uuid4().hex[:8]}"  # one repository a test


@pytest.fixture
def registry(server, repository, no_credentials) -> oci.OciRegistry:
    return open_registry(f"oci://{server.host}/{repository}")


@pytest.fixture
def engine(tmp_path):
    return make_engine(tmp_path / "work")


def by_hand(server: DistributionRegistry) -> oras_provider.Registry:
    """A plain oras client, beside the backend: what someone with push rights could do."""
    return oras_provider.Registry(hostname=server.host, insecure=True)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_publish_then_lookup_hit_and_fetch(registry, engine, tmp_path):
    digest = registry.publish(engine.manifest, engine.files_dir)

    assert digest == engine.manifest.digest()
    assert registry.lookup(engine.manifest.key) == (digest, engine.manifest)
    assert registry.manifest(digest) == engine.manifest
    assert registry.engine_uri(digest) == f"{registry.uri}:engine-{digest}"
    assert registry.fetch(digest, tmp_path / "fetched") == engine.manifest
    assert read_tree(tmp_path / "fetched") == engine.files


def test_a_key_never_published_is_a_miss(registry, engine, tmp_path):
    assert registry.lookup(engine.manifest.key) is None  # the repository does not exist yet
    registry.publish(engine.manifest, engine.files_dir)
    assert registry.lookup(make_engine(tmp_path, hardware_class="nvidia-l4").manifest.key) is None
    with pytest.raises(EngineNotFound):
        registry.manifest("0" * 64)
    with pytest.raises(EngineNotFound):
        registry.fetch("0" * 64, tmp_path / "fetched")
    with pytest.raises(EngineNotFound):
        registry.manifest("../" + "0" * 61)
    assert not (tmp_path / "fetched").exists()


def test_the_artifact_has_both_tags_its_files_as_titled_layers_and_says_what_the_engine_is(
    registry, server, repository, engine
):
    digest = registry.publish(engine.manifest, engine.files_dir)
    key = engine.manifest.key
    client = by_hand(server)

    readable = f"nvidia-h100-{key.id()[:40]}"
    assert sorted(client.get_tags(f"{server.host}/{repository}")) == sorted([f"engine-{digest}", readable])
    artifact = client.get_manifest(f"{server.host}/{repository}:engine-{digest}")
    assert client.get_manifest(f"{server.host}/{repository}:{readable}") == artifact

    assert artifact["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert artifact["artifactType"] == "application/vnd.tensorkiln.engine.v1"
    assert artifact["config"]["mediaType"] == "application/vnd.oci.empty.v1+json"
    layers = [
        (layer["mediaType"], layer["annotations"]["org.opencontainers.image.title"], layer["digest"])
        for layer in artifact["layers"]
    ]
    assert layers == [
        *(
            ("application/vnd.tensorkiln.engine.file.v1", path, f"sha256:{sha256(data)}")
            for path, data in engine.files.items()
        ),
        ("application/vnd.tensorkiln.engine.manifest.v1+json", "manifest.json", f"sha256:{digest}"),
    ]
    assert artifact["annotations"] == {
        "org.opencontainers.image.created": "2026-01-02T03:04:05Z",
        "dev.tensorkiln.engine.digest": digest,
        "dev.tensorkiln.engine.compiler": "TensorRT",
        "dev.tensorkiln.engine.precision": "FP16",
        "dev.tensorkiln.engine.origin": "test-seed",
        "dev.tensorkiln.model.name": "resnet",
        "dev.tensorkiln.model.source": "https://models.example/resnet.onnx",
        "dev.tensorkiln.hardware.kind": "GPU",
        "dev.tensorkiln.key.id": key.id(),
        "dev.tensorkiln.key.model-digest": key.model_digest,
        "dev.tensorkiln.key.options-hash": "0123abcd",
        "dev.tensorkiln.key.hardware-class": "nvidia-h100",
        "dev.tensorkiln.key.compiler-version": "0.1.0",
        "dev.tensorkiln.runtime.cuda": "12.8",
        "dev.tensorkiln.runtime.tensorrt": "10.9.0",
    }
    manifest_json = client.get_blob(f"{server.host}/{repository}", f"sha256:{digest}").content
    assert sha256(manifest_json) == digest


def test_fetch_refuses_a_file_swapped_under_the_engine_tag_and_leaves_nothing(
    registry, server, repository, engine, tmp_path
):
    digest = registry.publish(engine.manifest, engine.files_dir)
    client, target = by_hand(server), f"{server.host}/{repository}:engine-{digest}"
    damaged = flip_byte(engine.files[PLAN])
    (tmp_path / "damaged").write_bytes(damaged)
    artifact = client.get_manifest(target)
    plan = next(layer for layer in artifact["layers"] if layer["annotations"]["org.opencontainers.image.title"] == PLAN)
    plan.update(digest=f"sha256:{sha256(damaged)}", size=len(damaged))
    assert client.upload_blob(str(tmp_path / "damaged"), client.get_container(target), plan).status_code == 201
    assert client.upload_manifest(artifact, client.get_container(target)).status_code == 201

    with pytest.raises(ArtifactIntegrityError) as refused:
        registry.fetch(digest, tmp_path / "fetched")
    for detail in (PLAN, sha256(engine.files[PLAN]), sha256(damaged), registry.engine_uri(digest)):
        assert detail in str(refused.value)
    assert not [p for p in tmp_path.iterdir() if "fetched" in p.name]

    registry.publish(engine.manifest, engine.files_dir)  # the tag no longer holds this artifact: pushed again
    registry.fetch(digest, tmp_path / "fetched")
    assert read_tree(tmp_path / "fetched") == engine.files


def test_a_manifest_layer_that_does_not_hash_to_the_digest_is_refused_and_a_lookup_misses(
    registry, server, repository, engine, tmp_path, caplog
):
    digest = registry.publish(engine.manifest, engine.files_dir)
    client = by_hand(server)
    forged = engine.manifest.model_copy(update={"precision": "INT8"}).model_dump_json(by_alias=True).encode()
    (tmp_path / "forged.json").write_bytes(forged)
    layer = {"mediaType": oci.MANIFEST_MEDIA_TYPE, "digest": f"sha256:{sha256(forged)}", "size": len(forged)}
    client.upload_blob(str(tmp_path / "forged.json"), client.get_container(f"{server.host}/{repository}:x"), layer)
    for tag in (f"engine-{digest}", oci.cache_tag(engine.manifest.key)):
        artifact = client.get_manifest(f"{server.host}/{repository}:{tag}")
        artifact["layers"][-1].update(layer)
        client.upload_manifest(artifact, client.get_container(f"{server.host}/{repository}:{tag}"))

    with pytest.raises(ArtifactIntegrityError, match=digest):
        registry.manifest(digest)
    assert registry.lookup(engine.manifest.key) is None
    assert "ignoring index entry tag nvidia-h100-" in caplog.text


def test_a_cache_tag_that_names_another_keys_engine_is_a_miss(registry, server, repository, engine, tmp_path):
    digest = registry.publish(engine.manifest, engine.files_dir)
    other = make_engine(tmp_path, hardware_class="nvidia-l4").manifest.key
    client = by_hand(server)
    artifact = client.get_manifest(f"{server.host}/{repository}:engine-{digest}")
    client.upload_manifest(artifact, client.get_container(f"{server.host}/{repository}:{oci.cache_tag(other)}"))

    assert registry.lookup(other) is None
    assert registry.lookup(engine.manifest.key) == (digest, engine.manifest)


def test_publishing_the_same_engine_twice_pushes_no_blob_and_moves_no_tag(
    registry, server, repository, engine, monkeypatch
):
    digest = registry.publish(engine.manifest, engine.files_dir)
    tags = (f"engine-{digest}", oci.cache_tag(engine.manifest.key))
    stored = {tag: registry._get_manifest(tag) for tag in tags}
    uploads, pushes = [], []
    upload_blob, upload_manifest = registry.client.upload_blob, registry.client.upload_manifest
    monkeypatch.setattr(registry.client, "upload_blob", lambda *a, **k: uploads.append(a) or upload_blob(*a, **k))
    monkeypatch.setattr(registry.client, "upload_manifest", lambda m, c: pushes.append(c.tag) or upload_manifest(m, c))

    assert registry.publish(engine.manifest, engine.files_dir) == digest
    assert uploads == [] and pushes == [oci.cache_tag(engine.manifest.key)]
    assert {tag: registry._get_manifest(tag) for tag in tags} == stored
    assert sorted(by_hand(server).get_tags(f"{server.host}/{repository}")) == sorted(tags)
    assert registry.lookup(engine.manifest.key) == (digest, engine.manifest)


def test_publish_refuses_files_unlike_the_manifest_and_pushes_nothing(registry, server, repository, engine):
    (engine.files_dir / PLAN).write_bytes(flip_byte(engine.files[PLAN]))
    with pytest.raises(ArtifactIntegrityError, match=PLAN):
        registry.publish(engine.manifest, engine.files_dir)
    assert registry.lookup(engine.manifest.key) is None
    assert registry._get_manifest(f"engine-{engine.manifest.digest()}") is None


def test_large_files_go_up_in_chunks(registry, engine, tmp_path, monkeypatch):
    monkeypatch.setattr(oci, "CHUNKED_UPLOAD_ABOVE_BYTES", 1024)
    monkeypatch.setattr(oci, "UPLOAD_CHUNK_BYTES", 4096)  # the plan: 16 KiB, in four PATCHes
    chunked, chunked_upload = [], registry.client.chunked_upload
    monkeypatch.setattr(
        registry.client, "chunked_upload", lambda *a, **k: chunked.append(a[2]) or chunked_upload(*a, **k)
    )
    digest = registry.publish(engine.manifest, engine.files_dir)
    titles = [layer["annotations"]["org.opencontainers.image.title"] for layer in chunked]
    assert PLAN in titles and "resnet/config.pbtxt" not in titles  # above 1 KiB only
    registry.fetch(digest, tmp_path / "fetched")
    assert read_tree(tmp_path / "fetched") == engine.files


def test_an_unreachable_registry_is_unavailable_quickly_never_a_miss(engine, tmp_path, no_credentials):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    registry = open_registry(f"oci://127.0.0.1:{port}/team/engines")
    started = time.monotonic()
    for call in (
        lambda: registry.lookup(engine.manifest.key),
        lambda: registry.manifest(engine.manifest.digest()),
        lambda: registry.fetch(engine.manifest.digest(), tmp_path / "fetched"),
        lambda: registry.publish(engine.manifest, engine.files_dir),
    ):
        with pytest.raises(RegistryUnavailable, match=f"oci://127.0.0.1:{port}/team/engines"):
            call()
    assert time.monotonic() - started < 20  # not oras' two minutes of retries per request
    assert not (tmp_path / "fetched").exists()


def bcrypt_hash(password: str) -> str | None:
    """A bcrypt hash for htpasswd: Python's bcrypt if installed, else the C library's crypt (libxcrypt
    does bcrypt) through the standard library's `crypt` (deprecated, still in Python 3.11)."""
    try:
        import bcrypt

        return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    except ImportError:
        pass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            import crypt
        except ImportError:
            return None
    if crypt.METHOD_BLOWFISH not in crypt.methods:
        return None
    return crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))


def docker_config(directory: Path, host: str, user: str, password: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    (directory / "config.json").write_text(f'{{"auths": {{"https://{host}/v1/": {{"auth": "{auth}"}}}}}}')
    return directory / "config.json"


def test_credentials_come_from_a_docker_config_and_a_wrong_password_names_the_registry_not_the_secret(
    tmp_path, engine, monkeypatch, caplog
):
    user, password, wrong = "compiler", "s3cret-Passw0rd", "not-the-Passw0rd"
    hashed = bcrypt_hash(password)
    if hashed is None:
        pytest.skip("no bcrypt for an htpasswd file: neither Python's bcrypt nor a crypt(3) with bcrypt")
    (tmp_path / "htpasswd").write_text(f"{user}:{hashed}\n")
    server = DistributionRegistry(tmp_path / "auth-registry", htpasswd=tmp_path / "htpasswd")
    try:
        uri = f"oci://{server.host}/team/engines"
        monkeypatch.delenv("REGISTRY_AUTH_FILE", raising=False)
        monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
        docker_config(tmp_path / "docker", server.host, user, password)
        registry = open_registry(uri)
        digest = registry.publish(engine.manifest, engine.files_dir)
        assert registry.lookup(engine.manifest.key) == (digest, engine.manifest)
        registry.fetch(digest, tmp_path / "fetched")
        assert read_tree(tmp_path / "fetched") == engine.files

        monkeypatch.setenv("REGISTRY_AUTH_FILE", str(docker_config(tmp_path / "wrong", server.host, user, wrong)))
        refused = []
        for call in (
            lambda registry: registry.lookup(engine.manifest.key),  # no miss: the registry refused
            lambda registry: registry.publish(engine.manifest, engine.files_dir),
        ):
            with pytest.raises(RegistryError) as error:
                call(open_registry(uri))
            assert not isinstance(error.value, RegistryUnavailable)
            refused.append(str(error.value))
        monkeypatch.setenv("REGISTRY_AUTH_FILE", str(tmp_path / "absent.json"))
        with pytest.raises(RegistryError) as error:
            open_registry(uri).lookup(engine.manifest.key)
        refused.append(str(error.value))
    finally:
        server.stop()

    for message in refused:
        assert uri in message and "credentials" in message
    assert "401" in refused[0] and str(tmp_path / "wrong" / "config.json") in refused[0]
    secrets = [password, wrong, *(base64.b64encode(f"{user}:{p}".encode()).decode() for p in (password, wrong))]
    for text in (*refused, caplog.text, repr(registry)):
        assert not any(secret in text for secret in secrets)


def test_open_registry_takes_host_port_and_repository_path(no_credentials):
    registry = open_registry("oci://127.0.0.1:5000/team-a/prod/engines")
    assert isinstance(registry, oci.OciRegistry)
    assert (registry.host, registry.repository, registry.uri) == (
        "127.0.0.1:5000",
        "team-a/prod/engines",
        "oci://127.0.0.1:5000/team-a/prod/engines",
    )
    assert registry.client.prefix == "http"  # loopback: plain HTTP
    assert registry._container("x").manifest_url() == "127.0.0.1:5000/v2/team-a/prod/engines/manifests/x"


@pytest.mark.parametrize(
    "uri, insecure, scheme",
    [
        ("oci://registry.example.com/engines", "", "https"),
        ("oci://registry.example.com:8443/engines", "false", "https"),
        ("oci://registry.internal:5000/engines", "true", "http"),
        ("oci://localhost:5000/engines", "", "http"),
        ("oci://[::1]:5000/engines", "", "http"),
    ],
)
def test_plain_http_only_when_asked_or_on_loopback(uri, insecure, scheme, monkeypatch, no_credentials):
    monkeypatch.setenv("TENSORKILN_OCI_INSECURE", insecure)
    assert open_registry(uri).client.prefix == scheme


@pytest.mark.parametrize(
    "uri",
    [
        "oci://registry.example.com",
        "oci://registry.example.com/",
        "oci://registry.example.com/Engines",
        "oci://h/a:tag",
    ],
)
def test_open_registry_refuses_an_oci_uri_without_a_repository_name(uri, no_credentials):
    with pytest.raises(RegistryError, match="repository"):
        open_registry(uri)


def test_open_registry_refuses_credentials_in_the_uri_without_echoing_them(no_credentials):
    with pytest.raises(RegistryError, match="docker config") as refused:
        open_registry("oci://robot:hunter2@registry.example.com/engines")
    assert "hunter2" not in str(refused.value)


@pytest.mark.parametrize(
    "hardware_class, prefix",
    [
        ("nvidia-h100", "nvidia-h100-"),
        ("NVIDIA A100/80GB (SXM4)", "NVIDIA-A100-80GB-SXM4--"),
        (".-cpu", "cpu-"),
        ("///", "key-"),
        ("x" * 200, "x" * 87 + "-"),
    ],
)
def test_the_cache_tag_is_a_valid_tag_unique_per_key(hardware_class, prefix):
    key = CacheKey(
        model_digest="a" * 64, options_hash="0123abcd", hardware_class=hardware_class, compiler_version="0.1.0"
    )
    tag = oci.cache_tag(key)
    assert TAG.fullmatch(tag) and len(tag) <= 128
    assert tag == prefix + key.id()[:40]
    assert oci.cache_tag(key.model_copy(update={"options_hash": "0123abce"})) != tag


def test_a_token_scoped_for_pulls_is_renewed_when_a_push_is_challenged():
    """oras resends the token it holds to any Bearer challenge: a push after a pull, challenged for
    `pull,push`, would be refused for good. The backend's auth asks the token service again."""
    issued = []

    class TokenService:
        def get(self, realm, headers, params, verify):
            issued.append(params["scope"])
            return SimpleNamespace(status_code=200, json=lambda: {"token": f"token-{len(issued)}"})

    def challenge(scope: str, sent: str | None = None) -> requests.Response:
        response = requests.Response()
        response.status_code = 401
        response.headers["Www-Authenticate"] = f'Bearer realm="https://auth.example/token",service="r",scope="{scope}"'
        response.request = requests.Request("GET", "https://registry.example/v2/").prepare()
        if sent:
            response.request.headers["Authorization"] = sent
        return response

    auth = oci._Auth()
    auth.session, auth.prefix, auth._tls_verify = TokenService(), "https", True
    auth.set_basic_auth("robot", "secret")
    headers, retry = auth.authenticate_request(challenge("repository:engines:pull"), {})
    assert retry and headers["Authorization"] == "Bearer token-1"
    headers, retry = auth.authenticate_request(
        challenge("repository:engines:pull,push", sent="Bearer token-1"), headers
    )
    assert retry and headers["Authorization"] == "Bearer token-2"
    assert issued == ["repository:engines:pull", "repository:engines:pull,push"]


def test_the_listing_names_each_tag_with_its_artifacts_annotations(registry, engine):
    assert registry.listing() == {}  # the repository does not exist yet
    digest = registry.publish(engine.manifest, engine.files_dir)
    listing = registry.listing()
    assert sorted(listing) == sorted([oci.engine_tag(digest), oci.cache_tag(engine.manifest.key)])
    expected = oci.annotations(engine.manifest, digest)
    assert all(notes == expected for notes in listing.values())
    assert expected[oci.ENGINE_DIGEST] == digest


def test_the_source_annotation_leaves_out_a_presigned_urls_signature(tmp_path):
    manifest = make_engine(tmp_path).manifest
    signed = manifest.model_copy(
        update={"source_uri": "https://bucket.s3.amazonaws.com/m.onnx?X-Amz-Signature=planted-signature#x"}
    )
    notes = oci.annotations(signed, signed.digest())
    assert notes["dev.tensorkiln.model.source"] == "https://bucket.s3.amazonaws.com/m.onnx"


def test_an_engine_of_an_oci_source_names_it_as_subject_and_is_listed_in_the_fallback_index(
    registry, server, repository, engine, tmp_path
):
    """docker-registry 2.8 has no referrers API (no OCI-Subject header): the image spec's tag schema instead."""
    subject = {"mediaType": oci.OCI_MANIFEST_MEDIA_TYPE, "digest": "sha256:" + "5" * 64, "size": 512}
    linked = engine.manifest.model_copy(update={"source_artifact": SourceArtifact.model_validate(subject)})
    other = make_engine(tmp_path / "other", hardware_class="nvidia-l4").manifest
    other = other.model_copy(update={"source_artifact": SourceArtifact.model_validate(subject)})
    digests = [registry.publish(linked, engine.files_dir), registry.publish(other, tmp_path / "other" / "nvidia-l4")]
    registry.publish(linked, engine.files_dir)  # again: listed once

    client = by_hand(server)
    fallback = f"{server.host}/{repository}:sha256-{'5' * 64}"
    index = client.get_manifest(fallback, allowed_media_type=[oci.OCI_INDEX_MEDIA_TYPE])
    assert index["mediaType"] == oci.OCI_INDEX_MEDIA_TYPE
    listed = index["manifests"]
    assert [m["annotations"][oci.ENGINE_DIGEST] for m in listed] == digests
    for entry, digest in zip(listed, digests):
        stored = client.get_manifest(f"{server.host}/{repository}:{oci.engine_tag(digest)}")
        assert stored["subject"] == subject
        assert entry["artifactType"] == oci.ARTIFACT_TYPE and entry["mediaType"] == oci.OCI_MANIFEST_MEDIA_TYPE
        raw = requests.get(
            f"http://{server.host}/v2/{repository}/manifests/{entry['digest']}",
            headers={"Accept": oci.OCI_MANIFEST_MEDIA_TYPE},
            timeout=10,
        )
        assert raw.status_code == 200 and len(raw.content) == entry["size"]
    assert "subject" not in oci.artifact_manifest(engine.manifest)  # no oci:// source: no link
    assert registry.listing()[f"sha256-{'5' * 64}"] == {}  # the index is listed, with no annotations
