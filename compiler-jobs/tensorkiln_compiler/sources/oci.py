"""oci://host[:port]/repository@sha256:<digest> (or :tag): a model in an OCI registry, pulled with the
ORAS SDK through the engine registry's client code (tensorkiln_api.registry.oci.client_for: HTTPS, plain
HTTP only for loopback or TENSORKILN_OCI_INSECURE=true) but never its credentials: the .dockerconfigjson
of spec.source.credentials' Secret, else anonymous.

Two kinds of artifact, told apart by their layers:

- an OCI artifact (a CNCF ModelPack, `application/vnd.cncf.model.*`, or any other) whose layers carry
  `org.opencontainers.image.title`: the one layer titled *.onnx is the model (a `.tar` layer, as
  ModelPack's weight.v1.tar(+gzip), holds it: its one *.onnx member is taken);
- a modelcar image (an ordinary container image, its layers tar(+gzip) filesystems): the one
  models/**/*.onnx file of the image's filesystem is (later layers win, whiteouts delete).

None or several is refused, naming what there is. A calibration dataset (`what` CalibrationData) is
the one *.npz instead. An index (a multi-platform image) is read through its linux/amd64 manifest,
else its first. Every blob is checked against its digest (and a pinned manifest against the
reference's) as it is downloaded into dest_dir.

A missing repository, tag or digest, 401/403 and any other 4xx but 408 and 429, an artifact without
the model, are bad input (exit 2); 5xx, 408, 429, connection errors and a blob that does not match
its digest may pass (exit 1). Credentials are never part of a message: a URI carrying some is
refused without being echoed.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import posixpath
import re
import shutil
import tarfile
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit

from ..errors import CompileError, InvalidInput
from .credentials import Credentials

REFERENCE = re.compile(
    r"oci://(?P<host>[^/@]+)/(?P<repository>[a-z0-9._/-]+)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})|@(?P<digest>sha256:[a-f0-9]{64}))"
)
TITLE = "org.opencontainers.image.title"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
INDEXES = (OCI_INDEX, DOCKER_LIST)
ACCEPT = ", ".join((OCI_MANIFEST, DOCKER_MANIFEST, OCI_INDEX, DOCKER_LIST))
# What a modelcar's layers are: image-spec filesystem layers (tar, +gzip, +zstd) and Docker's.
IMAGE_LAYER = re.compile(r"application/vnd\.(oci\.image\.layer\.v1\.tar|docker\.image\.rootfs\.diff\.tar)\b.*")
SUFFIXES = {"CalibrationData": ".npz"}  # what a fetch takes from the artifact; a model: .onnx
MODELCAR_ROOT = "models/"
CHUNK = 1 << 20
DOCKER_CONFIG_KEY = ".dockerconfigjson"  # a kubernetes.io/dockerconfigjson Secret's key


def pull(uri: str, dest_dir: Path, *, field: str, what: str, credentials: Credentials) -> tuple[Path, dict]:
    """The model (or dataset) file, and the descriptor (mediaType, digest, size) of the manifest the
    reference named: what the engine's own artifact links to."""
    puller = _Pull(uri, field, what, credentials)
    path = puller.into(dest_dir)
    return path, puller.descriptor


