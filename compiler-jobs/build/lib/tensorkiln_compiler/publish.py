"""Publish step: stage the winner's files and hand them with the manifest to the engine registry.

Registry interface (tensorkiln_api.registry): open_registry(uri) -> registry with
lookup(CacheKey) -> engine digest or manifest or None, publish(EngineManifest, files_dir) -> digest,
engine_uri(digest); errors RegistryError and RegistryUnavailable, reported by those names.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tensorkiln_api.registry.manifest import Artifact, CacheKey, EngineManifest

from .errors import CompileError
from .fetch import sha256_path

FIELD = "spec.registry.uri"
Opener = Callable[[str], Any]


def default_opener(uri: str) -> Any:
    try:
        from tensorkiln_api.registry import open_registry
    except ImportError as e:
        raise CompileError(
            "RegistryUnavailable", f"{FIELD}: this image has no tensorkiln_api.registry.open_registry"
        ) from e
    return open_registry(uri)


class Registry:
    """The registry behind spec.registry.uri, its errors turned into CompileErrors."""

    def __init__(self, opener: Opener, uri: str):
        self.uri = uri
        self._registry = self._call(opener, uri)

    def lookup(self, key: CacheKey) -> str | None:
        found = self._call(self._registry.lookup, key)
        return found if found is None or isinstance(found, str) else found.digest

    def publish(self, manifest: EngineManifest, files_dir: Path) -> tuple[str, str]:
        digest = self._call(self._registry.publish, manifest, files_dir)
        return digest, self.engine_uri(digest)

    def engine_uri(self, digest: str) -> str:
        return self._call(self._registry.engine_uri, digest)

    def _call(self, function: Callable, *args: Any) -> Any:
        try:
            return function(*args)
        except CompileError:
            raise
        except Exception as e:
            names = {cls.__name__ for cls in type(e).__mro__}
            reason = next((n for n in ("RegistryUnavailable", "RegistryError") if n in names), "RegistryError")
            raise CompileError(reason, f"{FIELD} {self.uri}: {e}") from e


def stage(files: dict[str, Path], files_dir: Path) -> list[Artifact]:
    """Copy the winner's files under their engine paths; only they are published."""
    shutil.rmtree(files_dir, ignore_errors=True)  # a rerun in the same work dir must not ship stale files
    artifacts = []
    for name, source in sorted(files.items()):
        target = files_dir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        artifacts.append(Artifact(path=name, sha256=sha256_path(target), size=target.stat().st_size))
    return artifacts
