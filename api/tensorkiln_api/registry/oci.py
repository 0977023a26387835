"""The registry in an OCI registry (the CNCF distribution registry, Harbor, GHCR, ECR, ...): one OCI
artifact per engine, pushed and read with the ORAS Python SDK (`oras`, the `oci` extra).

`oci://host[:port]/repository[/path]`. Each engine is one image-spec 1.1 artifact:

    artifactType  application/vnd.tensorkiln.engine.v1, with the empty config
                  (application/vnd.oci.empty.v1+json, `{}`)
    layers        one per artifact file, application/vnd.tensorkiln.engine.file.v1, titled
                  (org.opencontainers.image.title) with its path relative to the engine; then the
                  engine's canonical manifest.json, application/vnd.tensorkiln.engine.manifest.v1+json,
                  whose blob digest is therefore sha256:<engine digest>
    annotations   org.opencontainers.image.created (the engine's createdAt) and dev.tensorkiln.*:
                  what the engine is (`annotations` below)
    tags          engine-<digest> (what `manifest` and `fetch` read) and <hardware class>-<40 hex of
                  the cache key's id> (the cache: what `lookup` reads)
    subject       for a model pulled from an OCI artifact (an oci:// source), that artifact's manifest:
                  `oras discover <registry>/<repository>@<model manifest digest>` (the referrers API)
                  lists the engines built from it. A registry without the referrers API (no OCI-Subject
                  header in its answer to the push) gets the image spec's fallback: an index tagged
                  sha256-<hex of the model manifest digest> in the engines' repository, each engine's
                  manifest added to it once

Publishing uploads the blobs, then pushes the manifest under the engine tag, then under the
cache-key tag: a reader that finds either tag finds a complete engine, and lookups see an engine
only once `fetch` can read it. The artifact is a function of the engine's manifest alone, so
publishing an engine again pushes the same manifest (same digest) and no blob.

Reads verify what base.py verifies: the manifest.json layer must hash to the digest its tag
names, and every file its size and SHA-256 in that manifest.

Credentials come from a docker config file as the container tools read them: $REGISTRY_AUTH_FILE,
else $DOCKER_CONFIG/config.json, else ~/.docker/config.json (`auths` entries, credHelpers,
credsStore); Basic and Bearer-token registries both work. They are never logged nor put in an
error. The registry is spoken to over HTTPS, verified with $SSL_CERT_FILE when set; plain HTTP
only for localhost, 127.0.0.1 and ::1, or with TENSORKILN_OCI_INSECURE=true.
"""

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import jsonschema
import oras.auth
import oras.container
import oras.provider
import requests
import urllib3
from requests.adapters import HTTPAdapter

from tensorkiln_api.registry.base import (
    CHUNK_SIZE,
    ArtifactIntegrityError,
    EngineSource,
    NoSuchObject,
    Registry,
    RegistryError,
    RegistryUnavailable,
    _check_files,
)
from tensorkiln_api.registry.manifest import CacheKey, EngineManifest, canonical_json

ARTIFACT_TYPE = "application/vnd.tensorkiln.engine.v1"
FILE_MEDIA_TYPE = "application/vnd.tensorkiln.engine.file.v1"
MANIFEST_MEDIA_TYPE = "application/vnd.tensorkiln.engine.manifest.v1+json"
OCI_MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
EMPTY_CONFIG = {
    "mediaType": "application/vnd.oci.empty.v1+json",
    "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
    "size": 2,
    "data": "e30=",  # `{}`
}
TITLE = "org.opencontainers.image.title"
CREATED = "org.opencontainers.image.created"
ENGINE_DIGEST = "dev.tensorkiln.engine.digest"

INSECURE_ENV = "TENSORKILN_OCI_INSECURE"
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
# Files above this size are uploaded in chunks of UPLOAD_CHUNK_BYTES (POST, PATCH..., PUT) rather than
# read whole into memory for one PUT: a TensorRT plan can be gigabytes.
CHUNKED_UPLOAD_ABOVE_BYTES = 64 << 20
UPLOAD_CHUNK_BYTES = 16 << 20
TIMEOUT = (5, 60)  # connect, read (seconds)

# OCI distribution spec: repository names and tags.
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*")
_TAG_CHARACTER = re.compile(r"[^A-Za-z0-9_.-]+")
_TAG_MAX = 128
_BLOB_DIGEST = re.compile(r"sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128}")


