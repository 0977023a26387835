"""Build the cluster's upstream binaries from pinned Go modules, once, into a cache.

One Go module, localcluster/go/cluster, pins every upstream project the cluster runs (Kubernetes,
etcd, kwok, CoreDNS, helm, cert-manager, kstatus), so minimal version selection gives them all one
version of each shared library (client-go, grpc, protobuf...) and one `go build` compiles each
shared package once for all of them. Separate modules compiled about twice as much Go source: four
versions of client-go, four of grpc. versitygw, which only the S3 tests run and which shares little,
keeps its own module.

A binary's cache key is its upstream version plus a digest of its module's go.mod/go.sum and of its
own sources there, so a pin change rebuilds and nothing else does.
"""

import hashlib
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tensorkiln_local.cluster import paths

KUBERNETES_VERSION = "v1.37.2"


@dataclass(frozen=True)
class GoBinary:
    """One binary built from a Go module under localcluster/go."""

    name: str
    module: str  # the module's directory under localcluster/go
    package: str  # an upstream command, or ./cmd/<name> of the module
    version: str  # the upstream release it is built from
    # Names this binary answers to (a multi-call binary dispatches on argv[0]).
    commands: tuple[str, ...]


# Link-time settings of each module's binaries (one `go build` builds them all). The version stamp
# concerns only what links k8s.io/component-base, at v0.37.2 in every binary of the module.
MODULE_LDFLAGS = {
    "cluster": " ".join(
        f"-X k8s.io/component-base/version.{key}={value}"
        for key, value in {
            "gitVersion": KUBERNETES_VERSION,
            "gitMajor": "1",
            "gitMinor": KUBERNETES_VERSION.split(".")[1],
            "gitTreeState": "clean",
        }.items()
    ),
    "versitygw": "-X main.Version=v1.8.0",
}

BINARIES = {
    b.name: b
    for b in (
        GoBinary(
            "kube",
            "cluster",
            "./cmd/kube",
            KUBERNETES_VERSION,
            ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kubelet", "kube-proxy"),
        ),
        GoBinary("etcd", "cluster", "go.etcd.io/etcd/server/v3", "v3.7.2", ("etcd",)),
        GoBinary("kwok", "cluster", "sigs.k8s.io/kwok/cmd/kwok", "v0.8.0", ("kwok",)),
        GoBinary("kwokctl", "cluster", "sigs.k8s.io/kwok/cmd/kwokctl", "v0.8.0", ("kwokctl",)),
        # The cluster's DNS (CoreDNS with the kubernetes plugin), and the pods' sandbox process: both
        # run in images FROM scratch (tensorkiln_local.images.cluster).
        GoBinary("coredns", "cluster", "./cmd/coredns", "v1.15.0", ("coredns",)),
        GoBinary("pause", "cluster", "./cmd/pause", "v1.0.0", ("pause",)),
        GoBinary("helm", "cluster", "helm.sh/helm/v3/cmd/helm", "v3.22.0", ("helm",)),
        # The health Flux, kpt and cli-utils compute (kstatus), by the real library, for the GitOps test.
        GoBinary("kstatus", "cluster", "./cmd/kstatus", "v0.37.2", ("kstatus",)),
        # cert-manager's controller and cainjector (one binary, by argv[0]), for the chart's
        # cert-manager mode test; its main.go wires upstream's controllers (its cmd/ modules are not served).
        GoBinary(
            "certmanager",
            "cluster",
            "./cmd/certmanager",
            "v1.21.2",
            ("cert-manager-controller", "cert-manager-cainjector"),
        ),
        # S3-compatible server (posix backend) for the engine registry's tests.
        GoBinary("versitygw", "versitygw", "github.com/versity/versitygw/cmd/versitygw", "v1.8.0", ("versitygw",)),
    )
}

