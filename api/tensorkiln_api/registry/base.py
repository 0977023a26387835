"""The registry interface: publish, look up and fetch engines, whatever the store behind it.

Every backend lays engines out the same way, relative to its root URI:

    engines/<digest>/manifest.json        canonical JSON; its SHA-256 is the digest
    engines/<digest>/files/<path>         one object per artifact
    index/<cache key id>.json             {"digest": ...}: the cache

The ordering and integrity rules live here once; a backend only stores and streams objects
(`_write`, `_chunks`). A backend that stores each engine as one unit instead of objects under
keys (OCI: one artifact per engine, found by tag) overrides where an engine's bytes come from
(`_engine`, an `EngineSource`), where the cache entry for a key is (`_index_entry`,
`_index_digest`, `_index_name`) and `publish`, and keeps the checks, the verification and the
all-or-nothing staging of `manifest`, `lookup` and `fetch` from here.
"""

import hashlib
import io
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, NamedTuple

from pydantic import ValidationError

from tensorkiln_api.registry.manifest import Artifact, CacheKey, EngineManifest, canonical_json

log = logging.getLogger(__name__)

CHUNK_SIZE = 1 << 20
_DIGEST = re.compile(r"[a-f0-9]{64}")


class RegistryError(Exception):
    """The registry cannot do what was asked (bad URI, bad manifest, store refused)."""


class RegistryUnavailable(RegistryError):
    """The store could not be reached: set a condition and retry later."""


class EngineNotFound(RegistryError):
    """No engine with that digest."""


class ArtifactIntegrityError(RegistryError):
    """A file does not match what its manifest says (missing, other size or SHA-256)."""


class NoSuchObject(Exception):
    """Raised by a backend's `_chunks` for a key the store does not hold."""


def manifest_key(digest: str) -> str:
    return f"engines/{digest}/manifest.json"


def artifact_key(digest: str, path: str) -> str:
    return f"engines/{digest}/files/{path}"


def index_key(key: CacheKey) -> str:
    return f"index/{key.id()}.json"


class CachedEngine(NamedTuple):
    """A cache hit: the engine's digest as stored, which is the sha256 of its manifest's bytes in
    the store, and the manifest. Never recompute the digest from the manifest: one written before
    a field was added to the manifest would come out with another digest, naming no engine."""

    digest: str
    manifest: EngineManifest


class EngineSource:
    """Where one engine's bytes come from: its manifest.json as stored and its files. This one reads
    the object layout above through the registry's `_chunks`; a backend that stores each engine
    as one unit returns its own from `Registry._engine`. Used for one read (one `manifest` or one
    `fetch`), so that the manifest and the files come from the same stored engine."""

    def __init__(self, registry: "Registry", digest: str):
        self.registry, self.digest = registry, digest

    def manifest_bytes(self) -> bytes | None:
        """The engine's manifest.json as stored, or None: no such engine."""
        return self.registry._read(manifest_key(self.digest))

    def chunks(self, path: str) -> Iterator[bytes]:
        """Stream the artifact at `path`; raise NoSuchObject (on the first `next`) when there is none."""
        return self.registry._chunks(artifact_key(self.digest, path))


