"""How a pod reaches a model source or the engine registry, by URI scheme (pure).

file:// paths are host paths (the local cluster's node is this machine); pvc://claim/path
mounts the claim; s3://, https:// and oci:// need no volume. Each function returns the volumes,
mounts (and env) to add and the URI as the container will see it.

An oci:// registry's credentials are a docker config file (tensorkiln_api.registry.oci reads
$DOCKER_CONFIG/config.json): `registry_credentials` mounts a kubernetes.io/dockerconfigjson Secret
read-only as that file. Compile pods get the push Secret, Triton pods' engine-fetch the pull one.
"""

from dataclasses import dataclass, field
from pathlib import PurePosixPath
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Access:
    uri: str  # as seen inside the container
    volumes: list[dict] = field(default_factory=list)
    mounts: list[dict] = field(default_factory=list)
    env: list[dict] = field(default_factory=list)


# Where a docker-config Secret is mounted, and the variable that points the registry client at it.
REGISTRY_AUTH_VOLUME = "registry-auth"
REGISTRY_AUTH_DIR = "/var/run/tensorkiln/registry-auth"
DOCKER_CONFIG_ENV = "DOCKER_CONFIG"
DOCKER_CONFIG_KEY = ".dockerconfigjson"  # the key of a kubernetes.io/dockerconfigjson Secret
# Plain HTTP to a registry that is not on loopback (tensorkiln_api.registry.oci.INSECURE_ENV).
OCI_INSECURE_ENV = "TENSORKILN_OCI_INSECURE"


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


def is_oci(uri: str | None) -> bool:
    return bool(uri) and urlsplit(uri).scheme == "oci"


def registry_credentials(uri: str, secret: str | None, *, insecure: bool = False) -> Access:
    """What a pod reading or writing an oci:// registry needs besides the URI: the docker-config Secret
    `secret` (its .dockerconfigjson as config.json, read-only, DOCKER_CONFIG pointing at it) and, when
    `insecure`, TENSORKILN_OCI_INSECURE. Nothing for any other scheme, nor without a Secret."""
    if not is_oci(uri):
        return Access(uri)
    env = [{"name": OCI_INSECURE_ENV, "value": "true"}] if insecure else []
    if not secret:
        return Access(uri, env=env)
    volume = {
        "name": REGISTRY_AUTH_VOLUME,
        "secret": {"secretName": secret, "items": [{"key": DOCKER_CONFIG_KEY, "path": "config.json"}]},
    }
    mount = {"name": REGISTRY_AUTH_VOLUME, "mountPath": REGISTRY_AUTH_DIR, "readOnly": True}
    return Access(uri, [volume], [mount], [{"name": DOCKER_CONFIG_ENV, "value": REGISTRY_AUTH_DIR}, *env])


# Where spec.source.credentials' Secret is mounted, and the variable that tells the compiler
# (tensorkiln_compiler.sources.credentials.ENV).
SOURCE_CREDENTIALS_VOLUME = "source-credentials"
SOURCE_CREDENTIALS_DIR = "/var/run/tensorkiln/source-credentials"
SOURCE_CREDENTIALS_ENV = "TENSORKILN_SOURCE_CREDENTIALS"


def source_credentials(credentials: dict | None) -> Access:
    """spec.source.credentials.secretName as the compile pod reads it: the whole Secret, read-only, one
    file per key (the keys a scheme reads are listed in the API). A ServiceAccount is the pod's own
    (job.build_job); nothing for none."""
    secret = (credentials or {}).get("secretName")
    if not secret:
        return Access("")
    volume = {"name": SOURCE_CREDENTIALS_VOLUME, "secret": {"secretName": secret, "defaultMode": 0o440}}
    mount = {"name": SOURCE_CREDENTIALS_VOLUME, "mountPath": SOURCE_CREDENTIALS_DIR, "readOnly": True}
    return Access("", [volume], [mount], [{"name": SOURCE_CREDENTIALS_ENV, "value": SOURCE_CREDENTIALS_DIR}])
