"""The local cluster's real nodes: an upstream kubelet with its own containerd (Debian's, with
runc) per node, on a CNI bridge of its own.

`cluster up` starts local-0; `tensorkiln-local node up local-1` adds a second real node on the
same machine. Each node N has, all named after it and removed by `cluster down`:

- a bridge `tk-local-N` holding 10.244.N.1/24: the node's InternalIP, where its kubelet serves
  (10250, with a certificate the cluster CA signs); its pods get 10.244.N.x from host-local IPAM;
- a containerd with its own root, state and socket, CNI configuration and sandbox (pause) image,
  pulling from the local image registry over plain HTTP (localhost only);
- a kubelet with its own root directory, cgroup root `/<cluster>-local-N` (cgroupfs driver;
  cgroup v1 here) and x509 client certificate (system:node:local-N); webhook authentication and
  authorization, no anonymous access;
- the labels a node of this machine truthfully has: its CPU's NFD labels, `tensorkiln.dev/local-node`
  and `tensorkiln.dev/cpu-pool: local-N` (two nodes of one machine have the same CPU labels, one
  hardware class under Auto discovery; an Explicit pool can tell them apart by this label).

The builders (`containerd_config`, `cni_config`, `kubelet_config`) are pure and unit-tested.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import yaml
from kubernetes import client
from tensorkiln_api.cpuinfo import cpu_labels, parse_cpuinfo

from tensorkiln_local.cluster import network, paths, pki, processes

FIRST = "local-0"
NAME = re.compile(r"^local-([0-9])$")
CNI_BIN_DIR = "/usr/lib/cni"  # Debian's containernetworking-plugins
CONTAINERD = "/usr/bin/containerd"
RUNC = "/usr/sbin/runc"
KUBELET_PORT = 10250
CPU_POOL_LABEL = "tensorkiln.dev/cpu-pool"
LOCAL_NODE_LABEL = "tensorkiln.dev/local-node"
CGROUP_V1_ROOT = Path("/sys/fs/cgroup")
# Every node's containerd and kubelet socket and runtime state (tmpfs): one directory per node.
RUN_DIR = Path("/run") / paths.CLUSTER_NAME


@dataclass(frozen=True)
class RealNode:
    name: str

    @property
    def index(self) -> int:
        found = NAME.fullmatch(self.name)
        if found is None:
            raise ValueError(f"a real local node is named local-0 .. local-9, not {self.name!r}")
        return int(found.group(1))

    @property
    def subnet(self) -> str:
        return network.node_subnet(self.index)

    @property
    def ip(self) -> str:
        """The bridge's own address: the node's InternalIP and its pods' gateway."""
        return network.node_gateway(self.index)

    @property
    def bridge(self) -> str:
        return f"tk-{self.name}"

    @property
    def cgroup_root(self) -> str:
        return f"/{paths.CLUSTER_NAME}-{self.name}"  # the cluster's own: another's pods are never its

    @property
    def state(self) -> Path:
        return paths.STATE_DIR / "nodes" / self.name

    @property
    def run(self) -> Path:
        return RUN_DIR / self.name

    @property
    def containerd_socket(self) -> Path:
        return self.run / "containerd.sock"

    @property
    def kubelet_root(self) -> Path:
        return self.state / "kubelet"

    def pidfile(self, component: str) -> Path:
        return self.state / f"{component}.pid"

    def log(self, component: str) -> Path:
        return self.state / f"{component}.log"


def containerd_config(node: RealNode, sandbox_image: str, registry_host: str) -> str:
    """containerd 1.6's config (version 2): its own root, state and socket; the CRI plugin as the
    field notes found it works on this machine (runc, cgroupfs, no AppArmor, no hugetlb, no
    lowering of oom_score_adj without CAP_SYS_RESOURCE); the node's CNI configuration; pulls from
    the local registry over plain HTTP."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{node.state / "containerd"}"
state = "{node.run / "containerd"}"

[grpc]
  address = "{node.containerd_socket}"

[ttrpc]
  address = "{node.containerd_socket}.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{node.state / "containerd-opt"}"

[{cri}]
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  disable_hugetlb_controller = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  # Pods' network namespaces under the node's own state (not /var/run/netns), which `remove` unmounts.
  netns_mounts_under_state_dir = true

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  BinaryName = "{RUNC}"

[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{node.state / "cni" / "net.d"}"

[{cri}.registry.mirrors."{registry_host}"]
  endpoint = ["http://{registry_host}"]
"""


