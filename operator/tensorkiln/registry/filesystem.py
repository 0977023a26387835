"""The registry on a filesystem (a host path or a PVC shared by compile jobs and servers).

Every object is written to a temporary name in its own directory, fsynced and renamed, so a
reader (or a crash) never sees half a file.
"""

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from tensorkiln.registry.base import CHUNK_SIZE, NoSuchObject, Registry


class FilesystemRegistry(Registry):
    def __init__(self, root: Path):
        super().__init__(root.as_uri())
        self.root = root

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
            raise NoSuchObject(key) from None
        with stream:
            while chunk := stream.read(CHUNK_SIZE):
                yield chunk


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
