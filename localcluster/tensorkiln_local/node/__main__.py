"""`python -m tensorkiln_local.node`: the agent that makes one real node out of this machine.

    python -m tensorkiln_local.node --kubeconfig PATH --node-name local-0 --state-dir DIR \
        [--ca-cert CA.crt --ca-key CA.key] [--pod-ips 127.0.0.10-127.0.0.250]

Runs until SIGTERM/SIGINT, then kills the pods' processes (like a node shutdown) and exits
without touching the API: the node going NotReady is what Kubernetes expects. Logs go to
stderr; files go under DIR only (the kubernetes client's temporary certificate files too).
One agent per node name per machine (two would run every pod twice): a second one exits
with status 1. Two nodes on one machine need disjoint --pod-ips ranges (both are loopback
addresses, and each pod binds its own). With the cluster CA's certificate and key it serves the kubelet endpoint the API
server proxies `kubectl logs` to (kubelet_server.py).
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
import tempfile
import threading
from pathlib import Path

from . import ipam
from .agent import Agent
from .kube import Kube


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tensorkiln_local.node", description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--node-name", default="local-0")
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument("--ca-cert", type=Path, help="the cluster CA (signs the kubelet endpoint's certificate)")
    parser.add_argument("--ca-key", type=Path)
    parser.add_argument(
        "--pod-ips",
        type=ipam.parse_range,
        default=(ipam.FIRST, ipam.LAST),
        help=f"the loopback addresses this node gives its pods, FIRST-LAST (default {ipam.FIRST}-{ipam.LAST})",
    )
    args = parser.parse_args(argv)
    if (args.ca_cert is None) != (args.ca_key is None):
        parser.error("--ca-cert and --ca-key go together")

    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s [%(threadName)s] %(message)s"
    )
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # its retry warnings repeat ours
    state_dir = args.state_dir.resolve()
    (state_dir / "tmp").mkdir(parents=True, exist_ok=True)
    tempfile.tempdir = str(state_dir / "tmp")  # kubeconfig certificates are unpacked to temp files

    lock = socket.socket(socket.AF_UNIX)
    try:  # an abstract socket name is free again the moment its holder dies, however it dies
        lock.bind(f"\0tensorkiln-localnode-{args.node_name}")
    except OSError:
        logging.error("another local node agent for %s is running on this machine; exiting", args.node_name)
        return 1

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    ca = (args.ca_cert.resolve(), args.ca_key.resolve()) if args.ca_cert else None
    Agent(Kube.from_kubeconfig(args.kubeconfig), args.node_name, state_dir, ca, args.pod_ips).run(stop)
    logging.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
