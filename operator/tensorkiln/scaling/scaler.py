"""The SLO scaler's runtime: its Prometheus client, its schedule and its memory.

An InferenceModel's reconcile observes a target (`observe_target`) or a LeastCost model's targets
(`observe_placement`): what the scaler remembers of them and, at most once a period, their figures from
Prometheus. scaling.slo decides from that alone. Once the reconcile has applied the replicas decided, it
commits the verdict (`commit_target`, `commit_placement`): the memory the next evaluation starts from, and
the outcome repeated until the period has passed. A target whose replicas were not applied commits
nothing: the next reconcile reads it again.
"""

import threading
import time
from collections.abc import Callable, Sequence

from tensorkiln.hardware.classes import HardwareClass
from tensorkiln.scaling.memory import ModelMemory, TargetMemory
from tensorkiln.scaling.metrics import MetricsUnavailable, Unread, observe
from tensorkiln.scaling.slo import (
    LeastCostOutcome,
    Outcome,
    PlacementSignals,
    PlacementVerdict,
    Reading,
    TargetSignals,
    TargetVerdict,
)

TargetKey = tuple[str, str, str]  # (namespace, model, hardware class)
ModelKey = tuple[str, str]  # (namespace, model)


def _model_key(model: dict) -> ModelKey:
    return model["metadata"]["namespace"], model["metadata"]["name"]


class Scaler:
    def __init__(
        self, prometheus, period: float = 0.0, recent_window: str = "10s", clock: Callable[[], float] = time.time
    ):
        self.prometheus = prometheus  # a PrometheusConnect, or None when no URL is configured
        self.recent_window = recent_window  # the short rate window: a load step shows there first
        self.period = period  # each target (LeastCost: each model) is read at most once a period
        self.clock = clock
        self._targets: dict[TargetKey, TargetMemory] = {}
        self._models: dict[ModelKey, ModelMemory] = {}
        self._outcomes: dict[TargetKey, tuple[float, Outcome]] = {}
        self._placements: dict[ModelKey, tuple[float, LeastCostOutcome]] = {}
        self._lock = threading.Lock()

    def read(self, model: dict, spec: dict, target: HardwareClass) -> Reading:
        """The target's figures from Prometheus, or why there are none (its replicas are then held)."""
        namespace, name = _model_key(model)
        if target.simulated:
            return Unread("SimulatedPool", "no Triton runs on kwok-simulated nodes")
        if self.prometheus is None:
            return Unread("NoPrometheus", "no Prometheus URL configured")
        try:
            obs = observe(
                self.prometheus, namespace, name, target.name, spec["slo"]["percentile"],
                recent_window=self.recent_window,
            )  # fmt: skip
        except MetricsUnavailable as error:
            return Unread("PrometheusUnavailable", f"{error}; holding replicas")
        if obs is None:
            return Unread("NoData", "no Triton metrics yet; holding replicas")
        return obs

    def observe_target(self, model: dict, spec: dict, target: HardwareClass) -> TargetSignals:
        """A serving PerClass target: its last outcome while the period runs, else its reading (reads only)."""
        key, at = (*_model_key(model), target.name), self.clock()
        with self._lock:
            last, memory = self._outcomes.get(key), self._targets.get(key, TargetMemory())
        if last is not None and at - last[0] < self.period:
            return TargetSignals(at, memory, recent=last[1])
        return TargetSignals(at, memory, reading=self.read(model, spec, target))

    def observe_placement(
        self, model: dict, spec: dict, members: Sequence[tuple[HardwareClass, bool]]
    ) -> PlacementSignals:
        """A LeastCost model's `members` (each target, and whether it serves: a target scaled to 0, or whose
        pods are starting, has no figures to read): the last outcome while the period runs, else a reading
        of each serving member (reads only)."""
        namespace, name = key = _model_key(model)
        at = self.clock()
        with self._lock:
            memories = {t.name: self._targets.get((namespace, name, t.name), TargetMemory()) for t, _ in members}
            memory, last = self._models.get(key, ModelMemory()), self._placements.get(key)
        if last is not None and at - last[0] < self.period and set(last[1].outcomes) == set(memories):
            return PlacementSignals(at, memories, memory, recent=last[1])
        readings = {t.name: self.read(model, spec, t) for t, serving in members if serving}
        return PlacementSignals(at, memories, memory, readings)

    def commit_target(self, model: dict, target: str, verdict: TargetVerdict) -> None:
        if verdict.memory is None:  # a recent outcome repeated
            return
        key = (*_model_key(model), target)
        with self._lock:
            self._targets[key] = verdict.memory
            self._outcomes[key] = (verdict.at, verdict.outcome)

    def commit_placement(self, model: dict, verdict: PlacementVerdict) -> None:
        if verdict.memory is None:
            return
        namespace, name = key = _model_key(model)
        with self._lock:
            for target, memory in verdict.memories.items():
                self._targets[(namespace, name, target)] = memory
            self._models[key] = verdict.memory
            self._placements[key] = (verdict.at, verdict.outcome)