# The compiler's garbage collector runs a quarter as often as by default: client-go compiled in 12% less
# CPU time (124 against 141 CPU-s, cold), for 1.4 times the memory (660 MB at most). A GOGC of the caller wins.
COMPILER_GOGC = "400"
# The linker drops the symbol table and DWARF (-s -w), so the compiler writes no DWARF either: client-go
# compiled in 15% less CPU time (105 against 123 CPU-s, cold) and 15% less memory. Stack traces read the
# pclntab, which stays.
COMPILER_FLAGS = "all=-dwarf=false"

# What the cluster itself needs; helm (`tensorkiln-local cluster build helm`) and versitygw (the S3
# registry tests) are built on demand.
CLUSTER_BINARIES = ("kube", "etcd", "kwok", "kwokctl", "coredns", "pause")


def module_dir(binary: GoBinary) -> Path:
    return paths.GO_MODULES_DIR / binary.module


def _digest(binary: GoBinary) -> str:
    root = module_dir(binary)
    digest = hashlib.sha256()
    own = sorted((root / binary.package).glob("*.go")) if binary.package.startswith("./") else []
    for path in [root / "go.mod", root / "go.sum", *own]:
        if path.exists():
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def cached_path(binary: GoBinary) -> Path:
    return paths.BIN_CACHE / f"{binary.name}-{binary.version}-{_digest(binary)}"


def output_name(package: str) -> str:
    """The file `go build -o DIR/` writes a command package to: its last path element, or the one
    before a major-version suffix (go.etcd.io/etcd/server/v3 -> server)."""
    parts = package.rstrip("/").split("/")
    return parts[-2] if len(parts) > 1 and re.fullmatch(r"v[2-9][0-9]*", parts[-1]) else parts[-1]


def _go_build(module: str, wanted: list[GoBinary]) -> None:
    """Build `wanted`, all of one module, in one `go build`: its packages compile once for all."""
    paths.BIN_CACHE.mkdir(parents=True, exist_ok=True)
    names = ", ".join(b.name for b in wanted)
    print(f"building {names} from localcluster/go/{module} (first time only; minutes)", file=sys.stderr)
    # Built beside the cache, then renamed into it: a killed build never leaves a half binary there.
    with tempfile.TemporaryDirectory(prefix=f".{module}-", dir=paths.BIN_CACHE) as out:
        ldflags = f"-s -w {MODULE_LDFLAGS.get(module, '')}".strip()
        subprocess.run(
            [
                "go",
                "build",
                "-trimpath",
                f"-gcflags={COMPILER_FLAGS}",
                f"-ldflags={ldflags}",
                "-o",
                f"{out}/",
                *(b.package for b in wanted),
            ],
            cwd=paths.GO_MODULES_DIR / module,
            env={"GOGC": COMPILER_GOGC, **os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"},
            check=True,
        )
        for binary in wanted:
            Path(out, output_name(binary.package)).rename(cached_path(binary))


def build_all(wanted: list[GoBinary]) -> dict[str, Path]:
    """Every binary of `wanted`, cached; those missing are built, one `go build` per module, the
    modules side by side."""
    by_module: dict[str, list[GoBinary]] = defaultdict(list)
    for binary in wanted:
        if not cached_path(binary).exists():
            by_module[binary.module].append(binary)
    if by_module:
        with ThreadPoolExecutor(max_workers=len(by_module)) as pool:
            for done in [pool.submit(_go_build, module, group) for module, group in by_module.items()]:
                done.result()
    return {binary.name: cached_path(binary) for binary in wanted}


def build(binary: GoBinary) -> Path:
    """Return the cached binary, building it first when the cache lacks it."""
    return build_all([binary])[binary.name]


def ensure(names: tuple[str, ...] = CLUSTER_BINARIES) -> Path:
    """Build what is missing and link every command name into BIN_DIR; return BIN_DIR."""
    paths.BIN_DIR.mkdir(parents=True, exist_ok=True)
    for name, path in build_all([BINARIES[name] for name in names]).items():
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
