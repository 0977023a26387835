"""Where the local cluster keeps its binaries, configuration and state."""

import os
import re
from pathlib import Path

# The cluster's name (TENSORKILN_CLUSTER), which names its kwok, state and data directories: `tensorkiln`,
# the demo's, by default; `make test` runs one of its own, `tensorkiln-test`, so that it neither touches the
# demo's cluster nor inherits its state. One local cluster of a machine runs at a time: they share local-0's
# network (its bridge, addresses and nftables tables), so `cluster up` refuses while another one runs.
CLUSTER_NAME = os.environ.get("TENSORKILN_CLUSTER", "tensorkiln")
if not re.fullmatch(r"[a-z][a-z0-9-]{0,30}", CLUSTER_NAME):
    raise SystemExit(f"TENSORKILN_CLUSTER={CLUSTER_NAME!r}: a lowercase name of letters, digits and '-', up to 31")

REPO_ROOT = Path(__file__).resolve().parents[3]
LOCALCLUSTER_DIR = REPO_ROOT / "localcluster"
# The Go modules the cluster's upstream binaries are built from (tensorkiln_local.cluster.binaries).
GO_MODULES_DIR = LOCALCLUSTER_DIR / "go"
KWOK_CONFIG = LOCALCLUSTER_DIR / "kwok.yaml"
DEFAULT_POOLS = LOCALCLUSTER_DIR / "pools.yaml"
CRDS_DIR = REPO_ROOT / "crds"
# The Helm chart (its crds/ are generated with crds/) and the plain manifests rendered from it.
CHART_DIR = REPO_ROOT / "charts" / "tensorkiln"
MANIFESTS_DIR = REPO_ROOT / "manifests"
API_REFERENCE = REPO_ROOT / "docs" / "reference" / "api.md"

# Build inputs no package registry serves, as local copies (../shared/vendor/ beside the checkout); a
# build without them fetches the same pinned sources (serving/triton_backends/build.py).
VENDOR_DIR = Path(os.environ.get("TENSORKILN_VENDOR", REPO_ROOT.parent / "shared" / "vendor"))

# Built binaries live outside the repo so a fresh clone reuses them (keyed by version).
CACHE_DIR = Path(os.environ.get("TENSORKILN_CACHE", Path.home() / ".cache" / "tensorkiln"))
BIN_CACHE = CACHE_DIR / "bin"
# Names the components are invoked by; kwokctl links its own copies to these.
BIN_DIR = CACHE_DIR / "current-bin"

KWOK_HOME = Path.home() / ".kwok"
KWOK_CLUSTER_DIR = KWOK_HOME / "clusters" / CLUSTER_NAME
KUBECONFIG = KWOK_CLUSTER_DIR / "kubeconfig.yaml"
# The cluster's CA, made by kwokctl: it signs the real nodes' kubelet and kube-proxy certificates
# (nodes.py, kubeproxy.py), and the API server verifies the kubelets' endpoints with it (kwok.yaml).
CLUSTER_CA_CERT = KWOK_CLUSTER_DIR / "pki" / "ca.crt"
CLUSTER_CA_KEY = KWOK_CLUSTER_DIR / "pki" / "ca.key"

# Data of this machine the local cluster serves from: the staged sample models (the model store
# serves them, install.py) and the registry volume behind the claims `tensorkiln-registry`.
LOCAL_DATA = Path(os.environ.get("TENSORKILN_LOCAL_DATA", f"/var/lib/{CLUSTER_NAME}"))
SAMPLE_MODELS = LOCAL_DATA / "models"

STATE_DIR = Path(os.environ.get("TENSORKILN_STATE", Path.home() / ".local" / "state" / CLUSTER_NAME))
