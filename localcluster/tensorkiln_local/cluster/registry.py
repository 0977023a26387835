"""The local image registry: Debian's `docker-registry` (the CNCF distribution registry 2.8),
run as a plain process on localhost:5000, its storage in the cache (images outlive a cluster).

Images are pushed to it (skopeo) and every node's containerd pulls from it over plain HTTP,
exactly as from ghcr.io: `localhost:5000/tensorkiln/operator@sha256:...`.
"""

from __future__ import annotations

import urllib.error
import urllib.request

import yaml

from tensorkiln_local.cluster import paths, processes

BINARY = "/usr/bin/docker-registry"
HOST = "localhost:5000"
# Layers new to this registry are pushed zstd-compressed (skopeo reuses a layer it holds already, gzip or
# not): every node's containerd (1.6) unpacks zstd, and it costs less CPU than gzip both to push and to
# unpack, on a first `make demo` that is bound by its CPU.
COMPRESSION = "zstd"
ADDRESS = "127.0.0.1:5000"
STORAGE = paths.CACHE_DIR / "registry"
STATE = paths.STATE_DIR / "registry"
PIDFILE = STATE / "registry.pid"
LOGFILE = STATE / "registry.log"


def config() -> dict:
    return {
        "version": 0.1,
        "log": {"level": "warn"},
        "storage": {"filesystem": {"rootdirectory": str(STORAGE)}, "delete": {"enabled": True}},
        "http": {"addr": ADDRESS},
    }


def _ready() -> bool:
    try:
        with urllib.request.urlopen(f"http://{ADDRESS}/v2/", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def start() -> None:
    STATE.mkdir(parents=True, exist_ok=True)
    STORAGE.mkdir(parents=True, exist_ok=True)
    (STATE / "config.yml").write_text(yaml.safe_dump(config()))
    processes.start([BINARY, "serve", str(STATE / "config.yml")], PIDFILE, LOGFILE)
    processes.wait_until(_ready, f"the image registry on {ADDRESS} (log: {LOGFILE})", 30, interval=0.5)


def stop() -> None:
    processes.stop(PIDFILE)