def engine_tag(digest: str) -> str:
    """The tag of the engine `digest`: what `manifest` and `fetch` read."""
    return f"engine-{digest}"


def cache_tag(key: CacheKey) -> str:
    """The tag of the cache entry for `key`: the hardware class, made a tag (characters outside
    [A-Za-z0-9_.-] become '-', none leading but [A-Za-z0-9_], cut to fit 128), then the first 40 hex
    of the key's id, which is what makes the tag unique per key (the class is there to be read)."""
    suffix = key.id()[:40]
    hardware_class = _TAG_CHARACTER.sub("-", key.hardware_class).lstrip(".-")[: _TAG_MAX - len(suffix) - 1]
    return f"{hardware_class or 'key'}-{suffix}"


def annotations(manifest: EngineManifest, digest: str) -> dict[str, str]:
    """The OCI manifest's annotations: what the engine is, for registry UIs, `oras manifest fetch`
    and anyone choosing an engine by tag. A function of the engine's manifest alone."""
    key = manifest.key
    return {
        CREATED: _rfc3339(manifest.created_at),
        ENGINE_DIGEST: digest,
        "dev.tensorkiln.engine.compiler": manifest.compiler,
        "dev.tensorkiln.engine.precision": manifest.precision,
        "dev.tensorkiln.engine.origin": manifest.origin,
        "dev.tensorkiln.model.name": manifest.model_name,
        # Where the model came from (an oci:// source is the `subject` too). No query: a presigned URL's
        # signature is a credential.
        "dev.tensorkiln.model.source": urlsplit(manifest.source_uri)._replace(query="", fragment="").geturl(),
        "dev.tensorkiln.hardware.kind": manifest.hardware_kind,
        "dev.tensorkiln.key.id": key.id(),
        "dev.tensorkiln.key.model-digest": key.model_digest,
        "dev.tensorkiln.key.options-hash": key.options_hash,
        "dev.tensorkiln.key.hardware-class": key.hardware_class,
        "dev.tensorkiln.key.compiler-version": key.compiler_version,
        **{f"dev.tensorkiln.runtime.{name}": version for name, version in sorted(manifest.runtime_versions.items())},
    }


def artifact_manifest(manifest: EngineManifest) -> dict:
    """The OCI manifest of the engine's artifact (see the module's docstring)."""
    raw = canonical_json(manifest.to_json_dict()).encode()
    digest = manifest.digest()
    files = [_layer(FILE_MEDIA_TYPE, artifact.sha256, artifact.size, artifact.path) for artifact in manifest.artifacts]
    return {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST_MEDIA_TYPE,
        "artifactType": ARTIFACT_TYPE,
        "config": dict(EMPTY_CONFIG),
        "layers": [*files, _layer(MANIFEST_MEDIA_TYPE, digest, len(raw), "manifest.json")],
        **({"subject": manifest.source_artifact.model_dump(by_alias=True)} if manifest.source_artifact else {}),
        "annotations": annotations(manifest, digest),
    }


