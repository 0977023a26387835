"""Open-loop load on a model's Service: requests arrive on a clock at a scheduled rate, spread
over the Service's ready pods.

Open loop matters for a latency SLO: arrivals do not wait for answers, so when replicas are
too few, requests queue and latency grows, as with real users (a closed loop would slow its own
arrivals down and hide the overload). Arrivals are Poisson at each phase's rate (seeded), and a
request's latency counts from its scheduled arrival, so time spent waiting for a free client
thread is included.

The ready pods are looked up before the clock starts and re-read every second (as kube-proxy
follows EndpointSlices; see serving.client for why clients discover pods themselves on the local
cluster), and requests go round-robin over them. A request that fails on a pod going away is
retried once on another ready pod, as a load balancer's retry would; it is recorded failed only if
that fails too.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np
from kubernetes import client

from tensorkiln.scaling.evaluation import Point
from tensorkiln.serving.client import endpoints, infer


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
        self._addresses: list[str] = []
        self._turn = itertools.count()
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def _refresh_endpoints(self) -> None:
        try:
            found = endpoints(self.api_client, self.namespace, self.service)
        except client.ApiException:
            found = None  # keep the last known pods through an API hiccup
        if found is not None:
            self._addresses = found

    def _follow_endpoints(self) -> None:
        while not self._stop.wait(1.0):
            self._refresh_endpoints()

    def _pick(self, avoid: str | None = None) -> str | None:
        addresses = [a for a in self._addresses if a != avoid] or self._addresses
        return addresses[next(self._turn) % len(addresses)] if addresses else None

    def _send(self, scheduled: float, phase: str) -> None:
        ok, address = False, None
        for _ in range(2):
            address = self._pick(avoid=address)
            if address is None:
                break
            try:
                infer(address, self.model_name, self.inputs, timeout_s=self.timeout_s)
                ok = True
                break
            except Exception:  # any failure: one retry on another pod, then recorded as failed
                continue
        done = time.monotonic() - self.started_at
        with self._lock:
            self.results.append(Request(scheduled, done - scheduled, ok, phase))

    def run(self, phases: list[Phase]) -> list[Request]:
        """Drive the phases in turn; returns every request, in arrival order."""
        # The pods are known before the clock starts: the first requests would otherwise find none and fail.
        self._refresh_endpoints()
        self.started_at = time.monotonic()
        follower = threading.Thread(target=self._follow_endpoints, daemon=True)
        follower.start()
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
            follower.join()
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