class _Pull:
    def __init__(self, uri: str, field: str, what: str, credentials: Credentials):
        self.uri, self.field, self.what, self.source_credentials = uri, field, what, credentials
        self.descriptor: dict = {}  # of the manifest the reference names, once read
        self.suffix = SUFFIXES.get(what, ".onnx")
        netloc = uri.partition("://")[2].partition("/")[0]
        if "@" in netloc:  # not echoed: it carries credentials
            self._refuse(
                f"{field}: an oci:// reference carries no credentials: name a docker-config Secret in "
                "spec.source.credentials.secretName"
            )
        match = REFERENCE.fullmatch(uri)
        if not match:
            self._refuse(
                f"{field}: {uri} is no OCI reference: expected oci://host[:port]/repository@sha256:<digest> "
                "or oci://host[:port]/repository:tag"
            )
        self.repository, self.tag, self.digest = match["repository"], match["tag"], match["digest"]
        try:
            from tensorkiln_api.registry import oci  # oras: the oci extra
        except ImportError as e:
            raise CompileError(
                f"{what}FetchFailed", f"{field}: {uri} needs the oci extra (oras), which this image lacks"
            ) from e
        netloc = urlsplit(f"//{match['host']}")
        try:
            hostname, port = netloc.hostname, netloc.port
        except ValueError:
            hostname = None
        if not hostname:
            self._refuse(f"{field}: {uri}: {match['host']!r} is no registry host[:port]")
        try:
            self.host, self.client, _ = oci.client_for(hostname, port, credentials.path(DOCKER_CONFIG_KEY))
        except oci.RegistryError as e:  # an unreadable docker config: its path and the kind of error only
            self._refuse(f"{field}: {uri}: {e}")

    # --- the pull

    def into(self, dest_dir: Path) -> Path:
        manifest = self._manifest(self.digest or self.tag, self.digest)
        layers = manifest.get("layers")
        if not isinstance(layers, list) or not all(isinstance(layer, dict) for layer in layers):
            self._refuse(f"{self.field}: {self.uri} is no image or artifact manifest (no layers)")
        dest_dir.mkdir(parents=True, exist_ok=True)
        if any(_title(layer) for layer in layers):
            return self._from_artifact(layers, dest_dir)
        if layers and all(IMAGE_LAYER.fullmatch(str(layer.get("mediaType"))) for layer in layers):
            return self._from_modelcar(layers, dest_dir)
        kinds = ", ".join(sorted({str(layer.get("mediaType")) for layer in layers})) or "none"
        self._refuse(
            f"{self.field}: {self.uri}: neither an artifact with titled layers ({TITLE}) nor a modelcar image "
            f"(layers: {kinds})"
        )

    def _manifest(self, reference: str, pinned: str | None) -> dict:
        """The manifest `reference` names (an index read through one of its manifests), checked against
        `pinned` when the reference is a digest."""
        url = f"{self.client.prefix}://{self._container().manifest_url(reference)}"
        with self._errors(f"manifest {reference}"):
            response = self.client.do_request(url, "GET", headers={"Accept": ACCEPT})
            self._check(response, f"manifest {reference}")
            body = response.content
        served = response.headers.get("Docker-Content-Digest", "")
        expected = pinned or (served if served.startswith("sha256:") else None)
        if expected and f"sha256:{hashlib.sha256(body).hexdigest()}" != expected:
            raise CompileError(
                f"{self.what}FetchFailed",
                f"{self.field}: {self.uri}: manifest {reference} as served does not hash to {expected}",
            )
        try:
            manifest = json.loads(body)
        except ValueError:
            manifest = None
        if not isinstance(manifest, dict):
            self._refuse(f"{self.field}: {self.uri}: manifest {reference} is no JSON object")
        media_type = manifest.get("mediaType") or response.headers.get("Content-Type", "").split(";")[0]
        if not self.descriptor:  # the reference's own manifest (an index's, not the one chosen in it)
            digest = f"sha256:{hashlib.sha256(body).hexdigest()}"
            self.descriptor = {"mediaType": media_type or OCI_MANIFEST, "digest": digest, "size": len(body)}
        if media_type in INDEXES or (not media_type and "manifests" in manifest):
            chosen = _platform_manifest(manifest.get("manifests"))
            if chosen is None:
                self._refuse(f"{self.field}: {self.uri}: an index that lists no manifest")
            return self._manifest(chosen, chosen)
        return manifest

    def _from_artifact(self, layers: list[dict], dest_dir: Path) -> Path:
        titled = [(layer, _title(layer)) for layer in layers if _title(layer)]
        found = [(layer, title) for layer, title in titled if title.lower().endswith(self.suffix)]
        if len(found) != 1:
            titles = ", ".join(title for _, title in titled)
            many = "several layers titled" if found else "no layer titled"
            self._refuse(f"{self.field}: {self.uri}: {many} *{self.suffix} (layer titles: {titles})")
        layer, title = found[0]
        name = _file_name(title, self.suffix)
        if ".tar" not in str(layer.get("mediaType")):  # the file itself (ModelPack's .raw)
            return self._blob(layer, dest_dir / name)
        archive = self._blob(layer, dest_dir / f".{name}.layer")
        if not _archive(archive):
            # The file itself under a tar media type: `oras push registry/repo:tag model.onnx` (the CLI and
            # oras-py) gives a plain file application/vnd.oci.image.layer.v1.tar unless told otherwise.
            return archive.rename(dest_dir / name)
        try:
            with self._tar(archive, title) as tar:
                members = [m for m in tar if m.isreg() and m.name.lower().endswith(self.suffix)]
                if len(members) != 1:
                    names = ", ".join(m.name for m in members) or "none"
                    self._refuse(
                        f"{self.field}: {self.uri}: layer {title} holds {len(members)} *{self.suffix} files "
                        f"({names}), not one"
                    )
                return self._extract(tar, members[0], dest_dir / name)
        finally:
            archive.unlink(missing_ok=True)

    def _from_modelcar(self, layers: list[dict], dest_dir: Path) -> Path:
        """The image's filesystem, layer over layer: which layer holds each models/**/<suffix> file at the
        end. Layers that hold none are deleted as soon as they are read."""
        final: dict[str, int] = {}  # path -> index of the layer whose file it is
        kept: dict[int, Path] = {}
        try:
            for index, layer in enumerate(layers):
                blob = self._blob(layer, dest_dir / f".layer-{index}")
                kept[index] = blob
                with self._tar(blob, f"layer {index} ({layer.get('digest')})") as tar:
                    entries = [(_normalised(m.name), m) for m in tar]
                for path, _ in entries:  # whiteouts and opaque directories hide what lower layers hold
                    directory, base = posixpath.split(path)
                    hidden = directory if base == ".wh..wh..opq" else posixpath.join(directory, base[4:])
                    if base.startswith(".wh."):
                        final = {p: i for p, i in final.items() if p != hidden and not p.startswith(f"{hidden}/")}
                for path, member in entries:
                    if posixpath.basename(path).startswith(".wh."):
                        continue
                    if member.isreg() and path.startswith(MODELCAR_ROOT) and path.lower().endswith(self.suffix):
                        final[path] = index
                    else:  # a directory, link or other file over a lower layer's model file
                        final.pop(path, None)
                for unused in set(kept) - set(final.values()):
                    kept.pop(unused).unlink()
            if len(final) != 1:
                files = ", ".join(f"/{path}" for path in sorted(final)) or "none"
                self._refuse(
                    f"{self.field}: {self.uri}: a modelcar image must hold one /{MODELCAR_ROOT}**/*{self.suffix} "
                    f"file; it holds {len(final)} ({files})"
                )
            [(path, index)] = final.items()
            with self._tar(kept[index], f"layer {index}") as tar:
                member = next(m for m in tar if _normalised(m.name) == path and m.isreg())
                return self._extract(tar, member, dest_dir / _file_name(path, self.suffix))
        finally:
            for blob in kept.values():
                blob.unlink(missing_ok=True)

    # --- blobs

    def _blob(self, layer: dict, path: Path) -> Path:
        """Download the layer's blob to `path`, checked against its digest and size as it comes."""
        digest, size = layer.get("digest"), layer.get("size")
        algorithm, _, hexdigest = str(digest).partition(":")
        if algorithm not in ("sha256", "sha512") or not re.fullmatch(r"[a-f0-9]{64}|[a-f0-9]{128}", hexdigest):
            self._refuse(f"{self.field}: {self.uri}: a layer's digest {digest!r} is no sha256 or sha512 digest")
        partial = path.with_name(f".{path.name}.part")
        hasher, written = hashlib.new(algorithm), 0
        with self._errors(f"blob {digest}"):
            with self.client.get_blob(self._container(), digest, stream=True) as response:
                self._check(response, f"blob {digest}")
                with partial.open("wb") as out:
                    for chunk in response.iter_content(CHUNK):
                        hasher.update(chunk)
                        written += len(chunk)
                        out.write(chunk)
        if hasher.hexdigest() != hexdigest or (isinstance(size, int) and written != size):
            partial.unlink(missing_ok=True)
            raise CompileError(
                f"{self.what}FetchFailed",
                f"{self.field}: {self.uri}: blob {digest} does not match its digest or size ({written} bytes "
                f"downloaded, {size} expected)",
            )
        partial.replace(path)
        return path

    @contextmanager
    def _tar(self, path: Path, name: str):
        try:
            with tarfile.open(path, "r:*") as tar:
                yield tar
        except (tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error) as e:
            self._refuse(
                f"{self.field}: {self.uri}: {name} is no tar archive readable here (tar, gzip; not zstd): "
                f"{type(e).__name__}"
            )

    def _extract(self, tar: tarfile.TarFile, member: tarfile.TarInfo, path: Path) -> Path:
        source = tar.extractfile(member)
        with source, path.open("wb") as out:
            shutil.copyfileobj(source, out, CHUNK)
        return path

    # --- the registry's API

    def _container(self):
        import oras.container

        namespace, _, name = self.repository.rpartition("/")
        container = oras.container.Container(name, registry=self.host)  # one component: parsed unambiguously
        container.namespace = namespace or None
        return container

    def _check(self, response, what: str) -> None:
        status = response.status_code
        if 200 <= status < 300:
            return
        message = f"{self.field}: {self.uri}: {what}: HTTP {status} {_error_detail(response)}"
        if status in (401, 403):
            raise InvalidInput(f"{self.what}AccessDenied", f"{message} with {self.source_credentials.described}")
        if 400 <= status < 500 and status not in (408, 429):
            raise InvalidInput(f"{self.what}Unreachable", message)
        raise CompileError(f"{self.what}FetchFailed", message)

    @contextmanager
    def _errors(self, what: str):
        """The transport's and oras' errors: unreachable, or refused."""
        import requests
        from tensorkiln_api.registry.oci import UNREACHABLE

        try:
            yield
        except requests.exceptions.SSLError as e:  # a certificate or a protocol mismatch: no outage
            self._refuse(f"{self.field}: {self.uri}: {what}: TLS: {e}")
        except (*UNREACHABLE, OSError) as e:
            raise CompileError(f"{self.what}FetchFailed", f"{self.field}: {self.uri}: {what}: {e}") from e
        except ValueError as e:  # oras: a challenge it cannot answer (no credentials)
            raise InvalidInput(
                f"{self.what}AccessDenied",
                f"{self.field}: {self.uri}: {what}: {e} with {self.source_credentials.described}",
            ) from e

    def _refuse(self, message: str) -> NoReturn:
        raise InvalidInput(f"{self.what}Unreachable", message)


