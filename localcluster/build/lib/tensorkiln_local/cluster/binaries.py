"""Build the cluster's upstream binaries from pinned Go modules, once, into a cache.

Each Go module in localcluster/build pins one upstream project. The cache key is the
component's version plus a digest of its go.mod/go.sum, so a pin change rebuilds and
nothing else does.
"""

import hashlib
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tensorkiln_local.cluster import paths

KUBERNETES_VERSION = "v1.37.2"


@dataclass(frozen=True)
class GoBinary:
    """One binary built from a module directory under localcluster/build."""

    name: str
    module_dir: str
    package: str
    version: str
    # Names this binary answers to (a multi-call binary dispatches on argv[0]).
    commands: tuple[str, ...]
    ldflags: str = ""


_KUBE_LDFLAGS = " ".join(
    f"-X k8s.io/component-base/version.{key}={value}"
    for key, value in {
        "gitVersion": KUBERNETES_VERSION,
        "gitMajor": "1",
        "gitMinor": KUBERNETES_VERSION.split(".")[1],
        "gitTreeState": "clean",
    }.items()
)

BINARIES = {
    b.name: b
    for b in (
        GoBinary(
            "kube",
            "kube",
            ".",
            KUBERNETES_VERSION,
            ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kubelet", "kube-proxy"),
            _KUBE_LDFLAGS,
        ),
        GoBinary("etcd", "etcd", "go.etcd.io/etcd/server/v3", "v3.6.16", ("etcd",)),
        GoBinary("kwok", "kwok", "sigs.k8s.io/kwok/cmd/kwok", "v0.8.0", ("kwok",)),
        GoBinary("kwokctl", "kwok", "sigs.k8s.io/kwok/cmd/kwokctl", "v0.8.0", ("kwokctl",)),
        # The cluster's DNS (CoreDNS with the kubernetes plugin), and the pods' sandbox process: both
        # run in images FROM scratch (tensorkiln_local.images.cluster).
        GoBinary("coredns", "coredns", ".", "v1.15.0", ("coredns",)),
        GoBinary("pause", "pause", ".", "v1.0.0", ("pause",)),
        GoBinary("helm", "helm", "helm.sh/helm/v3/cmd/helm", "v3.22.0", ("helm",)),
        # S3-compatible server (posix backend) for the engine registry's tests.
        GoBinary(
            "versitygw",
            "versitygw",
            "github.com/versity/versitygw/cmd/versitygw",
            "v1.8.0",
            ("versitygw",),
            "-X main.Version=v1.8.0",
        ),
        # The health Flux, kpt and cli-utils compute (kstatus), by the real library, for the GitOps test.
        GoBinary("kstatus", "kstatus", ".", "v0.37.2", ("kstatus",)),
        # cert-manager's controller and cainjector (one binary, by argv[0]), for the chart's
        # cert-manager mode test; main.go wires upstream's controllers (its cmd/ modules are not served).
        GoBinary(
            "certmanager",
            "certmanager",
            ".",
            "v1.21.2",
            ("cert-manager-controller", "cert-manager-cainjector"),
        ),
    )
}

# Go builds run at once, up to this many: each waits on module downloads and links on one core, so
# two or three side by side keep 2 cores busy (more only adds memory).
CONCURRENT_BUILDS = 3

# What the cluster itself needs; helm (`tensorkiln-local cluster build helm`) and versitygw (the S3
# registry tests) are built on demand.
CLUSTER_BINARIES = ("kube", "etcd", "kwok", "kwokctl", "coredns", "pause")


def _module_digest(module_dir: Path) -> str:
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        if (module_dir / name).exists():
            digest.update((module_dir / name).read_bytes())
    return digest.hexdigest()[:12]


def cached_path(binary: GoBinary) -> Path:
    module_dir = paths.GO_BUILD_DIR / binary.module_dir
    return paths.BIN_CACHE / f"{binary.name}-{binary.version}-{_module_digest(module_dir)}"


def build(binary: GoBinary) -> Path:
    """Return the cached binary, building it first when the cache lacks it."""
    target = cached_path(binary)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Its own name: a version's dots make with_suffix() cut it, and two builds may run at once.
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    ldflags = f"-s -w {binary.ldflags}".strip()
    print(f"building {binary.name} {binary.version} (first time only; minutes)", file=sys.stderr)
    subprocess.run(
        ["go", "build", "-trimpath", f"-ldflags={ldflags}", "-o", str(partial), binary.package],
        cwd=paths.GO_BUILD_DIR / binary.module_dir,
        env={**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"},
        check=True,
    )
    partial.rename(target)  # atomic: a killed build never leaves a half binary in the cache
    return target


def ensure(names: tuple[str, ...] = CLUSTER_BINARIES) -> Path:
    """Build what is missing (CONCURRENT_BUILDS at a time, in the order named) and link every
    command name into BIN_DIR; return BIN_DIR."""
    paths.BIN_DIR.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=CONCURRENT_BUILDS) as pool:
        built = dict(zip(names, pool.map(build, [BINARIES[name] for name in names]), strict=True))
    for name, path in built.items():
        for command in BINARIES[name].commands:
            link(path, paths.BIN_DIR / command)
    return paths.BIN_DIR


def link(source: Path, name: Path) -> None:
    """`name` -> `source`, replaced atomically when it points elsewhere."""
    if name.is_symlink() and Path(os.readlink(name)) == source:
        return
    name.parent.mkdir(parents=True, exist_ok=True)
    tmp = name.with_name(f".{name.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(source)
    tmp.replace(name)
