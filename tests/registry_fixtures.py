"""Engines for registry tests, and the behaviour every registry backend must show.

A backend's test module subclasses `RegistryContract` and provides two fixtures: `registry`
(an empty registry) and `put_raw(key, data)`, which overwrites a stored object behind the
registry's back, as a broken disk or a careless operator would.
"""

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tensorkiln_api.registry import ArtifactIntegrityError, EngineNotFound, RegistryError
from tensorkiln_api.registry.base import artifact_key, index_key, manifest_key
from tensorkiln_api.registry.manifest import (
    Artifact,
    CacheKey,
    Candidate,
    EngineManifest,
    Selection,
    TensorInfo,
)

PLAN = "resnet/1/model.plan"
ENGINE_FILES = {
    "resnet/config.pbtxt": b'name: "resnet"\nplatform: "tensorrt_plan"\nmax_batch_size: 16\n',
    PLAN: bytes(range(256)) * 64,
}


@dataclass
class Engine:
    manifest: EngineManifest
    files_dir: Path
    files: dict[str, bytes]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_engine(workdir: Path, files: dict[str, bytes] = ENGINE_FILES, hardware_class: str = "nvidia-h100") -> Engine:
    """Write `files` under workdir/<hardware_class> and return a manifest that lists them."""
    files_dir = workdir / hardware_class
    for path, data in files.items():
        (files_dir / path).parent.mkdir(parents=True, exist_ok=True)
        (files_dir / path).write_bytes(data)
    winner = Candidate(id="tensorrt-fp16", compiler="TensorRT", precision="FP16", status="Selected")
    manifest = EngineManifest(
        origin="test-seed",
        key=CacheKey(
            model_digest=sha256(b"resnet.onnx"),
            options_hash="0123abcd",
            hardware_class=hardware_class,
            compiler_version="0.1.0",
        ),
        model_name="resnet",
        source_uri="https://models.example/resnet.onnx",
        hardware_kind="GPU",
        fingerprint={"gpuProduct": "NVIDIA-H100-80GB-HBM3", "computeCapability": "9.0"},
        compiler="TensorRT",
        runtime_versions={"tensorrt": "10.9.0", "cuda": "12.8"},
        precision="FP16",
        inputs=[TensorInfo(name="input", data_type="FP32", dims=[-1, 3, 224, 224])],
        outputs=[TensorInfo(name="logits", data_type="FP32", dims=[-1, 1000])],
        profiles={"batch": {"min": 1, "opt": 8, "max": 16}},
        candidates=[winner],
        selection=Selection(objective={"metric": "latency"}, winner=winner.id, reason="only candidate"),
        artifacts=[Artifact(path=path, sha256=sha256(data), size=len(data)) for path, data in files.items()],
        created_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
    )
    return Engine(manifest, files_dir, dict(files))


def read_tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def record_writes(monkeypatch, registry, after_each) -> None:
    """Call after_each(key) after each object the registry stores."""
    write = registry._write

    def recorded(key, stream, size):
        write(key, stream, size)
        after_each(key)

    monkeypatch.setattr(registry, "_write", recorded)


def flip_byte(data: bytes) -> bytes:
    return data[:100] + bytes([data[100] ^ 0xFF]) + data[101:]


