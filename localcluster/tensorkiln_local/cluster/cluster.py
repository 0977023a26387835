"""`tensorkiln-local cluster up|down|status|env`: the local cluster's lifecycle.

kwokctl (binary runtime) runs etcd, kube-apiserver, kube-controller-manager, kube-scheduler
and the kwok controller as local processes and writes their certificates and kubeconfig.
On top of that this module applies the CRDs and kwok's simulated GPU pools, starts the local
image registry (registry.py) and pushes the cluster's own images to it (pause, CoreDNS), sets up
the network (network.py), starts the real node local-0 (nodes.py: kubelet + containerd + runc),
kube-proxy and CoreDNS (dns.py), then Prometheus (prometheus.py).
"""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import yaml
from kubernetes import client
from kubernetes.dynamic import DynamicClient
from tensorkiln import kube

from tensorkiln_local.cluster import (
    binaries,
    connection,
    dns,
    engine_registry,
    kubeproxy,
    network,
    nodes,
    packages,
    paths,
    pools,
    processes,
    profiles,
    prometheus,
    registry,
)
from tensorkiln_local.images import build as images

LOCAL_NODE = nodes.FIRST
# What the API server's audit log records (ServiceAccounts' requests), and where kwokctl keeps it.
AUDIT_POLICY = paths.LOCALCLUSTER_DIR / "audit-policy.yaml"
AUDIT_LOG = paths.KWOK_CLUSTER_DIR / "logs" / "audit.log"


def audit_lines() -> list[str]:
    """Complete lines of the audit log and its rotated backup (the last line may be mid-write)."""
    lines = []
    for path in sorted(AUDIT_LOG.parent.glob("audit*.log")):
        text = path.read_text()
        lines += text[: text.rfind("\n") + 1].splitlines()
    return lines


def _kwokctl(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(paths.BIN_DIR / "kwokctl"), "--name", paths.CLUSTER_NAME, *args],
        check=check,
        text=True,
        capture_output=not check,
    )


def _cluster_exists() -> bool:
    return (paths.KWOK_CLUSTER_DIR / "kwok.yaml").exists()


def _alive(pidfile: Path) -> bool:
    """The process kwokctl recorded in `pidfile` (<cluster dir>/pids/) runs: one of that cluster's own
    binaries (<cluster dir>/bin/), not another process that got the pid since."""
    try:
        command = Path(f"/proc/{int(pidfile.read_text().strip())}/cmdline").read_bytes()
    except (OSError, ValueError):
        return False
    return f"{pidfile.parent.parent}/bin/".encode() in command


def _dead_components() -> list[str]:
    """Control-plane processes kwokctl started that are gone (e.g. a kube-controller-manager that
    exited on a lost leader lease while the machine was overloaded): kwokctl keeps their pids."""
    return [pidfile.stem for pidfile in sorted((paths.KWOK_CLUSTER_DIR / "pids").glob("*.pid")) if not _alive(pidfile)]


def other_running_cluster() -> str | None:
    """Another local cluster of this machine whose control plane runs (paths.CLUSTER_NAME: they share
    local-0's network, so one runs at a time), or None."""
    for directory in sorted((paths.KWOK_HOME / "clusters").glob("*")):
        if directory.name != paths.CLUSTER_NAME and any(map(_alive, (directory / "pids").glob("*.pid"))):
            return directory.name
    return None


RESTART_ATTEMPTS = 3


def _restart_stopped_components() -> None:
    """Start what kwokctl started and is gone, until nothing is. After the machine stopped, every
    component starts at once; an etcd replaying a large backend (40 s after a 1000-model benchmark)
    is not serving within the kube-apiserver's 20 s storage deadline, and that apiserver exits.
    The next start finds etcd serving."""
    for _ in range(RESTART_ATTEMPTS):
        dead = _dead_components()
        if not dead and _api_ready():
            return
        if dead:
            print(f"restarting the cluster's stopped components: {', '.join(dead)}", file=sys.stderr)
        _kwokctl("start", "cluster", "--wait", "60s")  # starts only what is not running


