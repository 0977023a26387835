"""The real nodes of the local cluster: one node agent (tensorkiln_local.node) per node name, each
running its pods as processes of this machine.

`cluster up` starts local-0. `tensorkiln-local node up local-1` adds a second real node on the same
machine: its own agent, state dir, loopback pod addresses (127.0.1.x; local-0's are 127.0.0.x) and
CPU-pool label (`tensorkiln.dev/cpu-pool: local-1`), so an Explicit hardware pool can serve the two
as two hardware classes (e2e/bench_cost.py). It is not started by `cluster up`: under Auto
discovery both nodes have the same CPU labels and form one class, and every CPU model would then
spread over both; `node down local-1` stops its agent (its pods' processes with it) and deletes the
Node, and the cluster's pod GC removes the pods bound to it.

A running agent is kept, unless its code (tensorkiln_local/node/) or its Python environment changed
since it was started (agent_code): then it is restarted, and the processes of its pods with it (a
restarted agent restarts them as the restart policy says; running Job pods fail, so do it between
test runs). The agent gets the cluster's CA to sign the certificate of its kubelet endpoint
(`kubectl logs`), which the API server verifies with the same CA (kwok.yaml); a CA other than the
running agent's (a recreated cluster) restarts it too.
"""

import hashlib
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client

import tensorkiln_local.node
from tensorkiln_local.cluster import paths, processes

FIRST = "local-0"
NAME = re.compile(r"^local-([0-9])$")  # one /24 of loopback pod addresses per node: 127.0.N.x


@dataclass(frozen=True)
class LocalNode:
    name: str

    @property
    def index(self) -> int:
        found = NAME.fullmatch(self.name)
        if found is None:
            raise ValueError(f"a real local node is named local-0 .. local-9, not {self.name!r}")
        return int(found.group(1))

    @property
    def state(self) -> Path:
        return paths.local_node_state(self.name)

    @property
    def pidfile(self) -> Path:
        return self.state / "agent.pid"

    @property
    def code_file(self) -> Path:
        return self.state / "agent.code"  # agent_code() of the running agent

    @property
    def log(self) -> Path:
        return self.state / "agent.log"

    @property
    def pod_ips(self) -> str:
        return f"127.0.{self.index}.10-127.0.{self.index}.250"


def agent_code() -> str:
    """A digest of the agent's source (tensorkiln_local/node/*.py) and of the Python environment it
    runs in: its pods (compile jobs, Triton) run that environment's tensorkiln, so a `cluster up`
    from another checkout restarts it on that checkout's code."""
    digest = hashlib.sha256(sys.prefix.encode() + b"\0")
    for source in sorted(Path(tensorkiln_local.node.__file__).parent.glob("*.py")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    if paths.CLUSTER_CA_CERT.exists():  # its serving certificate is signed by this CA
        digest.update(b"ca\0" + paths.CLUSTER_CA_CERT.read_bytes())
    return digest.hexdigest()


def start(core: client.CoreV1Api, name: str = FIRST, ready_within: float = 60) -> None:
    """Start (or keep, or restart on new code) the agent of real node `name`; wait until it is Ready."""
    node = LocalNode(name)
    node.state.mkdir(parents=True, exist_ok=True)
    code = agent_code()
    running = processes.pid_of(node.pidfile)
    recorded = node.code_file.read_text() if node.code_file.exists() else ""
    if running and recorded != code:
        print(
            f"the local node agent of {name} (pid {running}) runs other code than tensorkiln_local/node/ in"
            f" {sys.prefix} (or holds another cluster CA): restarting it; the processes of its pods restart with it",
            file=sys.stderr,
        )
        processes.stop(node.pidfile, grace_seconds=60)  # it stops its pods first (their grace, then 15 s each)
        running = None
    if not running:
        node.code_file.write_text(code)
    processes.start(
        [
            sys.executable, "-m", "tensorkiln_local.node",
            "--kubeconfig", str(paths.KUBECONFIG),
            "--node-name", name,
            "--state-dir", str(node.state),
            "--ca-cert", str(paths.CLUSTER_CA_CERT),
            "--ca-key", str(paths.CLUSTER_CA_KEY),
            "--pod-ips", node.pod_ips,
        ],
        node.pidfile,
        node.log,
    )  # fmt: skip

    def ready() -> bool:
        try:
            found = core.read_node(name)
        except client.ApiException:
            return False
        return any(c.type == "Ready" and c.status == "True" for c in found.status.conditions or [])

    deadline = time.monotonic() + ready_within
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {ready_within:.0f}s waiting for node {name} (log: {node.log})")
        time.sleep(1)


def stop(name: str) -> bool:
    """Stop the agent of `name` (it kills its pods' processes first); True if one ran."""
    return processes.stop(LocalNode(name).pidfile, grace_seconds=60)


def remove(core: client.CoreV1Api, name: str) -> None:
    """Stop the agent and delete the Node (local-0 stays: `cluster down` ends it with the cluster)."""
    if name == FIRST:
        raise ValueError(f"{FIRST} is the cluster's own node: `tensorkiln-local cluster down` removes it")
    stop(name)
    try:
        core.delete_node(name)
    except client.ApiException as error:
        if error.status != 404:
            raise


def running() -> list[str]:
    """Names of the real nodes whose agent runs on this machine."""
    names = [f"local-{i}" for i in range(10)]
    return [name for name in names if processes.pid_of(LocalNode(name).pidfile)]
