"""One replica's sustainable request rate at a latency target, measured on the machine at hand.

A step load whose rates are constants passes or fails with the machine's speed: one replica of
a real model may meet 20 req/s on a quiet machine and miss it on a busy one. So the SLO tests and
e2e/bench_slo.py size their loads from a measurement taken in the same run:

1. the server's time per request, from Triton's own counters over sequential requests (no
   queueing): one instance can never serve more than 1000 / that many requests per second;
2. an open-loop ramp on the one replica, from 0.4x that bound up by 15% a step, reading at each
   step's end the latency the scaler reads (Triton's percentile, from Prometheus), until it
   crosses the target.

The target is at least TARGET_OVER_FLOOR times the latency read at the ramp's lightest step: a
request's latency there is already several times its mean service time on 2 shared CPUs (the
clients serialise 2.7 MB images beside the server), 106-184 ms in CI runs against a 200 ms
target, so a load at half the capacity could cross a fixed target by noise alone.

The sustainable rate is the last step whose latency stayed under the target. Triton's summary
remembers about a minute, so a step's reading also holds the (faster) steps before it: the
crossing is seen a little late and the rate errs high, which only makes a load above it more
certainly too much for one replica.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from kubernetes import client
from tensorkiln_client.triton import GRPC_PORT, infer, ready_endpoints, settled_counters

from tensorkiln_local.load.loadgen import OpenLoopLoad, Phase

RAMP_START = 0.4  # of the service-time bound
RAMP_FACTOR = 1.15
RAMP_LIMIT = 1.5  # past the bound the queue only grows: the crossing is certain before this
TARGET_OVER_FLOOR = 2.0  # the least target over the latency at the lightest step


@dataclass(frozen=True)
class RampStep:
    rate: float  # requests per second offered
    latency_ms: float | None  # the server's percentile at the step's end; None: not read


@dataclass(frozen=True)
class Capacity:
    """What one replica sustains with the latency under the target."""

    rate: float  # requests per second: the last ramp step under the target
    service_ms: float  # the server's time per request with no queue
    target_ms: float  # the target measured against: the one asked for, or TARGET_OVER_FLOOR x the floor
    steps: tuple[RampStep, ...]
    crossed: bool  # False: the ramp ended under the target, so `rate` is a lower bound

    @property
    def bound(self) -> float:
        """Requests per second one instance could serve with no idle time at all."""
        return 1000.0 / self.service_ms

    def describe(self) -> str:
        steps = ", ".join(
            f"{s.rate:.1f}/s: {'-' if s.latency_ms is None else f'{s.latency_ms:.0f} ms'}" for s in self.steps
        )
        limit = "crossed after" if self.crossed else "never crossed; at least"
        return (
            f"one replica sustains {self.rate:.1f} req/s under {self.target_ms:g} ms ({limit} that rate); "
            f"service time {self.service_ms:.1f} ms (bound {self.bound:.1f} req/s); ramp {steps}"
        )


def ramp_rates(service_ms: float) -> list[float]:
    """The ramp's offered rates: RAMP_START to RAMP_LIMIT times the service-time bound, geometric."""
    bound, rates = 1000.0 / service_ms, []
    rate = RAMP_START * bound
    while rate <= RAMP_LIMIT * bound:
        rates.append(rate)
        rate *= RAMP_FACTOR
    return rates


def calibrated_target(target_ms: float, steps: list[RampStep]) -> float:
    """`target_ms`, or TARGET_OVER_FLOOR times the first latency read (the lightest load's) when higher."""
    floor = next((s.latency_ms for s in steps if s.latency_ms is not None), 0.0)
    return max(target_ms, round(TARGET_OVER_FLOOR * floor))


def sustainable(steps: list[RampStep], target_ms: float) -> tuple[float | None, bool]:
    """(the last rate before the first step over the target, whether a step crossed it).
    None: the first step already missed the target."""
    last = None
    for step in steps:
        if step.latency_ms is not None and step.latency_ms > target_ms:
            return last, True
        last = step.rate
    return last, False


def service_time_ms(api_client: client.ApiClient, namespace: str, service: str, model: str, inputs, count: int = 20):
    """The server's mean time per request over `count` sequential requests to one ready pod, at its
    own address (after 3 to warm up), from Triton's own counters: no queue, no client time."""
    ready = ready_endpoints(api_client, namespace, service)
    if not ready:
        raise RuntimeError(f"{namespace}/{service}: no ready pod to measure")
    ip = ready[0]
    address = f"{ip}:{GRPC_PORT}"  # that pod itself: its counters must hold every request
    for _ in range(3):
        infer(address, model, inputs)
    before = settled_counters(ip, model)
    for _ in range(count):
        infer(address, model, inputs)
    after = settled_counters(ip, model)
    served = after["nv_inference_request_success"] - before["nv_inference_request_success"]
    spent_us = after["nv_inference_request_duration_us"] - before["nv_inference_request_duration_us"]
    return spent_us / served / 1000.0


def measure(
    api_client: client.ApiClient,
    namespace: str,
    service: str,
    model: str,
    inputs: dict[str, np.ndarray],
    target_ms: float,
    server_latency: Callable[[], float | None],
    step_s: float = 15.0,
    seed: int = 1,
) -> Capacity:
    """Ramp an open-loop load on the Service (one ready replica) until the server's latency crosses
    `target_ms`, or the calibrated target when higher; the replica must not be scaled meanwhile
    (hold its maximum at one)."""
    service_ms = service_time_ms(api_client, namespace, service, model, inputs)
    rates = ramp_rates(service_ms)
    load = OpenLoopLoad(api_client, namespace, service, model, inputs, seed=seed)
    phases = [Phase(f"ramp-{i}", rate, step_s) for i, rate in enumerate(rates)]
    runner = threading.Thread(target=load.run, args=(phases,), daemon=True)
    runner.start()
    steps: list[RampStep] = []
    try:
        while load.started_at is None:
            time.sleep(0.05)
        for i, rate in enumerate(rates):
            time.sleep(max(load.started_at + (i + 1) * step_s - time.monotonic(), 0.0))
            try:
                latency = server_latency()
            except Exception:  # a missed reading is not a measurement
                latency = None
            steps.append(RampStep(rate, latency))
            if latency is not None and latency > calibrated_target(target_ms, steps):
                break
    finally:
        load.stop()
        runner.join()
    target = calibrated_target(target_ms, steps)
    rate, crossed = sustainable(steps, target)  # a rate: the first step read is under twice its reading
    return Capacity(rate, service_ms, target, tuple(steps), crossed)