def _api_ready() -> bool:
    if not paths.KUBECONFIG.exists():
        return False
    try:
        with connection.api_client() as api:
            client.VersionApi(api).get_code(_request_timeout=3)
        return True
    except Exception:  # any failure means "not ready yet"; callers wait or restart
        return False


def _cluster_fingerprint(bin_dir: Path, names: list[str] | None = None) -> str:
    """What the cluster was created from: kwokctl applies its config and the audit policy only at
    creation. Only the cluster's own binaries count: building helm or versitygw later must not
    recreate it."""
    if names is None:
        names = [c for b in binaries.CLUSTER_BINARIES for c in binaries.BINARIES[b].commands]
    digest = hashlib.sha256(paths.KWOK_CONFIG.read_bytes())
    digest.update(AUDIT_POLICY.read_bytes())
    for name in sorted(names):
        digest.update(f"{name}={os.readlink(bin_dir / name)}".encode())
    return digest.hexdigest()


def _recorded_fingerprint(recorded: Path, bin_dir: Path, fingerprint: str) -> str:
    """The recorded fingerprint; one recorded over every link in bin_dir (before only the
    cluster's binaries counted) is rewritten as today's when it still matches."""
    text = recorded.read_text()
    if text != fingerprint and text == _cluster_fingerprint(bin_dir, [p.name for p in bin_dir.iterdir()]):
        recorded.write_text(fingerprint)
        return fingerprint
    return text


def _start_control_plane() -> None:
    bin_dir = binaries.ensure()
    fingerprint = _cluster_fingerprint(bin_dir)
    recorded = paths.STATE_DIR / "cluster-fingerprint"
    if _cluster_exists() and recorded.exists() and _recorded_fingerprint(recorded, bin_dir, fingerprint) != fingerprint:
        print(
            "localcluster/kwok.yaml, the audit policy or a binary changed since the cluster was created: recreating it",
            file=sys.stderr,
        )
        down()
    if _cluster_exists():
        _restart_stopped_components()
        return
    paths.STATE_DIR.mkdir(parents=True, exist_ok=True)
    recorded.write_text(fingerprint)
    _kwokctl(
        "--config",
        str(paths.KWOK_CONFIG),
        "create",
        "cluster",
        # No context in ~/.kube/config: kwokctl would make this cluster its current context, and the shell's
        # kubectl would then talk to whichever local cluster was created last (`cluster env` names the right one).
        "--kubeconfig",
        "",
        "--runtime",
        "binary",
        "--kube-apiserver-binary",
        str(bin_dir / "kube-apiserver"),
        "--kube-controller-manager-binary",
        str(bin_dir / "kube-controller-manager"),
        "--kube-scheduler-binary",
        str(bin_dir / "kube-scheduler"),
        "--etcd-binary",
        str(bin_dir / "etcd"),
        "--kwok-controller-binary",
        str(bin_dir / "kwok"),
        "--disable-qps-limits",
        "--kube-audit-policy",
        str(AUDIT_POLICY),
        "--wait",
        "120s",
    )


def apply_crds(dynamic: DynamicClient, crds: list[dict]) -> None:
    """Apply CRDs and wait until the API server serves them."""
    for crd in crds:
        kube.apply(dynamic, crd)
    ext = client.ApiextensionsV1Api(dynamic.client)

    def established() -> bool:
        for crd in crds:
            status = ext.read_custom_resource_definition(crd["metadata"]["name"]).status
            if not any(c.type == "Established" and c.status == "True" for c in status.conditions or []):
                return False
        return True

    processes.wait_until(established, "CRDs to be established", 60)


def _apply_pools(dynamic: DynamicClient, pool_file: Path) -> None:
    desired = pools.build_nodes(pools.load(pool_file))
    for node in desired:
        kube.apply(dynamic, {k: v for k, v in node.items() if k != "status"})
        kube.apply(dynamic, node, subresource="status")
    # Converge: simulated nodes no longer in the pool file go away.
    wanted = {node["metadata"]["name"] for node in desired}
    core = client.CoreV1Api(dynamic.client)
    for node in core.list_node(label_selector=pools.POOL_LABEL).items:
        if node.metadata.name not in wanted:
            core.delete_node(node.metadata.name)