class OciRegistry(Registry):
    def __init__(self, client: "_Client", host: str, repository: str, credentials: str):
        super().__init__(f"oci://{host}/{repository}")
        self.client, self.host, self.repository = client, host, repository
        self.credentials = credentials  # where credentials come from, for error messages: never a secret

    @classmethod
    def from_uri(cls, uri: str, env: Mapping[str, str] = os.environ) -> "OciRegistry":
        parts = urlsplit(uri)
        if "@" in parts.netloc:  # not echoed: it carries credentials
            raise RegistryError(
                "an oci:// registry URI carries no credentials: put them in a docker config file "
                "($DOCKER_CONFIG/config.json or $REGISTRY_AUTH_FILE)"
            )
        try:
            port = parts.port
        except ValueError:
            port = -1
        repository = parts.path.strip("/")
        if parts.scheme != "oci" or not parts.hostname or port == -1 or parts.query or parts.fragment:
            raise RegistryError(f"{uri!r} is no OCI registry URI: expected oci://host[:port]/repository[/path]")
        if not _REPOSITORY.fullmatch(repository):
            raise RegistryError(
                f"{uri!r}: the repository {repository!r} is no OCI repository name "
                "(lowercase letters and digits, separated by '.', '_', '__', '-' or '/')"
            )
        host, client, credentials = client_for(parts.hostname, port, _auth_file(env), env)
        return cls(client, host, repository, credentials)

    def engine_uri(self, digest: str) -> str:
        return f"{self.uri}:{engine_tag(digest)}"

    # --- publish

    def publish(self, manifest: EngineManifest, files_dir: Path) -> str:
        """Upload the blobs, then push the manifest under the engine tag, then under the cache-key
        tag; return the digest. An engine whose tag already holds this very artifact is only
        tagged again for its key."""
        files_dir = Path(files_dir)
        _check_files(manifest, files_dir)  # all checked before anything is written
        digest = manifest.digest()
        artifact = artifact_manifest(manifest)
        stored = self._get_manifest(engine_tag(digest))
        if stored is None or _json_object(stored) != artifact:
            self._upload_blobs(manifest, artifact, files_dir)
            response = self._put_manifest(artifact, engine_tag(digest))
            if "subject" in artifact and not response.headers.get("OCI-Subject"):
                self._add_referrer(artifact, engine_tag(digest))
        self._put_manifest(artifact, cache_tag(manifest.key))  # last: lookups go through it
        return digest

    def _add_referrer(self, artifact: dict, tag: str) -> None:
        """The referrers tag schema: the engine's manifest (as stored under `tag`) listed once in the index
        tagged after its subject's digest. Read, add, write: two engines of one model published at the same
        instant may leave one of them out of the index (the spec's own caveat), never out of the registry."""
        stored = self._get_manifest(tag)
        entry = {
            "mediaType": OCI_MANIFEST_MEDIA_TYPE,
            "digest": f"sha256:{hashlib.sha256(stored).hexdigest()}",
            "size": len(stored),
            "artifactType": ARTIFACT_TYPE,
            "annotations": artifact["annotations"],
        }
        fallback = artifact["subject"]["digest"].replace(":", "-")
        index = _json_object(self._get_manifest(fallback, OCI_INDEX_MEDIA_TYPE) or b"") or {}
        listed = index.get("manifests") if isinstance(index.get("manifests"), list) else []
        if any(isinstance(m, dict) and m.get("digest") == entry["digest"] for m in listed):
            return
        index = {"schemaVersion": 2, "mediaType": OCI_INDEX_MEDIA_TYPE, "manifests": [*listed, entry]}
        what = f"push of tag {fallback}"
        with self._errors(what):  # oras' upload_manifest takes image manifests only
            url = f"{self.client.prefix}://{self._container(fallback).manifest_url()}"
            self._check(
                self.client.do_request(url, "PUT", headers={"Content-Type": OCI_INDEX_MEDIA_TYPE}, json=index), what
            )

    def _upload_blobs(self, manifest: EngineManifest, artifact: dict, files_dir: Path) -> None:
        """Every blob the artifact names (a blob already there is not sent again)."""
        *files, manifest_layer = artifact["layers"]
        with tempfile.TemporaryDirectory(prefix="tensorkiln-oci-") as scratch:
            manifest_file, config_file = Path(scratch) / "manifest.json", Path(scratch) / "config.json"
            manifest_file.write_bytes(canonical_json(manifest.to_json_dict()).encode())
            config_file.write_bytes(b"{}")
            blobs = [(files_dir / a.path, layer) for a, layer in zip(manifest.artifacts, files)]
            for path, descriptor in [*blobs, (manifest_file, manifest_layer), (config_file, artifact["config"])]:
                what = f"upload of {descriptor['digest']} ({descriptor.get('annotations', {}).get(TITLE, 'config')})"
                with self._errors(what):
                    chunked = descriptor["size"] > CHUNKED_UPLOAD_ABOVE_BYTES
                    container = self._container("latest")  # blobs belong to the repository, not to a tag
                    response = self.client.upload_blob(
                        str(path), container, descriptor, do_chunked=chunked, chunk_size=UPLOAD_CHUNK_BYTES
                    )
                    self._check(response, what)

    def _put_manifest(self, artifact: dict, tag: str) -> requests.Response:
        what = f"push of tag {tag}"
        with self._errors(what):
            response = self.client.upload_manifest(artifact, self._container(tag))
            self._check(response, what)
        return response

    # --- what it holds

    def listing(self) -> dict[str, dict[str, str]]:
        """Each tag of the repository (the registry's tag listing) and the annotations of the artifact it
        names, as `oras discover`/`crane` would show them: what an administrator reads."""
        what = "tag listing"
        with self._errors(what):
            url = f"{self.client.prefix}://{self._container('latest').tags_url()}"
            response = self.client.do_request(url, "GET")
            tags = (response.json().get("tags") or []) if self._check(response, what, missing_ok=True) else []
        found = {}
        for tag in sorted(tags):
            # An engine's manifest, or a referrers fallback index (no annotations of its own).
            stored = self._get_manifest(tag, f"{OCI_MANIFEST_MEDIA_TYPE}, {OCI_INDEX_MEDIA_TYPE}")
            artifact = _json_object(stored) if stored is not None else None
            found[tag] = dict((artifact or {}).get("annotations") or {})
        return found

    # --- read: base.py's lookup, manifest and fetch, with the bytes from here

    def _index_entry(self, key: CacheKey) -> bytes | None:
        return self._get_manifest(cache_tag(key))

    def _index_digest(self, entry: bytes) -> str:
        artifact = json.loads(entry)
        digest = artifact["annotations"][ENGINE_DIGEST]
        layer = _manifest_layer(artifact)
        if layer is None:
            raise RegistryError(f"no manifest.json layer (media type {MANIFEST_MEDIA_TYPE})")
        if layer.get("digest") != f"sha256:{digest}":
            raise RegistryError(f"its manifest.json layer is {layer.get('digest')}, its {ENGINE_DIGEST} says {digest}")
        return digest  # base.lookup reads the engine by its own tag, checks the hash and the key

    def _index_name(self, key: CacheKey) -> str:
        return f"tag {cache_tag(key)}"

    def _engine(self, digest: str) -> EngineSource:
        return _OciEngine(self, digest)

    # --- the registry's API, through oras

    def _container(self, tag: str) -> oras.container.Container:
        namespace, _, name = self.repository.rpartition("/")
        container = oras.container.Container(name, registry=self.host)  # one component: parsed unambiguously
        container.namespace, container.tag = namespace or None, tag
        return container

    def _get_manifest(self, tag: str, media_type: str = "") -> bytes | None:
        """The OCI manifest (or, asked for, index) the tag names, as stored, or None: no such tag (or no
        such repository)."""
        what = f"manifest {tag}"
        container = self._container(tag)
        with self._errors(what):
            response = self.client.do_request(
                f"{self.client.prefix}://{container.manifest_url()}",
                "GET",
                headers={"Accept": media_type or OCI_MANIFEST_MEDIA_TYPE},
            )
            return response.content if self._check(response, what, missing_ok=True) else None

    def _blob_chunks(self, digest: str) -> Iterator[bytes]:
        """Stream a blob of the repository; NoSuchObject (on the first `next`) when there is none."""
        if not isinstance(digest, str) or not _BLOB_DIGEST.fullmatch(digest):
            raise NoSuchObject(repr(digest))
        what = f"blob {digest}"
        with self._errors(what):
            with self.client.get_blob(self._container("latest"), digest, stream=True) as response:
                if not self._check(response, what, missing_ok=True):
                    raise NoSuchObject(digest)
                yield from response.iter_content(CHUNK_SIZE)

    def _check(self, response: requests.Response, what: str, missing_ok: bool = False) -> bool:
        """True for a success, False for a 404 where that means "none"; raise for the rest."""
        status = response.status_code
        if 200 <= status < 300:
            return True
        if status == 404 and missing_ok:
            return False
        message = f"{self.uri}: {what}: HTTP {status} {_error_detail(response)}"
        if status in (401, 403):
            raise RegistryError(f"{message} (credentials: {self.credentials})")
        if status == 429 or status >= 500:
            raise RegistryUnavailable(message)
        raise RegistryError(message)

    @contextmanager
    def _errors(self, what: str):
        """Map the transport's and oras' errors: unreachable, or refused."""
        try:
            yield
        except requests.exceptions.SSLError as error:  # a certificate or a protocol mismatch: no outage
            raise RegistryError(f"{self.uri}: {what}: TLS: {error}") from error
        except UNREACHABLE as error:
            raise RegistryUnavailable(f"{self.uri}: {what}: {error}") from error
        except (requests.exceptions.RequestException, jsonschema.ValidationError) as error:
            raise RegistryError(f"{self.uri}: {what}: {error}") from error
        except ValueError as error:  # oras: a challenge it cannot answer (no credentials), no upload session
            raise RegistryError(f"{self.uri}: {what}: {error} (credentials: {self.credentials})") from error


