"""SLOMet / SLOMetricsAvailable conditions and the kubectl latency column (pure)."""

from tensorkiln.scaling.placement import INSUFFICIENT_CAPACITY
from tensorkiln.status.conditions import condition

SPILLED_OVER = "SpilledOver"


def slo_conditions(slo: dict, outcomes: dict, least_cost=None) -> tuple[list[dict], str]:
    """(conditions, summary) from each target's scaler outcome (scaling.slo.Outcome), by class;
    `least_cost`: under spec.slo.placement LeastCost, the placement they follow
    (scaling.slo.LeastCostOutcome): demand beyond what every class can serve is SLOMet False,
    InsufficientCapacity, with the shortfall; a full pool whose load spilled to other classes, SLOMet
    True, SpilledOver, saying which."""
    if not outcomes:
        waiting = condition("SLOMetricsAvailable", False, "NotServing", "no target serves yet")
        return [waiting, condition("SLOMet", None, "NotServing", "no target serves yet")], "-"
    missing = [(name, o) for name, o in sorted(outcomes.items()) if not o.metrics[0]]
    if missing:
        name, outcome = missing[0]
        available = condition("SLOMetricsAvailable", False, outcome.metrics[1], f"{name}: {outcome.metrics[2]}")
    else:
        available = condition("SLOMetricsAvailable", True, "MetricsFlowing", f"metrics for {len(outcomes)} targets")
    decided = {name: o.decision for name, o in outcomes.items() if o.decision is not None}
    violated = [(name, d) for name, d in sorted(decided.items()) if d.slo_met is False]
    placement = least_cost.placement if least_cost is not None else None
    within = f"{slo['percentile']} within {slo['targetMilliseconds']:g} ms"
    if placement is not None and placement.reason == INSUFFICIENT_CAPACITY:  # first: it says how far short
        met = condition("SLOMet", False, INSUFFICIENT_CAPACITY, placement.message[:4096])
    elif violated:
        name, decision = next(((n, d) for n, d in violated if d.reason == "MaxReplicasReached"), violated[0])
        reason = "MaxReplicasReached" if decision.reason == "MaxReplicasReached" else "LatencyOverTarget"
        met = condition("SLOMet", False, reason, f"{name}: {decision.message}")
    elif placement is not None and placement.spills:
        met = condition("SLOMet", True, SPILLED_OVER, f"{within}; {placement.message}"[:4096])
    elif decided:
        message = f"{within}; {placement.message}" if placement is not None else within
        met = condition("SLOMet", True, "WithinTarget", message[:4096])
    else:
        met = condition("SLOMet", None, available["reason"], available["message"])
    # Idle targets report 0 ms, which no request took: the column says "-" until requests are served.
    observed = [
        o.slo_status["observedMilliseconds"]
        for o in outcomes.values()
        if "observedMilliseconds" in o.slo_status and o.slo_status.get("latencySource") != "idle"
    ]
    summary = f"{slo['percentile']} {max(observed):.1f}/{slo['targetMilliseconds']:g} ms" if observed else "-"
    return [available, met], summary