def _stage_sample_models() -> None:
    try:
        from tensorkiln_local.cluster import ocr_models
    except ImportError:  # the test extra (rapidocr-onnxruntime) is not installed: no CPU samples
        print("rapidocr-onnxruntime not installed: CPU sample models not staged", file=sys.stderr)
        return
    ocr_models.stage(paths.SAMPLE_MODELS / "rapidocr")


def api_server() -> str:
    """The API server's address in the admin kubeconfig (on this machine)."""
    return yaml.safe_load(paths.KUBECONFIG.read_text())["clusters"][0]["cluster"]["server"]


def cluster_image(name: str) -> str:
    """A cluster image (pause, coredns) built and pushed to the local registry, pinned by digest."""
    built = images.build_all([name])[0]
    return images.push(built, registry.HOST, "local", tls_verify=False, compression=registry.COMPRESSION).pinned


def start_node(core: client.CoreV1Api, name: str, hardware_labels: bool = True) -> None:
    """Start (or keep) real node `name`; the registry and network must be up."""
    nodes.start(
        core,
        name,
        sandbox_image=cluster_image("pause"),
        registry_host=registry.HOST,
        api_server=api_server(),
        hardware_labels=hardware_labels,
    )


def stop_other(name: str) -> None:
    """Stop the local cluster `name` as `cluster stop` does (its state kept: its `cluster up` resumes it), in a
    process of its own: paths name this process's cluster."""
    print(f"stopping the local cluster {name!r}, which runs on local-0's network too (its state is kept; "
          f"`TENSORKILN_CLUSTER={name} tensorkiln-local cluster up` resumes it)", file=sys.stderr)  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("TENSORKILN_LOCAL_DATA", "TENSORKILN_STATE")}
    command = [sys.executable, "-m", "tensorkiln_local", "cluster", "stop"]
    subprocess.run(command, env=env | {"TENSORKILN_CLUSTER": name}, check=True)


def up(pool_file: Path | None = None, stop_others: bool = False, profile: str | None = None) -> None:
    """Create or restart the cluster and converge its pools (`pool_file`, else the profile's), CRDs, network
    and real node, in the shape of its profile (profiles.py: chosen at creation). Idempotent. Another local
    cluster that runs is stopped first with `stop_others` (make demo, make test: the README's commands one
    after the other), else refused."""
    while stop_others and (other := other_running_cluster()):
        stop_other(other)
    if other := other_running_cluster():
        raise SystemExit(
            f"the local cluster {other!r} runs on this machine, and local clusters share local-0's network: "
            f"stop it first with `TENSORKILN_CLUSTER={other} tensorkiln-local cluster stop` (it keeps its state; "
            f"`cluster up` resumes it), then start {paths.CLUSTER_NAME!r} again"
        )
    packages.ensure(packages.CLUSTER)
    shape = profiles.choose(profile)
    _stage_sample_models()
    _start_control_plane()
    processes.wait_until(_api_ready, "kube-apiserver", 120)
    registry.start()
    network.setup()
    with connection.api_client() as api:
        dynamic = DynamicClient(api)
        apply_crds(dynamic, [yaml.safe_load(p.read_text()) for p in sorted(paths.CRDS_DIR.glob("*.yaml"))])
        _apply_pools(dynamic, pool_file or shape.pools)
        start_node(client.CoreV1Api(api), LOCAL_NODE, hardware_labels=shape.hardware_labels)
        if shape.control_plane:  # as kubeadm does, through the API: a kubelet may not claim a role
            patch = {"metadata": {"labels": {profiles.CONTROL_PLANE_LABEL: ""}}}
            client.CoreV1Api(api).patch_node(LOCAL_NODE, patch)
        kubeproxy.start(api_server(), LOCAL_NODE)
        for obj in dns.build_objects(cluster_image("coredns"), {nodes.LOCAL_NODE_LABEL: "true"}):
            kube.apply(dynamic, obj)
    engine_registry.start()
    prometheus.start()
    print(f'cluster {paths.CLUSTER_NAME} is up; run: eval "$(tensorkiln-local cluster env)"')


