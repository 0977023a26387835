"""Where the local cluster keeps its binaries, configuration and state."""

import os
from pathlib import Path

CLUSTER_NAME = "tensorkiln"

REPO_ROOT = Path(__file__).resolve().parents[3]
LOCALCLUSTER_DIR = REPO_ROOT / "localcluster"
GO_BUILD_DIR = LOCALCLUSTER_DIR / "build"
KWOK_CONFIG = LOCALCLUSTER_DIR / "kwok.yaml"
DEFAULT_POOLS = LOCALCLUSTER_DIR / "pools.yaml"
CRDS_DIR = REPO_ROOT / "crds"
# The Helm chart (its crds/ are generated with crds/) and the plain manifests rendered from it.
CHART_DIR = REPO_ROOT / "charts" / "tensorkiln"
MANIFESTS_DIR = REPO_ROOT / "manifests"

# Built binaries live outside the repo so a fresh clone reuses them (keyed by version).
CACHE_DIR = Path(os.environ.get("TENSORKILN_CACHE", Path.home() / ".cache" / "tensorkiln"))
BIN_CACHE = CACHE_DIR / "bin"
# Names the components are invoked by; kwokctl links its own copies to these.
BIN_DIR = CACHE_DIR / "current-bin"

KWOK_HOME = Path.home() / ".kwok"
KWOK_CLUSTER_DIR = KWOK_HOME / "clusters" / CLUSTER_NAME
KUBECONFIG = KWOK_CLUSTER_DIR / "kubeconfig.yaml"
# The cluster's CA, made by kwokctl: the local node agent signs its kubelet endpoint's certificate
# with it, and the API server verifies that endpoint with it (kwok.yaml).
CLUSTER_CA_CERT = KWOK_CLUSTER_DIR / "pki" / "ca.crt"
CLUSTER_CA_KEY = KWOK_CLUSTER_DIR / "pki" / "ca.key"

# Node-local data of the real node local-0, at the paths the samples name: sample models
# and the engine registry (the operator's default registry, file:///var/lib/tensorkiln/registry).
LOCAL_DATA = Path(os.environ.get("TENSORKILN_LOCAL_DATA", "/var/lib/tensorkiln"))
SAMPLE_MODELS = LOCAL_DATA / "models"

STATE_DIR = Path(os.environ.get("TENSORKILN_STATE", Path.home() / ".local" / "state" / "tensorkiln"))
LOCALNODE_STATE = STATE_DIR / "localnode"  # local-0's agent: pods, logs, pid file


def local_node_state(name: str) -> Path:
    """The state dir of the agent of real node `name` (local-0's is LOCALNODE_STATE)."""
    return LOCALNODE_STATE if name == "local-0" else STATE_DIR / f"localnode-{name}"


OPERATOR_STATE = STATE_DIR / "operator"
