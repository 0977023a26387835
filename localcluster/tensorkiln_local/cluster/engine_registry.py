"""The local cluster's engine registry: a second `docker-registry` (registry.py), where `make demo`'s compile
pods push engines as OCI artifacts and its Triton pods pull them, as from a user's ECR, GHCR or Harbor.

Apart from the image registry (localhost:5000, which only this machine's containerd pulls from): pods reach
this machine at local-0's gateway, so this one listens there, on plain HTTP (the chart's
`registry.oci.insecure`) and without credentials. Its storage belongs to the cluster (LOCAL_DATA), not to the
cache: engines are this cluster's, as its API objects are. Start it once local-0's bridge holds the gateway.
"""

from __future__ import annotations

from tensorkiln_local.cluster import network, paths
from tensorkiln_local.cluster.registry import LocalRegistry

# What `tensorkiln-local install --engine-registry` takes, the first the default: this registry, or a
# registry claim in each namespace (install.py).
KINDS = ("oci", "pvc")
PORT = 5001
REPOSITORY = "tensorkiln/engines"
SERVED = LocalRegistry(
    "engine-registry",
    f"{network.node_gateway(0)}:{PORT}",
    paths.LOCAL_DATA / "engine-registry",
    paths.STATE_DIR / "engine-registry",
)
PIDFILE, LOGFILE = SERVED.pidfile, SERVED.logfile
start, stop = SERVED.start, SERVED.stop


def host() -> str:
    """host:port as pods and this machine reach it: local-0's gateway."""
    return SERVED.address


def uri() -> str:
    """The engine registry URI the operator is installed with."""
    return f"oci://{host()}/{REPOSITORY}"