# The transport's errors that say the registry was not reached, or answered only in part: a retry may pass.
UNREACHABLE = (
    requests.exceptions.ConnectionError,
    requests.exceptions.Timeout,
    requests.exceptions.RetryError,
    requests.exceptions.ChunkedEncodingError,
    urllib3.exceptions.HTTPError,
)


def client_for(
    hostname: str, port: int | None, auth_file: Path | None, env: Mapping[str, str] = os.environ
) -> tuple[str, "_Client", str]:
    """A client for the registry at hostname[:port], set up as OciRegistry's own (HTTPS, plain HTTP only
    for loopback or TENSORKILN_OCI_INSECURE; short transport retries and timeouts; the credentials for it
    of the docker config `auth_file`, None: anonymous): (host as a reference writes it, the client, where
    its credentials come from in words that hold no secret). Also what the compiler's oci:// model source
    pulls with, with its own docker config."""
    bracketed = f"[{hostname}]" if ":" in hostname else hostname
    host = f"{bracketed}:{port}" if port is not None else bracketed
    insecure = hostname in LOOPBACK_HOSTS or env.get(INSECURE_ENV, "").lower() in ("1", "true", "yes")
    client = _Client(host, insecure=insecure, tls_verify=env.get("SSL_CERT_FILE") or True)
    # Credentials are looked up by the container's registry (its host) alone.
    credentials = client.load_credentials(oras.container.Container("latest", registry=host), auth_file)
    return host, client, credentials


