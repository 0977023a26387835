"""Leader election on a coordination.k8s.io/v1 Lease: of the chart's operator replicas, one
reconciles and the others stand by.

`tensorkiln-operator run --leader-election-lease NAME` (the chart's Deployment) runs the Kubernetes
client's leader election (kubernetes.leaderelection, client-go's algorithm: the holder renews the
Lease every retry period; a candidate takes it once the holder has not renewed it for the lease
duration) in a thread of its own. Every replica fills its watch cache, serves the admission webhook,
/healthz and /metrics; only the leader's work queue runs reconciles (controllers.handlers asks
`leading`), so a standby that takes over already holds the cluster's state: its first reconcile
comes within the lease duration plus a retry period of the leader's last renewal.

A leader that stops cleanly (a rollout, a drain) hands the Lease back (`release`), so the standby
takes over within one retry period instead of waiting out the lease. Without the flag the operator
leads alone, as a local run does.
"""

import datetime
import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass

from kubernetes import client
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

log = logging.getLogger(__name__)
# The client logs every retry at INFO ("yet to finish lease_duration..."); this module logs the changes.
logging.getLogger("leaderelection").setLevel(logging.WARNING)


def new_identity() -> str:
    """This operator's name in the Lease's holderIdentity: the pod's name (POD_ID), else user@host,
    and when it started, so that a restarted container is a new candidate."""
    host = os.environ.get("POD_ID") or f"{os.getuid()}@{socket.gethostname()}"
    return f"{host}/{datetime.datetime.now(datetime.UTC):%Y%m%d%H%M%S}/{secrets.token_hex(2)}"


@dataclass(frozen=True)
class Timings:
    """client-go's three settings. Worst case after a leader is SIGKILLed: the standby leads within
    lease_duration + 2 * retry_period of the last renewal (it notices the renewal up to a retry
    period late, and tries again a retry period after the lease ran out)."""

    lease_duration: int = 8
    renew_deadline: int = 6  # a leader that cannot renew for this long stops leading
    retry_period: int = 2

    def problems(self) -> list[str]:
        """What the client's Config would refuse (it calls sys.exit): said here with the setting's name."""
        found = []
        if not self.lease_duration > self.renew_deadline:
            found.append("leaseDurationSeconds must exceed renewDeadlineSeconds")
        if not self.renew_deadline > 1.2 * self.retry_period:  # the client's jitter factor
            found.append("renewDeadlineSeconds must exceed 1.2 x retryPeriodSeconds")
        if min(self.lease_duration, self.renew_deadline, self.retry_period) < 1:
            found.append("every leader-election period must be at least 1 s")
        return found


class _StoppableLeaseLock(LeaseLock):
    """The client's LeaseLock over our ApiClient, whose writes fail once the operator stops: its
    renew loop then gives up and no write can take the Lease back after `release`."""

    def __init__(self, api: client.ApiClient, name: str, namespace: str, identity: str, stopped: threading.Event):
        super().__init__(name, namespace, identity)
        self.api_instance = client.CoordinationV1Api(api)
        self._stopped = stopped

    def create(self, name, namespace, election_record):
        return not self._stopped.is_set() and super().create(name, namespace, election_record)

    def update(self, name, namespace, updated_record):
        return not self._stopped.is_set() and super().update(name, namespace, updated_record)


class Leadership:
    """Whether this operator leads. `start` campaigns in a daemon thread and calls `on_elected` (in
    that thread) each time this operator becomes the leader."""

    def __init__(
        self,
        api: client.ApiClient | None = None,
        lease: str | None = None,  # None: no election, this operator leads alone
        namespace: str = "",
        identity: str = "",
        timings: Timings | None = None,
    ):
        self.lease, self.namespace, self.identity = lease, namespace, identity
        self.timings = timings or Timings()
        self._api = api
        self._on_elected: Callable[[], None] = lambda: None
        self._leading = threading.Event()
        self._stopped = threading.Event()
        if lease is None:  # no election: this operator acts alone
            self._leading.set()

    def leading(self) -> bool:
        return self._leading.is_set()

    def start(self, on_elected: Callable[[], None]) -> None:
        if self.lease is None:
            return
        self._on_elected = on_elected
        lock = _StoppableLeaseLock(self._api, self.lease, self.namespace, self.identity, self._stopped)
        t = self.timings
        config = electionconfig.Config(lock, t.lease_duration, t.renew_deadline, t.retry_period,
                                       self.elected, self.deposed)  # fmt: skip
        threading.Thread(target=self._campaign, args=(config,), name="leader-election", daemon=True).start()
        log.info("standing for leader on Lease %s/%s as %s", self.namespace, self.lease, self.identity)

    def _campaign(self, config: electionconfig.Config) -> None:
        """Campaign again after each term, until the operator stops (a deposed leader stands by)."""
        while not self._stopped.is_set():
            try:
                leaderelection.LeaderElection(config).run()
            except Exception:  # e.g. an unparsable Lease someone edited: stand by, try again
                log.exception("leader election failed; standing again in %d s", config.retry_period)
                self.deposed()
            self._stopped.wait(config.retry_period)

    def elected(self) -> None:
        """The election's callback: this operator won the Lease."""
        if self._stopped.is_set():
            return
        self._leading.set()
        log.info("leading: holds Lease %s/%s", self.namespace, self.lease)
        self._on_elected()

    def deposed(self) -> None:
        """The election's callback: this operator could not renew the Lease in time."""
        if self._leading.is_set():
            log.warning("no longer leading: Lease %s/%s not renewed in time", self.namespace, self.lease)
        self._leading.clear()

    def release(self) -> None:
        """Stop campaigning; if leading, hand the Lease back at once (holderIdentity cleared) so a
        standby takes over within its retry period."""
        if self.lease is None:
            return
        self._stopped.set()
        was_leading = self._leading.is_set()
        self._leading.clear()
        if not was_leading:
            return
        api = client.CoordinationV1Api(self._api)
        try:
            lease = api.read_namespaced_lease(self.lease, self.namespace)
            if lease.spec.holder_identity == self.identity:
                lease.spec.holder_identity = None
                lease.spec.lease_duration_seconds = 1
                api.replace_namespaced_lease(self.lease, self.namespace, lease)  # its resourceVersion: no race
                log.info("released Lease %s/%s", self.namespace, self.lease)
        except client.ApiException as error:  # the standby then waits out the lease
            log.warning("could not release Lease %s/%s: %s", self.namespace, self.lease, error.reason)