def truncate(data: bytes) -> bytes:
    return data[: len(data) // 2]


class RegistryContract:
    @pytest.fixture
    def engine(self, tmp_path) -> Engine:
        return make_engine(tmp_path)

    @pytest.fixture
    def writes(self, registry, monkeypatch) -> list[str]:
        keys = []
        record_writes(monkeypatch, registry, keys.append)
        return keys

    def test_publish_lookup_fetch_round_trip(self, registry, engine, tmp_path):
        digest = registry.publish(engine.manifest, engine.files_dir)

        assert digest == engine.manifest.digest()
        assert registry.lookup(engine.manifest.key) == (digest, engine.manifest)
        assert registry.manifest(digest) == engine.manifest
        assert registry.engine_uri(digest) == f"{registry.uri}/engines/{digest}"
        assert registry.fetch(digest, tmp_path / "fetched") == engine.manifest
        assert read_tree(tmp_path / "fetched") == engine.files

    def test_lookup_of_an_unknown_key_is_a_miss(self, registry, engine, tmp_path):
        registry.publish(engine.manifest, engine.files_dir)
        assert registry.lookup(make_engine(tmp_path, hardware_class="nvidia-l4").manifest.key) is None
        with pytest.raises(EngineNotFound):
            registry.manifest("0" * 64)

    def test_publish_twice_is_fine(self, registry, engine, writes):
        first = registry.publish(engine.manifest, engine.files_dir)
        assert registry.publish(engine.manifest, engine.files_dir) == first
        assert registry.lookup(engine.manifest.key) == (first, engine.manifest)
        assert writes.count(manifest_key(first)) == 1  # the engine was complete: only the index again

    @pytest.mark.parametrize("damage", ["missing", "other-content", "other-size"])
    def test_publish_refuses_files_unlike_the_manifest_and_writes_nothing(self, registry, engine, writes, damage):
        plan = engine.files_dir / PLAN
        if damage == "missing":
            plan.unlink()
        else:
            plan.write_bytes((flip_byte if damage == "other-content" else truncate)(engine.files[PLAN]))

        with pytest.raises(ArtifactIntegrityError, match=PLAN):
            registry.publish(engine.manifest, engine.files_dir)
        assert writes == []

    @pytest.mark.parametrize("path", ["../outside", "/etc/passwd", "resnet/../../outside", "resnet//x", ""])
    def test_publish_refuses_unsafe_artifact_paths(self, registry, engine, writes, path):
        unsafe = Artifact(path=path, sha256=sha256(b""), size=0)
        manifest = engine.manifest.model_copy(update={"artifacts": [*engine.manifest.artifacts, unsafe]})
        with pytest.raises(RegistryError, match="artifact path"):
            registry.publish(manifest, engine.files_dir)
        assert writes == []

    @pytest.mark.parametrize("damage", [flip_byte, truncate])
    def test_fetch_refuses_a_damaged_artifact_and_leaves_nothing(self, registry, put_raw, engine, tmp_path, damage):
        digest = registry.publish(engine.manifest, engine.files_dir)
        damaged = damage(engine.files[PLAN])
        put_raw(artifact_key(digest, PLAN), damaged)

        with pytest.raises(ArtifactIntegrityError) as refused:
            registry.fetch(digest, tmp_path / "fetched")
        for detail in (PLAN, sha256(engine.files[PLAN]), sha256(damaged)):
            assert detail in str(refused.value)
        assert not [p for p in tmp_path.iterdir() if "fetched" in p.name]

    @pytest.mark.parametrize("entry", [b'{"digest": "' + b"0" * 64 + b'"}', b"not json", b'{"digest": "../x"}', b"[]"])
    def test_an_unusable_index_entry_is_a_logged_miss(self, registry, put_raw, engine, caplog, entry):
        put_raw(index_key(engine.manifest.key), entry)
        assert registry.lookup(engine.manifest.key) is None
        assert "ignoring index entry" in caplog.text

    def test_a_manifest_that_does_not_hash_to_its_digest_is_refused(self, registry, put_raw, engine):
        digest = registry.publish(engine.manifest, engine.files_dir)
        forged = engine.manifest.model_copy(update={"precision": "INT8"})
        put_raw(manifest_key(digest), forged.model_dump_json(by_alias=True).encode())

        with pytest.raises(ArtifactIntegrityError, match=digest):
            registry.manifest(digest)
        assert registry.lookup(engine.manifest.key) is None

    def test_readers_never_see_a_manifest_without_its_files(self, registry, engine, tmp_path, monkeypatch):
        digest, keys = engine.manifest.digest(), []

        def read_after(key):
            keys.append(key)
            try:
                registry.manifest(digest)
            except EngineNotFound:
                return
            registry.fetch(digest, tmp_path / f"reader-{len(keys)}")  # raises if any file is missing

        record_writes(monkeypatch, registry, read_after)
        registry.publish(engine.manifest, engine.files_dir)
        artifacts = sorted(artifact_key(digest, path) for path in engine.files)
        assert sorted(keys[:-2]) == artifacts
        assert keys[-2:] == [manifest_key(digest), index_key(engine.manifest.key)]