class _OciEngine(EngineSource):
    """One engine read through its tag: the manifest.json layer, then the files of the same
    OCI manifest, found by title."""

    registry: OciRegistry

    def __init__(self, registry: OciRegistry, digest: str):
        super().__init__(registry, digest)
        self._files: dict[str, dict] | None = None

    def manifest_bytes(self) -> bytes | None:
        registry, tag = self.registry, engine_tag(self.digest)
        stored = registry._get_manifest(tag)
        if stored is None:
            return None
        artifact = _json_object(stored)
        layer = _manifest_layer(artifact) if artifact is not None else None
        if layer is None:
            raise RegistryError(
                f"{registry.engine_uri(self.digest)} is no TensorKiln engine: "
                f"no layer of media type {MANIFEST_MEDIA_TYPE}"
            )
        self._files = {
            _title(layer): layer for layer in artifact["layers"] if _is_layer(layer, FILE_MEDIA_TYPE) and _title(layer)
        }
        try:
            return b"".join(registry._blob_chunks(layer.get("digest")))
        except NoSuchObject:
            raise ArtifactIntegrityError(
                f"{registry.engine_uri(self.digest)}/manifest.json: missing (blob {layer.get('digest')})"
            ) from None

    def chunks(self, path: str) -> Iterator[bytes]:
        layer = (self._files or {}).get(path)  # fetch read the manifest first: its files are known
        if layer is None:
            raise NoSuchObject(path)
        yield from self.registry._blob_chunks(layer.get("digest"))


class _Auth(oras.auth.TokenAuth):
    """oras' token auth, which also answers a Basic challenge (the distribution registry with
    htpasswd, some on-premises registries) and asks for a new token when the one it sent was
    refused (scoped for less: a pull's token, then a push; or expired), where oras would send the
    same token again for good."""

    def authenticate_request(self, original: requests.Response, headers: dict, refresh: bool = False):
        headers = dict(headers or {})
        challenge = original.headers.get("Www-Authenticate", "")
        if challenge.split(" ", 1)[0].lower() == "basic":
            basic = getattr(self, "_basic_auth", None)
            if not basic:
                return headers, False
            headers["Authorization"] = f"Basic {basic}"
            return headers, True
        sent = original.request.headers.get("Authorization", "") if original.request is not None else ""
        return super().authenticate_request(original, headers, refresh or sent.startswith("Bearer "))


class _Transport(HTTPAdapter):
    """A timeout on every request (requests sets none, nor does oras)."""

    def send(self, request, timeout=None, **kwargs):
        return super().send(request, timeout=timeout or TIMEOUT, **kwargs)


