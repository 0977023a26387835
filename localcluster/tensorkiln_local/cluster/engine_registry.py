"""The local cluster's engine registry: a second Debian `docker-registry` (the CNCF distribution registry),
where `make demo`'s compile pods push engines as OCI artifacts and its Triton pods pull them, as from a
user's ECR, GHCR or Harbor.

Apart from the image registry (registry.py, localhost:5000, which only this machine's containerd pulls
from): pods reach this machine at local-0's gateway, so this one listens there, on plain HTTP (the chart's
`registry.oci.insecure`) and without credentials. Its storage belongs to the cluster (LOCAL_DATA), not to
the cache: engines are this cluster's, as its API objects are.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from tensorkiln_local.cluster import network, paths, processes

# What `tensorkiln-local install --engine-registry` takes, the first the default: this registry, or a
# registry claim in each namespace (install.py).
KINDS = ("oci", "pvc")
BINARY = "/usr/bin/docker-registry"
PORT = 5001
REPOSITORY = "tensorkiln/engines"
STORAGE = paths.LOCAL_DATA / "engine-registry"
STATE = paths.STATE_DIR / "engine-registry"
PIDFILE = STATE / "engine-registry.pid"
LOGFILE = STATE / "engine-registry.log"


def host() -> str:
    """host:port as pods and this machine reach it: local-0's gateway."""
    return f"{network.node_gateway(0)}:{PORT}"


def uri() -> str:
    """The engine registry URI the operator is installed with."""
    return f"oci://{host()}/{REPOSITORY}"


def config() -> dict:
    return {
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(STORAGE)}, "delete": {"enabled": True}},
        "http": {"addr": host()},
    }


def _ready() -> bool:
    try:
        with urllib.request.urlopen(f"http://{host()}/v2/", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def start() -> None:
    """Start it on local-0's gateway (the node's bridge holds that address: start local-0 first)."""
    STATE.mkdir(parents=True, exist_ok=True)
    STORAGE.mkdir(parents=True, exist_ok=True)
    (STATE / "config.yml").write_text(json.dumps(config(), indent=2))  # JSON is YAML: the CLI loads no yaml
    processes.start([BINARY, "serve", str(STATE / "config.yml")], PIDFILE, LOGFILE)
    processes.wait_until(_ready, f"the engine registry on {host()} (log: {LOGFILE})", 30, interval=0.5)


def stop() -> None:
    processes.stop(PIDFILE)