def cni_config(node: RealNode) -> dict:
    """A bridge network on the node's own bridge and subnet. No IP masquerade: pod traffic never
    leaves the machine (network.py drops it at the uplink). Hairpin: a pod reaches itself through
    a Service."""
    return {
        "cniVersion": "1.0.0",
        "name": f"tensorkiln-{node.name}",
        "plugins": [
            {
                "type": "bridge",
                "bridge": node.bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": node.subnet, "gateway": node.ip}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(node.state / "cni" / "ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kubelet_config(node: RealNode, ca_cert: Path, cluster_dns: str) -> dict:
    """KubeletConfiguration: x509 client CA and webhook authentication, webhook authorization
    (the API server decides), cgroup v1 with the cgroupfs driver under the node's own cgroup root,
    its own ports on its own address, the cluster DNS, and eviction thresholds low enough for a
    development machine."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node.ip,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": node.ip,
        "healthzPort": 10248,
        "tlsCertFile": str(node.state / "pki" / "kubelet-serving.crt"),
        "tlsPrivateKeyFile": str(node.state / "pki" / "kubelet-serving.key"),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_cert)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{node.containerd_socket}",
        "imageServiceEndpoint": f"unix://{node.containerd_socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node.cgroup_root,
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        # This machine: cgroup v1 hybrid (1.35+ refuses it unless told), swap may be on, the
        # kernel's defaults are not the kubelet's, and oom_score_adj cannot be lowered.
        "failCgroupV1": False,
        "failSwapOn": False,
        "protectKernelDefaults": False,
        "oomScoreAdj": 0,
        "clusterDNS": [cluster_dns],
        "clusterDomain": "cluster.local",
        # Pods resolve cluster names only: the host's resolvers and search domains stay out.
        "resolvConf": str(node.state / "resolv.conf"),
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 95,
        "imageGCLowThresholdPercent": 90,
        "serializeImagePulls": False,
        "rotateCertificates": False,
        "staticPodPath": "",
        "shutdownGracePeriod": "0s",
    }


def node_labels(cpuinfo: str, name: str, hardware_labels: bool = True) -> dict[str, str]:
    """What the kubelet registers the node with beyond its own labels (hostname, os, arch); without
    `hardware_labels` (a kind-like cluster: no NFD), the local cluster's placement label alone."""
    if not hardware_labels:
        return {LOCAL_NODE_LABEL: "true"}
    return {
        LOCAL_NODE_LABEL: "true",
        CPU_POOL_LABEL: name,
        "node.kubernetes.io/instance-type": "local",
        **cpu_labels(parse_cpuinfo(cpuinfo)),
    }


def _cgroup_hierarchies() -> list[Path]:
    """The mounted cgroup v1 hierarchies (cpu, memory, ...), or the v2 root."""
    if (CGROUP_V1_ROOT / "cgroup.controllers").exists():
        return [CGROUP_V1_ROOT]
    return [p for p in CGROUP_V1_ROOT.iterdir() if p.is_dir() and not p.is_symlink()]


def _prepare(node: RealNode, sandbox_image: str, registry_host: str, api_server: str) -> bool:
    """Write the node's configuration and certificates; True if any of it changed (its containerd
    and kubelet read them at start only)."""
    for directory in (node.state / "pki", node.run, node.kubelet_root):
        directory.mkdir(parents=True, exist_ok=True)
    certs = node.state / "pki"
    ca_cert, ca_key = paths.CLUSTER_CA_CERT, paths.CLUSTER_CA_KEY
    renewed = pki.older_than(certs / "kubelet-client.crt", ca_cert)  # a recreated cluster has a new CA
    if renewed:
        pki.write(ca_cert, ca_key, pki.Identity(f"system:node:{node.name}", ("system:nodes",)),
                  certs / "kubelet-client.crt", certs / "kubelet-client.key")  # fmt: skip
        pki.write(ca_cert, ca_key, pki.Identity(node.name, (), (node.name,), (node.ip,), server=True),
                  certs / "kubelet-serving.crt", certs / "kubelet-serving.key")  # fmt: skip
    kubeconfig = pki.kubeconfig(api_server, ca_cert, certs / "kubelet-client.crt", certs / "kubelet-client.key",
                                f"system:node:{node.name}")  # fmt: skip
    files = {
        "containerd.toml": containerd_config(node, sandbox_image, registry_host),
        "cni/net.d/10-bridge.conflist": json.dumps(cni_config(node), indent=2),
        "resolv.conf": "",
        "kubelet.yaml": yaml.safe_dump(kubelet_config(node, ca_cert, network.CLUSTER_DNS), sort_keys=False),
        "kubelet.kubeconfig": yaml.safe_dump(kubeconfig),
    }
    changed = [processes.write_config(node.state / name, text) for name, text in files.items()]
    for hierarchy in _cgroup_hierarchies():
        (hierarchy / node.cgroup_root.lstrip("/")).mkdir(exist_ok=True)
    return renewed or any(changed)


def start(core: client.CoreV1Api, name: str, *, sandbox_image: str, registry_host: str, api_server: str,
          ready_within: float = 120, hardware_labels: bool = True) -> None:  # fmt: skip
    """Start (or keep) the node's bridge, containerd and kubelet; wait until the Node is Ready."""
    node = RealNode(name)
    network.add_node_bridge(node.bridge, node.ip)
    if _prepare(node, sandbox_image, registry_host, api_server):
        # Restarted to read it: containers outlive both (containerd's shims hold them).
        processes.stop(node.pidfile("kubelet"))
        processes.stop(node.pidfile("containerd"))
    processes.start([CONTAINERD, "--config", str(node.state / "containerd.toml")],
                    node.pidfile("containerd"), node.log("containerd"))  # fmt: skip
    processes.wait_until(
        lambda: processes.accepts_connections(node.containerd_socket),
        f"containerd of {name} (log: {node.log('containerd')})",
        30,
    )
    cpuinfo = Path("/proc/cpuinfo").read_text()
    labels = ",".join(f"{k}={v}" for k, v in node_labels(cpuinfo, name, hardware_labels).items())
    # A Node object outlives its kubelet: after a (re)start only this kubelet's heartbeat counts.
    running = processes.pid_of(node.pidfile("kubelet")) is not None
    started = datetime.min.replace(tzinfo=UTC) if running else datetime.now(UTC).replace(microsecond=0)
    processes.start(
        [
            str(paths.BIN_DIR / "kubelet"),
            f"--config={node.state / 'kubelet.yaml'}",
            f"--kubeconfig={node.state / 'kubelet.kubeconfig'}",
            f"--root-dir={node.kubelet_root}",
            f"--hostname-override={name}",
            f"--node-ip={node.ip}",
            f"--node-labels={labels}",
            "--v=1",
        ],
        node.pidfile("kubelet"),
        node.log("kubelet"),
    )

    def ready() -> bool:
        if processes.pid_of(node.pidfile("kubelet")) is None:
            raise RuntimeError(f"the kubelet of {name} exited; its log: {node.log('kubelet')}")
        try:
            found = core.read_node(name)
        except client.ApiException:
            return False
        return any(
            c.type == "Ready" and c.status == "True" and c.last_heartbeat_time >= started
            for c in found.status.conditions or []
        )

    processes.wait_until(ready, f"node {name} to be Ready (log: {node.log('kubelet')})", ready_within)


def _mounts_under(root: Path) -> list[str]:
    """Mount points at or below root, deepest first."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        mount_point = line.split()[1].replace("\\040", " ")
        if mount_point == str(root) or mount_point.startswith(f"{root}/"):
            found.append(mount_point)
    return sorted(found, key=len, reverse=True)


def _remove_cgroups(root: str) -> None:
    """Remove the node's cgroup tree in every hierarchy, leaves first (empty once its pods are gone)."""
    for hierarchy in _cgroup_hierarchies():
        top = hierarchy / root.lstrip("/")
        if not top.exists():
            continue
        for directory in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            _rmdir(directory)
        _rmdir(top)


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except OSError as error:
        print(f"could not remove cgroup {path}: {error}", file=sys.stderr)


def _kill_containers(node: RealNode) -> None:
    """Stop every container of the node (containerd's shims outlive containerd and the kubelet)."""
    socket = str(node.containerd_socket)
    if not node.containerd_socket.exists():
        return
    ctr = ["ctr", "--address", socket, "--namespace", "k8s.io"]
    listed = subprocess.run([*ctr, "tasks", "list", "--quiet"], capture_output=True, text=True, timeout=30)
    for task in listed.stdout.split():
        subprocess.run([*ctr, "tasks", "kill", "--signal", "SIGKILL", task], capture_output=True, timeout=30)
    deadline = time.monotonic() + 15
    for task in listed.stdout.split():
        while time.monotonic() < deadline:
            if subprocess.run([*ctr, "tasks", "delete", task], capture_output=True, timeout=30).returncode == 0:
                break
            time.sleep(0.5)


def stop(name: str) -> bool:
    """Stop the node's kubelet and containers and containerd; leave its state. True if it ran."""
    node = RealNode(name)
    ran = processes.stop(node.pidfile("kubelet"))
    if processes.pid_of(node.pidfile("containerd")):
        _kill_containers(node)
    ran = processes.stop(node.pidfile("containerd")) or ran
    return ran


def shut_down(name: str) -> None:
    """Stop the node as a machine shutdown does: its processes and containers end, its mounts go (the pods'
    volumes, root filesystems and network namespaces, whose veths go with them) and so does its runtime
    directory (/run is a tmpfs); its state stays. Started again, the kubelet recreates its pods."""
    node = RealNode(name)
    stop(name)
    for mount_point in _mounts_under(node.state) + _mounts_under(node.run):
        subprocess.run(["umount", "--lazy", mount_point], check=False)
    shutil.rmtree(node.run, ignore_errors=True)


def remove(name: str, keep_bridge: bool = False) -> None:
    """Stop the node and remove everything that is its: mounts, cgroups, bridge (unless `keep_bridge`: the
    same-named node of another local cluster runs on it), state."""
    node = RealNode(name)
    shut_down(name)
    _remove_cgroups(node.cgroup_root)
    if not keep_bridge:
        network.remove_node_bridge(node.bridge)
    shutil.rmtree(node.state, ignore_errors=True)


def delete(core: client.CoreV1Api, name: str) -> None:
    """`node down`: remove the node and its Node object (its pods are then garbage-collected)."""
    if name == FIRST:
        raise ValueError(f"{FIRST} is the cluster's own node: `tensorkiln-local cluster down` removes it")
    remove(name)
    try:
        core.delete_node(name)
    except client.ApiException as error:
        if error.status != 404:
            raise


def existing() -> list[str]:
    """Names of the real nodes with state on this machine."""
    root = paths.STATE_DIR / "nodes"
    return sorted(p.name for p in root.iterdir() if NAME.fullmatch(p.name)) if root.exists() else []


def running() -> list[str]:
    return [name for name in existing() if processes.pid_of(RealNode(name).pidfile("kubelet"))]


def signal_container(pod: client.V1Pod, container: str, signal_name: str = "SIGKILL") -> None:
    """Send a signal to a container's process through its node's containerd (`ctr task kill`), as
    the kernel's OOM killer or a crash would end it: the kubelet sees the exit and acts on it."""
    status = next((s for s in pod.status.container_statuses or [] if s.name == container), None)
    if status is None or not (status.container_id or "").startswith("containerd://"):
        raise RuntimeError(f"pod {pod.metadata.name}: container {container} has not started")
    node = RealNode(pod.spec.node_name)
    task = status.container_id.removeprefix("containerd://")
    subprocess.run(
        ["ctr", "--address", str(node.containerd_socket), "--namespace", "k8s.io", "tasks", "kill",
         "--signal", signal_name, task],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip


def container_cpu_seconds(api_client: client.ApiClient, pod: client.V1Pod, container: str) -> float | None:
    """CPU time a container has used, in seconds, from its node's kubelet (the stats summary the
    metrics-server reads, through the API server's node proxy); None before the kubelet has it."""
    reply = client.CoreV1Api(api_client).connect_get_node_proxy_with_path(
        pod.spec.node_name, "stats/summary", _preload_content=False
    )
    stats = json.loads(reply.data)
    for found in stats.get("pods", []):
        if found.get("podRef", {}).get("uid") == pod.metadata.uid:
            for entry in found.get("containers", []):
                if entry.get("name") == container and "usageCoreNanoSeconds" in entry.get("cpu", {}):
                    return entry["cpu"]["usageCoreNanoSeconds"] / 1e9
    return None
