"""`make images`: build the images with buildah, cached by content, and push them to a registry.

Each image is tagged `localhost/tensorkiln/<name>:<key>` in the machine's container storage,
where the key is a digest of its Dockerfile, the files it copies and its base (or binary): an
unchanged tree rebuilds nothing, a changed one gets a new tag. Layers carry timestamp 0, so the
same inputs give the same image. `push` copies them (skopeo) to a registry, the local cluster's or
`make push REGISTRY=...`, and records each digest there: the chart's values pin them by it.

A build host behind a TLS-inspecting proxy (this one) gives pip its CA bundle as the optional
build secret `ca-bundle` (the Dockerfiles read it only when it is there).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from tensorkiln_local.cluster import binaries, packages, paths
from tensorkiln_local.images import base
from tensorkiln_local.images.catalog import ALL, Image

RECORDS = paths.CACHE_DIR / "images"
LOCAL_REPOSITORY = "localhost"
CA_BUNDLE_ENV = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT")


@dataclass(frozen=True)
class Built:
    name: str
    reference: str  # localhost/tensorkiln/<name>:<key>
    image_id: str
    size_bytes: int


@dataclass(frozen=True)
class Pushed:
    name: str
    repository: str  # <registry>/tensorkiln/<name>
    tag: str
    digest: str
    image_id: str  # the built image's ID (its config's digest), whatever compression the push used

    @property
    def pinned(self) -> str:
        return f"{self.repository}@{self.digest}"


def _files(root: Path, inputs: tuple[str, ...]) -> list[Path]:
    found = []
    for entry in inputs:
        path = root / entry
        found += (
            sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
            if path.is_dir()
            else [path]
        )
    return found


def _vendored(image: Image) -> Path | None:
    """The local copy of the image's vendored sources, when this machine has one."""
    if image.vendored is None:
        return None
    found = paths.VENDOR_DIR / image.vendored[0]
    return found if found.is_dir() else None


def content_key(image: Image, root: Path, base_ref: str) -> str:
    """Digest of the Dockerfile, every file the image copies (path and bytes), its vendored sources, its build
    arguments and its base."""
    digest = hashlib.sha256(f"base={base_ref}\n".encode())
    if image.build_args:  # only when set, so the other images' keys stay what they were
        digest.update(f"args={image.build_args}\n".encode())
    for path in [root / image.dockerfile, *_files(root, image.inputs)]:
        digest.update(f"{path.relative_to(root)}\n".encode() + path.read_bytes() + b"\n")
    if vendored := _vendored(image):
        for path in _files(vendored, (".",)):
            digest.update(f"vendor/{path.relative_to(vendored)}\n".encode() + path.read_bytes() + b"\n")
    return digest.hexdigest()[:16]


def _context(image: Image, root: Path, tmp: Path) -> Path:
    """The build context: the repository, or, with vendored sources, a copy of what the Dockerfile
    copies plus those sources where it looks for them (the repository itself is left untouched)."""
    vendored = _vendored(image)
    if vendored is None:
        return root
    for path in _files(root, image.inputs):
        (tmp / path.relative_to(root)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, tmp / path.relative_to(root))
    shutil.copytree(vendored, tmp / image.vendored[1])
    return tmp


def _podman(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], check=True, capture_output=True, text=True)


def _exists(ref: str) -> bool:
    return subprocess.run(["podman", "image", "exists", ref], check=False).returncode == 0


def _ca_bundle() -> str | None:
    for name in CA_BUNDLE_ENV:
        if os.environ.get(name) and Path(os.environ[name]).is_file():
            return os.environ[name]
    return None


def build(image: Image, root: Path = paths.REPO_ROOT) -> Built:
    """Build `image` unless its content key is already in storage."""
    if image.needs_base:
        base_ref, context = base.ensure(), root
    else:
        binary = binaries.build(binaries.BINARIES[image.binary])
        base_ref, context = f"binary={binary.name}", None
    ref = f"{LOCAL_REPOSITORY}/{image.repository}:{content_key(image, root, base_ref)}"
    if not _exists(ref):
        print(f"building image {image.name} ({ref})", file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix=f"tensorkiln-{image.name}-") as tmp:
            argv = ["buildah", "bud", "--quiet", "--layers", "--network", "host", "--timestamp", "0",
                    "-f", str(root / image.dockerfile), "-t", ref]  # fmt: skip
            if image.needs_base:
                argv += ["--build-arg", f"BASE={base_ref}"]
                argv += [arg for key, value in image.build_args for arg in ("--build-arg", f"{key}={value}")]
                if bundle := _ca_bundle():
                    argv += ["--secret", f"id=ca-bundle,src={bundle}"]
                context = _context(image, root, Path(tmp))
            else:  # a FROM scratch image: its binary alone is the context
                context = Path(tmp)
                shutil.copy2(binaries.build(binaries.BINARIES[image.binary]), context / image.binary)
            subprocess.run([*argv, str(context)], check=True, stdout=subprocess.DEVNULL)
    inspected = json.loads(_podman("image", "inspect", ref).stdout)[0]
    _prune(image, ref)
    return Built(image.name, ref, inspected["Id"], int(inspected["Size"]))


