"""The local cluster's registries: Debian's `docker-registry` (the CNCF distribution registry 2.8), each a
plain process of this machine on plain HTTP.

- the image registry (IMAGES: localhost:5000, its storage in the cache: images outlive a cluster): images
  are pushed to it (skopeo) and every node's containerd pulls from it, exactly as from ghcr.io:
  `localhost:5000/tensorkiln/operator@sha256:...`;
- the engine registry (engine_registry.py), at local-0's gateway, where pods reach this machine.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tensorkiln_local.cluster import paths, processes

BINARY = "/usr/bin/docker-registry"
HOST = "localhost:5000"
# Layers new to this registry are pushed zstd-compressed (skopeo reuses a layer it holds already, gzip or
# not): every node's containerd (1.6) unpacks zstd, and it costs less CPU than gzip both to push and to
# unpack, on a first `make demo` that is bound by its CPU.
COMPRESSION = "zstd"


@dataclass(frozen=True)
class LocalRegistry:
    """A docker-registry serving `storage` on `address` (host:port), its config, pid and log under `state`."""

    name: str
    address: str
    storage: Path
    state: Path

    @property
    def pidfile(self) -> Path:
        return self.state / f"{self.name}.pid"

    @property
    def logfile(self) -> Path:
        return self.state / f"{self.name}.log"

    def config(self) -> dict:
        return {
            "version": 0.1,
            "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(self.storage)}, "delete": {"enabled": True}},
            "http": {"addr": self.address},
        }

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.address}/v2/", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def start(self) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        self.storage.mkdir(parents=True, exist_ok=True)
        (self.state / "config.yml").write_text(json.dumps(self.config(), indent=2))  # JSON is YAML
        processes.start([BINARY, "serve", str(self.state / "config.yml")], self.pidfile, self.logfile)
        processes.wait_until(self.ready, f"the {self.name} on {self.address} (log: {self.logfile})", 30, interval=0.5)

    def stop(self) -> None:
        processes.stop(self.pidfile)


IMAGES = LocalRegistry("registry", "127.0.0.1:5000", paths.CACHE_DIR / "registry", paths.STATE_DIR / "registry")
PIDFILE = IMAGES.pidfile
start, stop = IMAGES.start, IMAGES.stop
