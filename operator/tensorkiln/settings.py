"""Operator settings, read once from the environment (the Helm chart sets them)."""

import os
from dataclasses import dataclass

from tensorkiln_compiler import __version__ as COMPILER_VERSION


@dataclass(frozen=True)
class Settings:
    # Where compile jobs publish engines; a PVC-backed path in a real cluster.
    registry_uri: str = "file:///var/lib/tensorkiln/registry"
    compiler_image: str = f"ghcr.io/tensorkiln/compiler:{COMPILER_VERSION}"
    # Part of the registry cache key: a new compiler version rebuilds every engine.
    compiler_version: str = COMPILER_VERSION
    # Secret (in each model's namespace) whose keys compile pods get as env: S3 credentials.
    registry_secret: str | None = None
    # native: the NGC Triton image's backends; python-backend: the local cluster's Triton
    # (nvidia-pytriton wheel), which has only the Python backend (see builders.tritonconfig).
    serving_runtime: str = "native"
    # Prometheus scraping the Triton pods; without it the SLO scaler holds replicas and says why.
    prometheus_url: str | None = None
    # How often every InferenceModel is re-reconciled, so new node pools are picked up.
    resync_seconds: float = 10.0
    # Port of the operator's Prometheus /metrics (0: not served).
    metrics_port: int = 9090
    # Port of kopf's health endpoint /healthz, for liveness and readiness probes (0: not served).
    health_port: int = 8080
    # json: one JSON object per line with the object's namespace and name (in-cluster default);
    # full: kopf's human-readable lines ([namespace/name] prefixed); plain: the message only.
    log_format: str = "json"

    @classmethod
    def from_env(cls) -> "Settings":
        return cls(
            registry_uri=os.environ.get("TENSORKILN_REGISTRY_URI", cls.registry_uri),
            compiler_image=os.environ.get("TENSORKILN_COMPILER_IMAGE", cls.compiler_image),
            registry_secret=os.environ.get("TENSORKILN_REGISTRY_SECRET") or None,
            serving_runtime=os.environ.get("TENSORKILN_SERVING_RUNTIME", cls.serving_runtime),
            prometheus_url=os.environ.get("TENSORKILN_PROMETHEUS_URL") or None,
            resync_seconds=float(os.environ.get("TENSORKILN_RESYNC_SECONDS", cls.resync_seconds)),
            metrics_port=int(os.environ.get("TENSORKILN_METRICS_PORT", cls.metrics_port)),
            health_port=int(os.environ.get("TENSORKILN_HEALTH_PORT", cls.health_port)),
            log_format=os.environ.get("TENSORKILN_LOG_FORMAT", cls.log_format).lower(),
        )
