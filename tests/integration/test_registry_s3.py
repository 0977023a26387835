"""The S3 registry against a real S3 server: versitygw (posix backend), built from a pinned Go
module on first use (`localcluster/go/versitygw`), started on a free loopback port."""

import io
import os
import time
import uuid
from pathlib import Path

import pytest
from local_server import LocalServer
from minio import Minio
from registry_fixtures import RegistryContract, make_engine, read_tree
from tensorkiln_api.registry import RegistryUnavailable, open_registry
from tensorkiln_local.cluster import binaries

pytestmark = pytest.mark.s3

ACCESS_KEY, SECRET_KEY, BUCKET = "tensorkiln-test", "tensorkiln-test-secret", "engines"


class VersityGateway(LocalServer):
    """A versitygw process serving data_dir (each bucket is a directory) on `address` (pods reach
    this machine at the real node's address, network.node_gateway)."""

    def __init__(
        self, data_dir: Path, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY, address: str = "127.0.0.1"
    ):
        self.data_dir, self.access_key, self.secret_key = data_dir, access_key, secret_key
        self.data_dir.mkdir(parents=True, exist_ok=True)
        binary = str(binaries.ensure(("versitygw",)) / "versitygw")
        # Credentials through the environment: none on the command line, where ps would show them.
        env = {**os.environ, "ROOT_ACCESS_KEY_ID": access_key, "ROOT_SECRET_ACCESS_KEY": secret_key}
        super().__init__(
            "versitygw",
            lambda port: [binary, "--port", f"{address}:{port}", "--quiet", "posix", str(self.data_dir)],
            self.data_dir.parent / f"versitygw-{self.data_dir.name}.log",
            address,
            env,
        )
        self.endpoint = f"http://{address}:{self.port}"

    def client(self) -> Minio:
        return Minio(
            f"{self.address}:{self.port}", access_key=self.access_key, secret_key=self.secret_key, secure=False
        )


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    server = VersityGateway(tmp_path_factory.mktemp("s3") / "data")
    server.client().make_bucket(BUCKET)
    yield server
    server.stop()


def open_s3_registry(monkeypatch, server: VersityGateway, prefix: str):
    monkeypatch.setenv("TENSORKILN_S3_ENDPOINT", server.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    return open_registry(f"s3://{BUCKET}/{prefix}")


@pytest.fixture
def registry(s3_server, monkeypatch):
    return open_s3_registry(monkeypatch, s3_server, f"t-{uuid.uuid4().hex[:8]}")  # one prefix a test


@pytest.fixture
def put_raw(s3_server, registry):
    def put(key: str, data: bytes) -> None:
        s3_server.client().put_object(BUCKET, f"{registry.prefix}/{key}", io.BytesIO(data), len(data))

    return put


class TestS3Registry(RegistryContract):
    def test_a_multipart_artifact_round_trips(self, registry, tmp_path):
        big = {"model/1/model.plan": os.urandom(6 << 20)}  # above the client's 5 MiB part size
        engine = make_engine(tmp_path, files=big)
        digest = registry.publish(engine.manifest, engine.files_dir)

        registry.fetch(digest, tmp_path / "fetched")
        assert read_tree(tmp_path / "fetched") == big

    def test_objects_are_where_triton_and_other_readers_expect_them(self, s3_server, registry, engine):
        digest = registry.publish(engine.manifest, engine.files_dir)

        names = {o.object_name for o in s3_server.client().list_objects(BUCKET, f"{registry.prefix}/", recursive=True)}
        assert names == {
            f"{registry.prefix}/engines/{digest}/manifest.json",
            *(f"{registry.prefix}/engines/{digest}/files/{path}" for path in engine.files),
            f"{registry.prefix}/index/{engine.manifest.key.id()}.json",
        }
        assert registry.engine_uri(digest) == f"s3://{BUCKET}/{registry.prefix}/engines/{digest}"


def test_a_stopped_server_is_unavailable_not_a_miss(tmp_path, monkeypatch):
    server = VersityGateway(tmp_path / "data")
    server.client().make_bucket(BUCKET)
    registry = open_s3_registry(monkeypatch, server, "prefix")
    engine = make_engine(tmp_path)
    digest = registry.publish(engine.manifest, engine.files_dir)
    server.stop()

    started = time.monotonic()
    with pytest.raises(RegistryUnavailable, match=server.endpoint):
        registry.lookup(engine.manifest.key)
    assert time.monotonic() - started < 10  # the operator's reconcile must not hang on it
    with pytest.raises(RegistryUnavailable):
        registry.publish(engine.manifest, engine.files_dir)
    with pytest.raises(RegistryUnavailable):
        registry.fetch(digest, tmp_path / "fetched")
    assert not (tmp_path / "fetched").exists()
