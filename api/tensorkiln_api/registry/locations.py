"""Opening a registry by its URI: `file:///abs/path`, `pvc://claim/path`, `s3://bucket/prefix` or
`oci://host[:port]/repository`.
Kept apart from the interface (base.py) so that the backends, which import the interface, are
not imported by it."""

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

from tensorkiln_api.registry.base import Registry, RegistryError
from tensorkiln_api.registry.filesystem import FilesystemRegistry

# pvc://claim/path is read at PVC_ROOT/claim/path, where the operator's pod mounts the claim (the
# Helm chart does; compile and Triton pods get a file:// URI from builders.storage instead).
PVC_ROOT_ENV = "TENSORKILN_PVC_ROOT"
DEFAULT_PVC_ROOT = "/mnt/pvc"


def open_registry(uri: str) -> Registry:
    """`file:///abs/path`, `pvc://claim/path` (a mounted claim), `s3://bucket/prefix` (endpoint
    and credentials from the environment) or `oci://host[:port]/repository[/path]` (an OCI
    registry, one artifact per engine; credentials from a docker config file: oci.py)."""
    parts = urlsplit(uri)
    if parts.scheme == "file" and not parts.netloc and parts.path.startswith("/"):
        return FilesystemRegistry(Path(unquote(parts.path)))
    if parts.scheme == "pvc" and parts.netloc:
        root = Path(os.environ.get(PVC_ROOT_ENV, DEFAULT_PVC_ROOT)) / parts.netloc / unquote(parts.path).strip("/")
        registry = FilesystemRegistry(root)
        registry.uri = uri.rstrip("/")  # engine URIs in status name the claim, as the spec did
        return registry
    if parts.scheme == "s3" and parts.netloc:
        from tensorkiln_api.registry.s3 import S3Registry  # minio only when S3 is used

        return S3Registry.from_env(parts.netloc, parts.path.strip("/"))
    if parts.scheme == "oci" and parts.netloc:
        try:
            from tensorkiln_api.registry.oci import OciRegistry  # oras only when OCI is used
        except ImportError as error:
            raise RegistryError(f"oci:// registries need the oras package (tensorkiln-api[oci]): {error}") from error
        return OciRegistry.from_uri(uri)
    raise RegistryError(
        f"unsupported registry URI {uri!r}: expected file:///absolute/path, pvc://claim/path, s3://bucket/prefix "
        "or oci://host[:port]/repository"
    )
