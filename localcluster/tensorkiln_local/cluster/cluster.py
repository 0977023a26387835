"""`tensorkiln-local cluster up|down|status|env`: the local cluster's lifecycle.

kwokctl (binary runtime) runs etcd, kube-apiserver, kube-controller-manager, kube-scheduler
and the kwok controller as local processes and writes their certificates and kubeconfig.
On top of that this module applies the simulated node pools and the CRDs and starts the
local node agent for the real node local-0 (tensorkiln_local.cluster.localnodes, which also adds
and removes further real nodes), then Prometheus (tensorkiln_local.cluster.prometheus).
"""

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml
from kubernetes import client
from kubernetes.dynamic import DynamicClient
from tensorkiln import kube

from tensorkiln_local.cluster import binaries, localnodes, paths, pools, processes, prometheus
from tensorkiln_local.operator_process import PIDFILE as OPERATOR_PIDFILE

LOCAL_NODE = localnodes.FIRST
AGENT_PIDFILE = localnodes.LocalNode(LOCAL_NODE).pidfile
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


def _dead_components() -> list[str]:
    """Control-plane processes kwokctl started that are gone (e.g. a kube-controller-manager that
    exited on a lost leader lease while the machine was overloaded): kwokctl keeps their pids."""
    dead = []
    for pidfile in sorted((paths.KWOK_CLUSTER_DIR / "pids").glob("*.pid")):
        try:
            os.kill(int(pidfile.read_text().strip()), 0)
        except (ValueError, ProcessLookupError):
            dead.append(pidfile.stem)
        except PermissionError:  # alive, someone else's
            pass
    return dead


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
        with kube.api_client(str(paths.KUBECONFIG)) as api:
            client.VersionApi(api).get_code(_request_timeout=3)
        return True
    except Exception:  # any failure means "not ready yet"; callers wait or restart
        return False


def _wait(predicate, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(1)


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


def _apply_crds(dynamic: DynamicClient) -> None:
    crds = [yaml.safe_load(p.read_text()) for p in sorted(paths.CRDS_DIR.glob("*.yaml"))]
    for crd in crds:
        kube.apply(dynamic, crd)
    ext = client.ApiextensionsV1Api(dynamic.client)

    def established() -> bool:
        for crd in crds:
            status = ext.read_custom_resource_definition(crd["metadata"]["name"]).status
            if not any(c.type == "Established" and c.status == "True" for c in status.conditions or []):
                return False
        return True

    _wait(established, "CRDs to be established", 60)


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


def up(pool_file: Path = paths.DEFAULT_POOLS) -> None:
    """Create or restart the cluster and converge its pools, CRDs and local node. Idempotent."""
    _stage_sample_models()
    _start_control_plane()
    _wait(_api_ready, "kube-apiserver", 120)
    with kube.api_client(str(paths.KUBECONFIG)) as api:
        dynamic = DynamicClient(api)
        _apply_crds(dynamic)
        _apply_pools(dynamic, pool_file)
        localnodes.start(client.CoreV1Api(api), LOCAL_NODE)
    prometheus.start()
    print(f'cluster {paths.CLUSTER_NAME} is up; run: eval "$(tensorkiln-local cluster env)"')


def down() -> None:
    """Stop the operator, the local node agent, Prometheus and the control plane; delete the cluster."""
    processes.stop(OPERATOR_PIDFILE)
    for name in localnodes.running():
        localnodes.stop(name)
    prometheus.stop()
    if _cluster_exists():
        _kwokctl("delete", "cluster")
    print(f"cluster {paths.CLUSTER_NAME} deleted")


def status() -> int:
    """Print what runs; exit code 0 only when the API server answers."""
    ready = _api_ready()
    print(f"cluster:      {paths.CLUSTER_NAME} ({'ready' if ready else 'not running'})")
    print(f"kubeconfig:   {paths.KUBECONFIG}")
    for name, pidfile in (
        *((f"node {n}", localnodes.LocalNode(n).pidfile) for n in localnodes.running() or [LOCAL_NODE]),
        ("operator", OPERATOR_PIDFILE),
        ("prometheus", prometheus.PIDFILE),
    ):
        pid = processes.pid_of(pidfile)
        print(f"{name + ':':<13} {'running, pid ' + str(pid) if pid else 'not running'}")
    if not ready:
        return 1
    with kube.api_client(str(paths.KUBECONFIG)) as api:
        counts: dict[str, int] = {}
        for node in client.CoreV1Api(api).list_node().items:
            labels = node.metadata.labels or {}
            if labels.get("tensorkiln.dev/local-node") == "true":
                kind = "cpu (real node)"
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
