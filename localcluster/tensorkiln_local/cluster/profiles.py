"""Shapes of the local cluster, chosen when it is first brought up (`cluster up --profile`) and kept in its
state, so that a later `cluster up` resumes the same shape:

- `default`: what `make demo` and `make test` run: kwok's simulated GPU pools (pools.yaml, GPU Feature
  Discovery's labels) and the real node local-0 with its CPU's Node Feature Discovery labels;
- `kind`: shaped like a single-node kind cluster, the usual first try: one real node labelled
  `node-role.kubernetes.io/control-plane` (untainted, as kind leaves a single node), no simulated pools, no
  NFD or GFD labels (only the kubelet's own: hostname, os, arch, and the local cluster's placement label
  tensorkiln.dev/local-node, which hardware discovery ignores), no ReadWriteMany storage and no S3: the engine
  registry is the cluster's OCI registry (`install` refuses `--engine-registry pvc`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tensorkiln_local.cluster import paths

CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"


@dataclass(frozen=True)
class Profile:
    name: str
    pools: Path  # kwok's simulated pools
    hardware_labels: bool  # the real nodes' NFD CPU labels and tensorkiln.dev/cpu-pool
    control_plane: bool  # local-0 carries the control-plane role label, as kind's node does
    claims: bool  # ReadWriteMany registry claims can be had (install --engine-registry pvc)


PROFILES = {
    "default": Profile("default", paths.DEFAULT_POOLS, hardware_labels=True, control_plane=False, claims=True),
    "kind": Profile("kind", paths.LOCALCLUSTER_DIR / "pools-kind.yaml", False, control_plane=True, claims=False),
}
STORED = paths.STATE_DIR / "profile"


def _stored() -> str | None:
    return STORED.read_text().strip() if STORED.exists() else None


def current() -> Profile:
    """The profile the cluster was brought up with (default: `default`)."""
    return PROFILES[_stored() or "default"]


def choose(requested: str | None) -> Profile:
    """`requested` for a cluster not yet created (stored), else the stored one; a different profile for an
    existing cluster is refused: its nodes and objects have the other shape."""
    stored = _stored()
    if requested and stored and requested != stored:
        raise SystemExit(
            f"the local cluster {paths.CLUSTER_NAME!r} was created with --profile {stored}: `tensorkiln-local "
            f"cluster down` it first, or name another cluster (TENSORKILN_CLUSTER)"
        )
    name = stored or requested or "default"
    STORED.parent.mkdir(parents=True, exist_ok=True)
    STORED.write_text(name + "\n")
    return PROFILES[name]
