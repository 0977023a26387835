"""Open-loop load on a model's Service: requests arrive on a clock at a scheduled rate, spread
over the Service's ready pods.

Open loop matters for a latency SLO: arrivals do not wait for answers, so when replicas are
too few, requests queue and latency grows, as with real users (a closed loop would slow its own
arrivals down and hide the overload). Arrivals are Poisson at each phase's rate (seeded), and a
request's latency counts from its scheduled arrival, so time spent waiting for a free client
thread is included.

Requests go to the Service's ClusterIP, each over a connection of its own (as HTTP/1.1 clients
without keep-alive would): kube-proxy sends every connection to a ready pod at random, so requests
spread evenly over the pods, a scale-up's new pods included. (Long-lived gRPC connections would stay
on the pods they first reached, and a few of them spread unevenly.) A request that fails (its pod
going away) is retried over a new connection after short pauses, as a client's retry policy would;
it is recorded failed only if every attempt fails, and its latency includes the pauses.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np
from kubernetes import client
from tensorkiln_client.triton import infer_on, new_connection, service_address, until_routed

from tensorkiln_local.load.evaluation import Point

# Pauses before the retries of a failed request. kube-proxy may route a retry to the same dead pod
# until its endpoint is withdrawn, a second or two after its container died: the pauses outlast that.
RETRY_PAUSES_S = (0.1, 0.2, 0.4, 0.8, 1.6)


@dataclass(frozen=True)
class Phase:
    name: str
    rate: float  # requests per second
    seconds: float


@dataclass(frozen=True)
class Request:
    at: float  # scheduled arrival, seconds since the run started
    latency_s: float  # arrival to answer (or to the failure)
    ok: bool
    phase: str


class OpenLoopLoad:
    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        service: str,
        model_name: str,
        inputs: dict[str, np.ndarray],
        workers: int = 64,
        timeout_s: float = 10.0,
        seed: int = 0,
    ):
        self.api_client, self.namespace, self.service = api_client, namespace, service
        self.model_name, self.inputs = model_name, inputs
        self.workers, self.timeout_s = workers, timeout_s
        self.random = random.Random(seed)
        self.results: list[Request] = []
        self.started_at: float | None = None
        self._address: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def _infer_once(self, connection) -> None:
        try:
            infer_on(connection, self.model_name, self.inputs, timeout_s=self.timeout_s)
        finally:
            connection.close()

    def _send(self, scheduled: float, phase: str) -> None:
        ok = False
        for pause in (0.0, *RETRY_PAUSES_S):  # each attempt over a new connection
            time.sleep(pause)
            try:
                self._infer_once(new_connection(self._address))
                ok = True
                break
            except Exception:  # any failure: retried, recorded as failed after the last attempt
                continue
        done = time.monotonic() - self.started_at
        with self._lock:
            self.results.append(Request(scheduled, done - scheduled, ok, phase))

    def run(self, phases: list[Phase]) -> list[Request]:
        """Drive the phases in turn; returns every request, in arrival order."""
        # Before the clock starts: the Service's address, and one answer through it, so that the
        # load measures the model, not kube-proxy's first sync of a new Service.
        self._address = service_address(self.api_client, self.namespace, self.service)
        until_routed(lambda: self._infer_once(new_connection(self._address)))
        self.started_at = time.monotonic()
        try:
            with ThreadPoolExecutor(self.workers, thread_name_prefix="load") as pool:
                phase_start = 0.0
                for phase in phases:
                    at = phase_start + self.random.expovariate(phase.rate)
                    while at < phase_start + phase.seconds and not self._stop.is_set():
                        delay = at - (time.monotonic() - self.started_at)
                        if delay > 0:
                            time.sleep(delay)
                        pool.submit(self._send, at, phase.name)
                        at += self.random.expovariate(phase.rate)
                    phase_start += phase.seconds
        finally:
            self._stop.set()
        return sorted(self.results, key=lambda r: r.at)

    def stop(self) -> None:
        """End the run early: no more arrivals; requests in flight finish."""
        self._stop.set()

    def elapsed(self) -> float:
        return 0.0 if self.started_at is None else time.monotonic() - self.started_at


class ReplicaTimeline:
    """Samples a Deployment's replicas every `period_s` in a thread while the load runs."""

    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        deployment: str,
        period_s: float = 1.0,
        server_latency: Callable[[], float | None] | None = None,
    ):
        self.apps = client.AppsV1Api(api_client)
        self.namespace, self.deployment, self.period_s = namespace, deployment, period_s
        self.server_latency = server_latency  # e.g. the scaler's Prometheus query
        self._points: list[Point] = []  # at: time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                found = self.apps.read_namespaced_deployment(self.deployment, self.namespace)
            except client.ApiException:
                found = None
            if found is not None:
                status = found.status
                replicas, pods, ready = found.spec.replicas or 0, status.replicas or 0, status.ready_replicas or 0
                server_ms = self._server_latency()
                self._points.append(Point(time.monotonic(), replicas, pods, ready, server_ms))
            self._stop.wait(self.period_s)

    def _server_latency(self) -> float | None:
        if self.server_latency is None:
            return None
        try:
            return self.server_latency()
        except Exception:  # a missed sample, not a failed run
            return None

    def since(self, origin: float) -> list[Point]:
        """The samples, timed in seconds since `origin` (a time.monotonic(), e.g. the load's start)."""
        return [replace(p, at=p.at - origin) for p in self._points]

    def __enter__(self) -> ReplicaTimeline:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join()


def run_step_load(
    api_client: client.ApiClient,
    namespace: str,
    model: str,
    deployment: str,
    inputs: dict[str, np.ndarray],
    phases: list[Phase],
    seed: int = 0,
    server_latency: Callable[[], float | None] | None = None,
) -> tuple[list[Request], list[Point]]:
    """Drive `phases` at the model's Service (named as the model) while sampling the target's
    Deployment (and `server_latency`); times in both are seconds since the load started."""
    load = OpenLoopLoad(api_client, namespace, model, model, inputs, seed=seed)
    with ReplicaTimeline(api_client, namespace, deployment, server_latency=server_latency) as timeline:
        requests = load.run(phases)
    return requests, timeline.since(load.started_at)
