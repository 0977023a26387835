"""How a pod reaches a model source or the engine registry, by URI scheme (pure).

file:// paths are host paths (the local cluster's node is this machine); pvc://claim/path
mounts the claim; s3:// and https:// need no volume. Each function returns the volumes and
mounts to add and the URI as the container will see it.
"""

from dataclasses import dataclass, field
from pathlib import PurePosixPath
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Access:
    uri: str  # as seen inside the container
    volumes: list[dict] = field(default_factory=list)
    mounts: list[dict] = field(default_factory=list)


def _pvc(name: str, uri: str, mount_root: str, read_only: bool) -> Access:
    parts = urlsplit(uri)
    sub_path = parts.path.lstrip("/")
    claim = {"claimName": parts.netloc, "readOnly": read_only}
    mount = {"name": name, "mountPath": mount_root, "readOnly": read_only}
    return Access(
        f"file://{PurePosixPath(mount_root) / sub_path}", [{"name": name, "persistentVolumeClaim": claim}], [mount]
    )


def model_source(uri: str) -> Access:
    """The model file, read-only: for file:// its directory is mounted at the same path."""
    scheme = urlsplit(uri).scheme
    if scheme == "file":
        directory = str(PurePosixPath(urlsplit(uri).path).parent)
        return Access(
            uri,
            [{"name": "model-source", "hostPath": {"path": directory, "type": "Directory"}}],
            [{"name": "model-source", "mountPath": directory, "readOnly": True}],
        )
    if scheme == "pvc":
        return _pvc("model-source", uri, "/var/run/tensorkiln/model-source", read_only=True)
    return Access(uri)


def registry(uri: str) -> Access:
    """The engine registry, writable: compile jobs publish into it."""
    scheme = urlsplit(uri).scheme
    if scheme == "file":
        path = urlsplit(uri).path
        return Access(
            uri,
            [{"name": "registry", "hostPath": {"path": path, "type": "DirectoryOrCreate"}}],
            [{"name": "registry", "mountPath": path}],
        )
    if scheme == "pvc":
        return _pvc("registry", uri, "/var/lib/tensorkiln/registry", read_only=False)
    return Access(uri)