def _archive(path: Path) -> bool:
    """A tar archive, or a compressed one (gzip, zstd): what its first bytes say."""
    with path.open("rb") as f:
        head = f.read(512)
    return head.startswith((b"\x1f\x8b", b"\x28\xb5\x2f\xfd")) or tarfile.is_tarfile(path)


def _title(layer: dict) -> str | None:
    annotations = layer.get("annotations")
    title = annotations.get(TITLE) if isinstance(annotations, dict) else None
    return title if isinstance(title, str) and title else None


def _normalised(name: str) -> str:
    """A tar member's path, relative to the filesystem's root ('./models/m.onnx' -> 'models/m.onnx')."""
    return posixpath.normpath("/" + name).lstrip("/")


def _file_name(title: str, suffix: str) -> str:
    """Where in dest_dir the file goes: the base name of its title or path (no directory: never outside)."""
    name = posixpath.basename(title.replace("\\", "/"))
    return name if name not in ("", ".", "..") and not name.startswith(".") else f"model{suffix}"


def _platform_manifest(manifests) -> str | None:
    """The digest of an index's linux/amd64 manifest, else of its first."""
    entries = [m for m in manifests if isinstance(m, dict) and m.get("digest")] if isinstance(manifests, list) else []
    for entry in entries:
        platform = entry.get("platform") if isinstance(entry.get("platform"), dict) else {}
        if (platform.get("os"), platform.get("architecture")) == ("linux", "amd64"):
            return entry["digest"]
    return entries[0]["digest"] if entries else None


def _error_detail(response) -> str:
    """The registry's own words (OCI error codes and messages), else the HTTP reason."""
    try:
        errors = response.json().get("errors") or []
        words = "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors if isinstance(e, dict))
    except (ValueError, AttributeError):
        words = ""
    return (words or response.reason or "")[:500]
