"""The registry on a filesystem (a host path or a PVC shared by compile jobs and servers).

Every object is written to a temporary name in its own directory, fsynced and renamed, so a
reader (or a crash) never sees half a file.

A root that does not exist yet reads as an empty registry (the first publish creates it), except
for a registry that was `prepare`d (the operator's): its root was created then, so a root that
is later missing (a volume not mounted, a directory moved away) is RegistryUnavailable, not a
cache miss. Where the root cannot be created (the operator's read-only mount of a fresh claim,
which the first compile publishes into), what must stay is the directory nearest to it that
exists, the claim's mount: while that is there, a missing root is still an empty registry. A root
that is not a directory, or cannot be read, is always RegistryUnavailable.
"""

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from tensorkiln_api.registry.base import CHUNK_SIZE, NoSuchObject, Registry, RegistryUnavailable


class FilesystemRegistry(Registry):
    def __init__(self, root: Path):
        super().__init__(root.as_uri())
        self.root = root
        # Set by prepare: the directory that must exist for a missing root to mean "empty".
        self.anchor: Path | None = None

    @property
    def prepared(self) -> bool:
        return self.anchor is not None

    def prepare(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass  # a read-only mount: the root's nearest existing directory stands for it
        self.anchor = next((p for p in (self.root, *self.root.parents) if p.is_dir()), self.root)

    def _write(self, key: str, stream: BinaryIO, size: int) -> None:
        target = self.root / key
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(stream, out, CHUNK_SIZE)
                out.flush()
                os.fchmod(out.fileno(), 0o644)  # mkstemp's 0600 would hide it from servers run as another user
                os.fsync(out.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_dir(target.parent)  # make the rename itself durable

    def _chunks(self, key: str) -> Iterator[bytes]:
        try:
            stream = open(self.root / key, "rb")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            self._check_root()
            raise NoSuchObject(key) from None
        except OSError as error:  # permission denied, I/O error, stale NFS handle, ...
            raise RegistryUnavailable(f"{self.uri}: cannot read {key}: {error}") from error
        with stream:
            while chunk := stream.read(CHUNK_SIZE):
                yield chunk

    def _check_root(self) -> None:
        """An object is missing: fine in a registry whose root is there (or not created yet)."""
        if self.root.is_dir():
            return
        if self.root.exists() or self.root.is_symlink():
            raise RegistryUnavailable(f"{self.uri}: the registry root is not a directory")
        if self.anchor is not None and (self.anchor == self.root or not self.anchor.is_dir()):
            raise RegistryUnavailable(f"{self.uri}: the registry root is missing (not mounted, or moved away?)")


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