class _Client(oras.provider.Registry):
    """oras' registry client, made fit for a reconciling operator: oras retries a failed request
    five times over two minutes (sleeping 3, 5, 11, 29 and 83 s) before an unreachable registry
    is reported; here the transport retries three times within about a second and times out,
    and the operator and the compile Job retry with backoff of their own."""

    do_request = oras.provider.Registry.do_request.__wrapped__  # without oras' retry decorator

    def __init__(self, host: str, insecure: bool, tls_verify: bool | str):
        super().__init__(hostname=host, insecure=insecure, tls_verify=tls_verify)
        retries = urllib3.Retry(
            total=3,
            backoff_factor=0.2,
            status_forcelist=[500, 502, 503, 504],
            allowed_methods=None,  # an upload session's POST too: retrying it leaves at most an unused session
            respect_retry_after_header=False,
        )
        transport = _Transport(max_retries=retries)
        self.session.mount("http://", transport)
        self.session.mount("https://", transport)
        auth = _Auth()
        auth.session, auth.prefix, auth._tls_verify = self.session, self.prefix, tls_verify
        self.auth = auth

    def load_credentials(self, container: oras.container.Container, auth_file: Path | None) -> str:
        """Read the credentials for the registry from `auth_file` (a docker config; None: anonymous) and
        say where they come from, in words that hold no secret."""
        if auth_file is None:
            self.auth._auth_config = {"auths": {}, "credsStore": None, "credHelpers": {}}
            return f"none (anonymous) for {container.registry}"
        try:
            config = json.loads(auth_file.read_text())
        except FileNotFoundError:
            config = {}
        except (OSError, ValueError) as error:
            # Only the kind of error: a parser's message may quote the file, secrets included.
            raise RegistryError(
                f"cannot read the registry credentials file {auth_file}: {type(error).__name__}"
            ) from None
        if not isinstance(config, dict):
            raise RegistryError(f"{auth_file}: not a docker config (a JSON object)")
        auths = config.get("auths") if isinstance(config.get("auths"), dict) else {}
        # Only this file, never oras' default ~/.docker/config.json beside it; keys as docker writes them
        # ("https://host/v1/") or bare ("host:port").
        self.auth._auth_config = {
            "auths": {re.sub(r"^https?://", "", name).split("/", 1)[0]: entry for name, entry in auths.items()},
            "credsStore": config.get("credsStore"),
            "credHelpers": config.get("credHelpers") if isinstance(config.get("credHelpers"), dict) else {},
        }
        self.auth.load_configs(container)
        if getattr(self.auth, "_basic_auth", None):
            return f"from {auth_file} for {container.registry}"
        return f"none for {container.registry} in {auth_file}"


def _auth_file(env: Mapping[str, str]) -> Path:
    if env.get("REGISTRY_AUTH_FILE"):
        return Path(env["REGISTRY_AUTH_FILE"])
    if env.get("DOCKER_CONFIG"):
        return Path(env["DOCKER_CONFIG"]) / "config.json"
    return Path.home() / ".docker" / "config.json"


def _layer(media_type: str, sha256: str, size: int, title: str) -> dict:
    return {"mediaType": media_type, "digest": f"sha256:{sha256}", "size": size, "annotations": {TITLE: title}}


def _json_object(raw: bytes) -> dict | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _is_layer(layer, media_type: str) -> bool:
    return isinstance(layer, dict) and layer.get("mediaType") == media_type


def _title(layer: dict) -> str | None:
    annotations = layer.get("annotations")
    return annotations.get(TITLE) if isinstance(annotations, dict) else None


def _manifest_layer(artifact: dict) -> dict | None:
    """The one manifest.json layer of an engine's artifact, or None."""
    layers = artifact.get("layers")
    found = [layer for layer in layers if _is_layer(layer, MANIFEST_MEDIA_TYPE)] if isinstance(layers, list) else []
    return found[0] if len(found) == 1 else None


def _error_detail(response: requests.Response) -> str:
    """The registry's own words (OCI error codes and messages), else the HTTP reason."""
    try:
        errors = response.json().get("errors") or []
        words = "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors if isinstance(e, dict))
    except (ValueError, AttributeError, requests.exceptions.RequestException):
        words = ""
    return (words or response.reason or "")[:500]


def _rfc3339(moment: datetime) -> str:
    moment = moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    return moment.isoformat().replace("+00:00", "Z")
