"""The filesystem registry, plus open_registry's URI handling (no server needed)."""

import hashlib
import json

import pytest
from registry_fixtures import RegistryContract, make_engine, read_tree
from tensorkiln_api.registry import RegistryError, open_registry
from tensorkiln_api.registry.filesystem import FilesystemRegistry
from tensorkiln_api.registry.manifest import Benchmark, canonical_json
from tensorkiln_api.registry.s3 import S3Registry


@pytest.fixture
def registry(tmp_path):
    return open_registry(f"file://{tmp_path}/registry")


@pytest.fixture
def put_raw(registry):
    def put(key: str, data: bytes) -> None:
        (registry.root / key).parent.mkdir(parents=True, exist_ok=True)
        (registry.root / key).write_bytes(data)

    return put


class TestFilesystemRegistry(RegistryContract):
    def test_layout_on_disk_has_no_temporary_files(self, registry, engine):
        digest = registry.publish(engine.manifest, engine.files_dir)

        stored = read_tree(registry.root)
        assert set(stored) == {
            f"engines/{digest}/manifest.json",
            *(f"engines/{digest}/files/{path}" for path in engine.files),
            f"index/{engine.manifest.key.id()}.json",
        }
        assert hashlib.sha256(stored[f"engines/{digest}/manifest.json"]).hexdigest() == digest
        assert registry.engine_uri(digest) == f"file://{registry.root}/engines/{digest}"

    def test_fetch_fills_an_empty_directory_but_not_a_full_one(self, registry, engine, tmp_path):
        digest = registry.publish(engine.manifest, engine.files_dir)
        (tmp_path / "empty").mkdir()
        registry.fetch(digest, tmp_path / "empty")
        assert read_tree(tmp_path / "empty") == engine.files

        with pytest.raises(FileExistsError):
            registry.fetch(digest, tmp_path / "empty")

    def test_lookup_in_a_registry_that_does_not_exist_yet_is_a_miss(self, tmp_path):
        registry = FilesystemRegistry(tmp_path / "not-yet")
        assert registry.lookup(make_engine(tmp_path).manifest.key) is None


@pytest.mark.parametrize("uri", ["gs://bucket/engines", "file://relative/path", "s3:///no-bucket", "/plain/path"])
def test_open_registry_names_a_uri_it_cannot_open(uri):
    with pytest.raises(RegistryError, match=uri):
        open_registry(uri)


def test_open_registry_s3_takes_endpoint_and_credentials_from_the_environment(monkeypatch):
    monkeypatch.setenv("TENSORKILN_S3_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "never-printed")
    registry = open_registry("s3://engines/team-a/prod")

    assert isinstance(registry, S3Registry)
    assert (registry.bucket, registry.prefix, registry.endpoint) == ("engines", "team-a/prod", "http://127.0.0.1:9")
    assert registry.engine_uri("ab" * 32) == f"s3://engines/team-a/prod/engines/{'ab' * 32}"
    assert "never-printed" not in repr(registry)


def test_open_registry_s3_refuses_an_endpoint_that_is_no_plain_url_without_echoing_it(monkeypatch):
    monkeypatch.setenv("TENSORKILN_S3_ENDPOINT", "http://user:secret@127.0.0.1:9")
    with pytest.raises(RegistryError, match="TENSORKILN_S3_ENDPOINT") as refused:
        open_registry("s3://engines")
    assert "secret" not in str(refused.value)


def test_a_manifest_written_before_a_field_was_added_is_reused_under_its_stored_digest(registry, put_raw, tmp_path):
    """Benchmarks gained `stable` after engines were published without it. Their manifests parse, and
    dumped again they carry `stable: null`, so a digest computed from them named no engine: the
    CompileJob said CacheHit and its model waited forever on an engine 'not in the registry'."""
    engine = make_engine(tmp_path)
    older = engine.manifest.to_json_dict()
    benchmark = Benchmark(
        batch_size=1, p50_ms=1, p95_ms=2, p99_ms=3, throughput_per_s=900, threads=2, warmup_runs=3, runs=20
    )
    older["candidates"][0]["benchmarks"] = [
        {k: v for k, v in benchmark.model_dump(by_alias=True).items() if k != "stable"}
    ]
    raw = canonical_json(older).encode()
    digest = hashlib.sha256(raw).hexdigest()
    put_raw(f"engines/{digest}/manifest.json", raw)
    put_raw(f"index/{engine.manifest.key.id()}.json", json.dumps({"digest": digest}).encode())
    hit = registry.lookup(engine.manifest.key)
    assert hit.digest == digest != hit.manifest.digest()
    assert registry.manifest(hit.digest) == hit.manifest
