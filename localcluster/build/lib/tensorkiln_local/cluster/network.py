"""The local cluster's network on this machine: one bridge per real node, the forwarding it
needs, and a rule that keeps cluster traffic on the machine.

Pods get 10.244.N.0/24 on node N's bridge (nodes.py); Services get ClusterIPs in 10.96.0.0/16
(kwok.yaml), routed by kube-proxy's nftables rules (kubeproxy.py). The two bridges of two nodes
are both on this host, so the kernel routes between them. Nothing from the pod or Service ranges
may leave through the machine's uplink: there is no masquerade (nodes.cni_config), and table
`inet tensorkiln` drops such packets (and those to kwok's simulated pod addresses) at every
interface that holds a default route.

`teardown` removes the table, kube-proxy's tables and the bridges; the two sysctls set here
(IPv4 forwarding, bridged traffic through netfilter, which kube-proxy's Service NAT needs for a
pod reaching a Service backed by a pod on the same bridge) are machine-wide and stay set.
"""

from __future__ import annotations

import ipaddress
import subprocess
from pathlib import Path

POD_CIDR = "10.244.0.0/16"
SERVICE_CIDR = "10.96.0.0/16"  # kwok.yaml: service-cluster-ip-range
# The pod IPs kwok gives pods on its simulated nodes (kwok.yaml: cidr): nothing listens there, but
# Prometheus scrapes them, and those connections must not leave the machine either.
SIMULATED_POD_CIDR = "10.0.0.0/16"
CLUSTER_RANGES = (POD_CIDR, SERVICE_CIDR, SIMULATED_POD_CIDR)
CLUSTER_DNS = "10.96.0.10"
TABLE = "tensorkiln"
KUBE_PROXY_TABLES = (("ip", "kube-proxy"), ("ip6", "kube-proxy"))
SYSCTLS = {
    "net/ipv4/ip_forward": "1",
    "net/bridge/bridge-nf-call-iptables": "1",
}


def node_subnet(index: int) -> str:
    return str(list(ipaddress.ip_network(POD_CIDR).subnets(new_prefix=24))[index])


def node_gateway(index: int) -> str:
    return str(ipaddress.ip_network(node_subnet(index)).network_address + 1)


def uplinks(route_output: str) -> list[str]:
    """Interfaces holding a default route, from `ip -o route show default` (pure)."""
    found = []
    for line in route_output.splitlines():
        words = line.split()
        if "dev" in words and words[words.index("dev") + 1] not in found:
            found.append(words[words.index("dev") + 1])
    return found


def ruleset(uplink_names: list[str]) -> str:
    """`nft -f` input: table inet tensorkiln, dropping pod- and Service-range packets at the uplinks."""
    rules = "".join(
        f'    oifname "{dev}" ip saddr @cluster_ranges drop\n    oifname "{dev}" ip daddr @cluster_ranges drop\n'
        for dev in uplink_names
    )
    return (
        f"table inet {TABLE} {{\n"
        f"  set cluster_ranges {{\n    type ipv4_addr; flags interval\n"
        f"    elements = {{ {', '.join(CLUSTER_RANGES)} }}\n  }}\n"
        f"  chain keep_on_machine {{\n    type filter hook postrouting priority srcnat + 10; policy accept;\n"
        f"{rules}  }}\n}}\n"
    )


def _run(*argv: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=check, capture_output=True, text=True, input=stdin)


def setup() -> None:
    """Sysctls and the keep-on-machine table (replaced whole, so it follows a changed uplink)."""
    for key, value in SYSCTLS.items():
        Path("/proc/sys", key).write_text(value)
    routes = _run("ip", "-o", "route", "show", "default").stdout
    _run("nft", "delete", "table", "inet", TABLE, check=False)
    _run("nft", "-f", "-", stdin=ruleset(uplinks(routes)))


def add_node_bridge(bridge: str, address: str) -> None:
    """The node's bridge with its gateway address, up (the CNI bridge plugin then finds it)."""
    if _run("ip", "link", "show", bridge, check=False).returncode != 0:
        _run("ip", "link", "add", bridge, "type", "bridge")
    if f"inet {address}/" not in _run("ip", "-o", "-4", "addr", "show", "dev", bridge).stdout:
        _run("ip", "addr", "add", f"{address}/24", "dev", bridge)
    _run("ip", "link", "set", bridge, "up")


def remove_node_bridge(bridge: str) -> None:
    _run("ip", "link", "delete", bridge, check=False)


def teardown() -> None:
    """Remove this cluster's table and kube-proxy's (kube-proxy is stopped first)."""
    _run("nft", "delete", "table", "inet", TABLE, check=False)
    for family, table in KUBE_PROXY_TABLES:
        _run("nft", "delete", "table", family, table, check=False)