def _prune(image: Image, keep: str) -> None:
    """Remove the image's tags of other trees from storage (each build of a changed tree adds one),
    and the layers left without a tag."""
    listed = _podman("images", "--format", "{{.Repository}}:{{.Tag}}", f"{LOCAL_REPOSITORY}/{image.repository}")
    stale = [ref for ref in listed.stdout.split() if ref != keep and not ref.endswith(":<none>")]
    if stale:
        subprocess.run(["podman", "rmi", *stale], check=False, capture_output=True)
        subprocess.run(["podman", "image", "prune", "--force"], check=False, capture_output=True)


def build_all(names: list[str]) -> list[Built]:
    packages.ensure(packages.IMAGES)
    built = [build(ALL[name]) for name in names]
    RECORDS.mkdir(parents=True, exist_ok=True)
    records = _read(RECORDS / "built.json")
    records.update({b.name: asdict(b) for b in built})
    (RECORDS / "built.json").write_text(json.dumps(records, indent=2, sort_keys=True))
    return built


def built(name: str) -> Built | None:
    """The last build of image `name` on this machine (build_all's record), or None."""
    record = _read(RECORDS / "built.json").get(name)
    return Built(**record) if record else None


def _read(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def _registry_record(registry: str) -> Path:
    return RECORDS / f"pushed-{registry.replace('/', '_').replace(':', '_')}.json"


# zstd at level 1: about half gzip's CPU to push, and a fraction of it to unpack, for layers as small.
LEVELS = {"zstd": ("--dest-compress-level=1",)}


def push(built: Built, registry: str, tag: str, tls_verify: bool, compression: str = "gzip") -> Pushed:
    """Copy a built image to registry/tensorkiln/<name>:tag, its layers compressed with `compression` (gzip,
    what every registry and runtime takes; zstd where the runtime is known to unpack it); the digest the
    registry holds it by."""
    repository = f"{registry}/{ALL[built.name].repository}"
    records = _read(_registry_record(registry))
    recorded = records.get(built.name)
    wanted = {"image_id": built.image_id, "tag": tag, "compression": compression}
    if recorded and all(recorded.get(k) == v for k, v in wanted.items()) and _in_registry(recorded):
        return Pushed(built.name, repository, tag, recorded["digest"], built.image_id)
    with tempfile.TemporaryDirectory() as tmp:
        digest_file = Path(tmp) / "digest"
        subprocess.run(
            ["skopeo", "copy", "--quiet", f"--dest-tls-verify={str(tls_verify).lower()}",
             f"--dest-compress-format={compression}", *LEVELS.get(compression, ()),
             "--digestfile", str(digest_file), f"containers-storage:{built.reference}",
             f"docker://{repository}:{tag}"],
            check=True,
        )  # fmt: skip
        digest = digest_file.read_text().strip()
    records[built.name] = {**wanted, "digest": digest, "repository": repository, "tls_verify": tls_verify}
    _registry_record(registry).write_text(json.dumps(records, indent=2, sort_keys=True))
    return Pushed(built.name, repository, tag, digest, built.image_id)


def _in_registry(recorded: dict) -> bool:
    """The registry still holds the recorded digest (a local registry's storage may be gone)."""
    return (
        subprocess.run(
            ["skopeo", "inspect", "--raw", f"--tls-verify={str(recorded['tls_verify']).lower()}",
             f"docker://{recorded['repository']}@{recorded['digest']}"],
            check=False, capture_output=True,
        ).returncode == 0
    )  # fmt: skip


def pushed(registry: str) -> dict[str, Pushed]:
    """What was pushed to `registry`, by image name."""
    return {
        name: Pushed(name, r["repository"], r["tag"], r["digest"], r["image_id"])
        for name, r in _read(_registry_record(registry)).items()
    }
