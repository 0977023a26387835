"""kube-proxy for the local cluster: one process for the machine, nftables mode.

Every real node of the local cluster shares this machine's network namespace, so one kube-proxy
routes Services for all of them (it runs as local-0's). Its client certificate names the user
`system:kube-proxy`, which default RBAC binds to system:node-proxier.
"""

from __future__ import annotations

import yaml

from tensorkiln_local.cluster import network, paths, pki, processes

STATE = paths.STATE_DIR / "kube-proxy"
PIDFILE = STATE / "kube-proxy.pid"
LOGFILE = STATE / "kube-proxy.log"


def config(kubeconfig_path: str, hostname: str) -> dict:
    """KubeProxyConfiguration: nftables; conntrack sysctls left alone (setting them needs
    CAP_SYS_RESOURCE-like rights this machine does not grant); metrics and health on loopback."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "nftables",
        "clientConnection": {"kubeconfig": kubeconfig_path},
        "hostnameOverride": hostname,
        "clusterCIDR": network.POD_CIDR,
        "conntrack": {"maxPerCore": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "metricsBindAddress": "127.0.0.1:10249",
        "healthzBindAddress": "127.0.0.1:10256",
    }


def start(api_server: str, hostname: str) -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    cert, key = STATE / "client.crt", STATE / "client.key"
    if pki.older_than(cert, paths.CLUSTER_CA_CERT):
        pki.write(paths.CLUSTER_CA_CERT, paths.CLUSTER_CA_KEY, pki.Identity("system:kube-proxy"), cert, key)
    kubeconfig = STATE / "kubeconfig"
    changed = processes.write_config(
        kubeconfig, yaml.safe_dump(pki.kubeconfig(api_server, paths.CLUSTER_CA_CERT, cert, key, "kube-proxy"))
    )
    text = yaml.safe_dump(config(str(kubeconfig), hostname), sort_keys=False)
    if (STATE / "config.yaml").exists() and (STATE / "config.yaml").read_text() != text:
        changed = True
    if changed:
        stop()  # it exits by itself when its configuration file is written
    processes.write_config(STATE / "config.yaml", text)
    processes.start([str(paths.BIN_DIR / "kube-proxy"), f"--config={STATE / 'config.yaml'}", "--v=1"], PIDFILE, LOGFILE)


def stop() -> bool:
    return processes.stop(PIDFILE)