class Registry:
    """An engine registry rooted at `uri`."""

    def __init__(self, uri: str):
        self.uri = uri

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r})"

    # An object store (filesystem, S3) implements these two; a backend that overrides `publish`,
    # `_engine` and `_index_entry` (OCI) needs neither.
    def _write(self, key: str, stream: BinaryIO, size: int) -> None:
        """Store an object so that readers see all of it or none of it."""
        raise NotImplementedError(f"{type(self).__name__} stores no objects by key")

    def _chunks(self, key: str) -> Iterator[bytes]:
        """Stream an object; raise NoSuchObject (on the first `next`) when there is none."""
        raise NotImplementedError(f"{type(self).__name__} stores no objects by key")

    def engine_uri(self, digest: str) -> str:
        return f"{self.uri}/engines/{digest}"

    def prepare(self) -> None:
        """Called once by a long-lived user (the operator) before its first use: create what the
        store needs to exist (a filesystem root). After it, a store that is gone is unavailable,
        not empty. Never raises: a store that cannot be prepared reports itself when used."""
        return None  # an object store (S3) needs nothing

    def publish(self, manifest: EngineManifest, files_dir: Path) -> str:
        """Store the engine's files, then its manifest, then its index entry; return the digest."""
        files_dir = Path(files_dir)
        _check_files(manifest, files_dir)  # all checked before anything is written
        digest = manifest.digest()
        if not self._holds_engine(digest):  # an existing manifest means every file is there
            for artifact in manifest.artifacts:
                with open(files_dir / artifact.path, "rb") as stream:
                    self._write(artifact_key(digest, artifact.path), stream, artifact.size)
            self._write_bytes(manifest_key(digest), canonical_json(manifest.to_json_dict()).encode())
        self._write_bytes(index_key(manifest.key), json.dumps({"digest": digest}).encode())
        return digest

    def lookup(self, key: CacheKey) -> CachedEngine | None:
        """The engine cached for `key`, or None; an unusable index entry is a logged miss."""
        entry = self._index_entry(key)
        if entry is None:
            return None
        try:
            digest = self._index_digest(entry)
            manifest = self.manifest(digest)
            if manifest.key != key:
                raise RegistryError(f"manifest is for another key ({manifest.key.id()})")
            return CachedEngine(digest, manifest)
        except RegistryUnavailable:
            raise  # an unreachable store is no cache miss
        except (ValueError, KeyError, TypeError, RegistryError) as error:
            log.warning("registry %s: ignoring index entry %s: %s", self.uri, self._index_name(key), error)
            return None

    def _index_entry(self, key: CacheKey) -> bytes | None:
        """The cache entry for `key` as stored, or None: none. A store that refuses or cannot be
        reached raises (RegistryError, RegistryUnavailable): that is no miss."""
        return self._read(index_key(key))

    def _index_digest(self, entry: bytes) -> str:
        """The digest an index entry names; ValueError, KeyError, TypeError or RegistryError when
        the entry is unusable (a logged miss)."""
        return json.loads(entry)["digest"]

    def _index_name(self, key: CacheKey) -> str:
        """The index entry for `key`, as logs name it."""
        return index_key(key)

    def _engine(self, digest: str) -> EngineSource:
        """Where the bytes of the engine `digest` (a well-formed digest) come from."""
        return EngineSource(self, digest)

    def manifest(self, digest: str) -> EngineManifest:
        return self._manifest(self._engine(_engine_digest(digest)))

    def _manifest(self, engine: EngineSource) -> EngineManifest:
        """The engine's manifest, checked against its digest."""
        digest = engine.digest
        raw = engine.manifest_bytes()
        if raw is None:
            raise EngineNotFound(f"no engine {digest} in {self.uri}")
        actual = hashlib.sha256(raw).hexdigest()
        if actual != digest:
            raise ArtifactIntegrityError(
                f"{self.engine_uri(digest)}/manifest.json: expected sha256 {digest}, got {actual}"
            )
        try:
            return EngineManifest.model_validate_json(raw)
        except ValidationError as error:
            raise RegistryError(
                f"{self.engine_uri(digest)}/manifest.json: not a manifest this version reads: {error}"
            ) from error

    def fetch(self, digest: str, dest: Path) -> EngineManifest:
        """Download and verify every artifact into `dest` (absent or empty), all or nothing."""
        engine = self._engine(_engine_digest(digest))
        manifest = self._manifest(engine)
        _check_paths(manifest.artifacts)  # the manifest came from the store: never write outside dest
        dest = Path(dest)
        if dest.exists() and any(dest.iterdir()):
            raise FileExistsError(f"{dest} is not empty")
        dest.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".partial", dir=dest.parent))
        staging.chmod(0o755)  # mkdtemp's 0700 would hide the engine from a server running as another user
        try:
            for artifact in manifest.artifacts:
                target = staging / artifact.path
                target.parent.mkdir(parents=True, exist_ok=True)
                self._download(engine, artifact, target)
            os.replace(staging, dest)  # replaces an empty directory too
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return manifest

    def _download(self, engine: EngineSource, artifact: Artifact, target: Path) -> None:
        where = f"{self.engine_uri(engine.digest)}/files/{artifact.path}"
        try:
            with open(target, "wb") as out:
                for chunk in engine.chunks(artifact.path):
                    out.write(chunk)
        except NoSuchObject:
            raise _missing(artifact, where) from None
        _verify(artifact, target, where)

    def _holds_engine(self, digest: str) -> bool:
        raw = self._read(manifest_key(digest))
        return raw is not None and hashlib.sha256(raw).hexdigest() == digest

    def _read(self, key: str) -> bytes | None:
        try:
            return b"".join(self._chunks(key))
        except NoSuchObject:
            return None

    def _write_bytes(self, key: str, data: bytes) -> None:
        self._write(key, io.BytesIO(data), len(data))


def _engine_digest(digest: str) -> str:
    """`digest` if it is an engine digest; EngineNotFound if not (nothing is read for it)."""
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise EngineNotFound(f"{digest!r} is not an engine digest")
    return digest


def _check_files(manifest: EngineManifest, files_dir: Path) -> None:
    """Before a publish writes anything: safe, distinct artifact paths, and every file in
    `files_dir` as the manifest lists it (ArtifactIntegrityError naming the first that is not)."""
    _check_paths(manifest.artifacts)
    for artifact in manifest.artifacts:
        _verify(artifact, files_dir / artifact.path, f"{files_dir}/{artifact.path}")


def _check_paths(artifacts: list[Artifact]) -> None:
    paths = [artifact.path for artifact in artifacts]
    for path in paths:
        if "\\" in path or any(part in ("", ".", "..") for part in path.split("/")):
            raise RegistryError(f"artifact path {path!r} must be relative, '/'-separated, without '.' or '..'")
    if len(set(paths)) != len(paths):
        raise RegistryError(f"artifact paths repeat: {sorted(paths)}")


def _verify(artifact: Artifact, file: Path, where: str) -> None:
    """Raise ArtifactIntegrityError unless `file` has the artifact's size and SHA-256."""
    try:
        digest, size = hashlib.sha256(), 0
        with open(file, "rb") as stream:
            while chunk := stream.read(CHUNK_SIZE):
                digest.update(chunk)
                size += len(chunk)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise _missing(artifact, where) from None
    if (digest.hexdigest(), size) != (artifact.sha256, artifact.size):
        raise ArtifactIntegrityError(
            f"{where}: expected sha256 {artifact.sha256} ({artifact.size} bytes), "
            f"got sha256 {digest.hexdigest()} ({size} bytes)"
        )


def _missing(artifact: Artifact, where: str) -> ArtifactIntegrityError:
    return ArtifactIntegrityError(f"{where}: missing (expected sha256 {artifact.sha256})")
