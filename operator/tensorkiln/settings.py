"""Operator settings, read once from the environment (the Helm chart sets them)."""

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    # Where compile jobs publish engines; a PVC-backed path in a real cluster.
    registry_uri: str = "file:///var/lib/tensorkiln/registry"
    compiler_image: str = "ghcr.io/tensorkiln/compiler:0.1.0"
    # How often every InferenceModel is re-reconciled, so new node pools are picked up.
    resync_seconds: float = 10.0

    @classmethod
    def from_env(cls) -> "Settings":
        return cls(
            registry_uri=os.environ.get("TENSORKILN_REGISTRY_URI", cls.registry_uri),
            compiler_image=os.environ.get("TENSORKILN_COMPILER_IMAGE", cls.compiler_image),
            resync_seconds=float(os.environ.get("TENSORKILN_RESYNC_SECONDS", cls.resync_seconds)),
        )