def stop() -> None:
    """Stop every process of the cluster and keep its state, as a machine that is shut down or suspended
    does: Prometheus, kube-proxy, the real nodes (their containers die with them), the registry and the
    control plane. `up` starts it again as it was; Jobs whose deadline passed meanwhile are then failed."""
    prometheus.stop()
    kubeproxy.stop()
    engine_registry.stop()
    for name in nodes.existing():
        nodes.shut_down(name)
    registry.stop()
    if _cluster_exists():
        _kwokctl("stop", "cluster")
    print(f"cluster {paths.CLUSTER_NAME} stopped; `tensorkiln-local cluster up` starts it again")


def down() -> None:
    """Stop Prometheus, kube-proxy, the real nodes (their containers, mounts, cgroups
    and bridges go with them), the network rules and the registry; delete the control plane. The
    registry's storage and the built images stay: they are a cache. While another local cluster runs, the
    network it shares (local-0's bridge, the nftables tables) stays to it."""
    shared = other_running_cluster() is not None
    prometheus.stop()
    kubeproxy.stop()
    engine_registry.stop()
    for name in nodes.existing():
        nodes.remove(name, keep_bridge=shared)
    if not shared:
        network.teardown()
    registry.stop()
    if _cluster_exists():
        _kwokctl("delete", "cluster")
    print(f"cluster {paths.CLUSTER_NAME} deleted")


def status() -> int:
    """Print what runs; exit code 0 only when the API server answers."""
    ready = _api_ready()
    print(f"cluster:      {paths.CLUSTER_NAME} ({'ready' if ready else 'not running'})")
    print(f"kubeconfig:   {paths.KUBECONFIG}")
    for name, pidfile in (
        *((f"kubelet {n}", nodes.RealNode(n).pidfile("kubelet")) for n in nodes.existing() or [LOCAL_NODE]),
        *((f"containerd {n}", nodes.RealNode(n).pidfile("containerd")) for n in nodes.existing() or [LOCAL_NODE]),
        ("kube-proxy", kubeproxy.PIDFILE),
        ("registry", registry.PIDFILE),
        ("engine registry", engine_registry.PIDFILE),
        ("prometheus", prometheus.PIDFILE),
    ):
        pid = processes.pid_of(pidfile)
        print(f"{name + ':':<18} {'running, pid ' + str(pid) if pid else 'not running'}")
    if not ready:
        return 1
    with connection.api_client() as api:
        counts: dict[str, int] = {}
        for node in client.CoreV1Api(api).list_node().items:
            labels = node.metadata.labels or {}
            if labels.get(nodes.LOCAL_NODE_LABEL) == "true":
                kind = "cpu (real node: kubelet + containerd)"
            else:
                kind = labels.get("nvidia.com/gpu.product", "cpu") + " (simulated by kwok)"
            counts[kind] = counts.get(kind, 0) + 1
    for kind, count in sorted(counts.items()):
        print(f"nodes:        {count:>3} x {kind}")
    return 0


def env() -> str:
    """Shell lines that point kubectl and helm at the cluster (`eval "$(tensorkiln-local cluster env)"`)."""
    return (
        f"export KUBECONFIG={paths.KUBECONFIG}\nexport PATH={paths.BIN_DIR}:{Path(sys.executable).parent}:$PATH\n"
        f"export TENSORKILN_PROMETHEUS_URL={prometheus.url()}\n"
    )


def build(names: list[str]) -> None:
    """Build (or find cached) the named binaries; `helm` is built only when asked for."""
    binaries.ensure(tuple(names) or binaries.CLUSTER_BINARIES)
    print(paths.BIN_DIR)
