"""The policy TensorKiln's SLO scaler is compared against: Kubernetes' HorizontalPodAutoscaler
on CPU utilisation (pure), as KServe and others configure it by default. e2e/bench_slo.py runs
it on the same load as the SLO scaler.

The HPA's algorithm (kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale):
desired = ceil(current * utilisation / target) over the ready pods, no change within a 10%
tolerance, scale-up limited to the larger of 100% or 4 pods per period, and scale-down to the
highest recommendation of the stabilisation window.
"""

import math
from dataclasses import dataclass, field


@dataclass
class UtilisationPolicy:
    target: float  # mean CPU usage / CPU request, e.g. 0.7
    min_replicas: int
    max_replicas: int
    scale_down_stabilization_s: float = 300.0
    tolerance: float = 0.1
    recommendations: list[tuple[float, int]] = field(default_factory=list)  # (time, replicas): the window

    def decide(self, current: int, utilisations: list[float], now: float) -> int:
        """Desired replicas from the ready pods' utilisations (no data: keep `current`)."""
        if not utilisations:
            return current
        ratio = (sum(utilisations) / len(utilisations)) / self.target
        wanted = current if abs(ratio - 1) <= self.tolerance else math.ceil(len(utilisations) * ratio)
        wanted = min(wanted, max(2 * current, current + 4))
        wanted = min(max(wanted, self.min_replicas), self.max_replicas)
        window = now - self.scale_down_stabilization_s
        self.recommendations = [(t, r) for t, r in self.recommendations if t > window] + [(now, wanted)]
        if wanted < current:  # scale down only as far as the window's highest recommendation
            wanted = min(current, max(r for _, r in self.recommendations))
        return wanted
