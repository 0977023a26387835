"""What the handlers, the work queue's workers and the admission webhook share: the settings, the
watched namespaces, the watch cache, the clients and whether this replica leads. The runner
(operator_runner.run) builds one and passes it in; nothing is created at import time, so importing
a module opens no connection and reads no environment."""

import threading

from kubernetes import client
from tensorkiln_api.registry import Registry, open_registry

from tensorkiln import kube
from tensorkiln.cluster.cache import WatchCache
from tensorkiln.cluster.state import ClusterState
from tensorkiln.leadership import Leadership, Timings, new_identity
from tensorkiln.scaling import metrics
from tensorkiln.scaling.scaler import Scaler
from tensorkiln.settings import Settings


class OperatorContext:
    def __init__(
        self,
        settings: Settings,
        namespaces: list[str],
        api: client.ApiClient,
        cache: WatchCache,
        *,
        leadership: Leadership | None = None,
    ):
        self.settings = settings
        self.namespaces = namespaces  # empty: every namespace
        # The Lease this replica campaigns for; without one it leads alone.
        self.leadership = leadership or Leadership()
        self.state = ClusterState(api, cache)
        prometheus = metrics.connect(settings.prometheus_url) if settings.prometheus_url else None
        self.scaler = Scaler(
            prometheus, period=settings.slo_period_seconds, recent_window=settings.slo_recent_rate_window
        )
        self._registry: Registry | None = None
        self._registry_lock = threading.Lock()

    @classmethod
    def build(
        cls, settings: Settings, namespaces: list[str], lease: str | None, lease_namespace: str, timings: Timings
    ) -> "OperatorContext":
        """The operator's context: clients from the pod's ServiceAccount or the kubeconfig; with a
        `lease`, a replica that leads only once elected on it."""
        api = kube.api_client()
        leadership = Leadership(api, lease, lease_namespace, new_identity(), timings)
        return cls(settings, namespaces, api, WatchCache(), leadership=leadership)

    @property
    def cache(self) -> WatchCache:
        return self.state.cache

    def registry(self) -> Registry:
        """The engine registry, opened and prepared on first use: from then on a registry that is
        gone is unavailable, not empty. A bad URI raises RegistryError at every use, so every
        reconcile that needs it says so."""
        with self._registry_lock:
            if self._registry is None:
                opened = open_registry(self.settings.registry_uri)
                opened.prepare()
                self._registry = opened
            return self._registry
