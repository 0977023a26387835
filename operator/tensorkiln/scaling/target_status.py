"""The slo fields of a target's status (TargetSLOStatus), from the scaler's decision and what it read (pure)."""

from datetime import UTC, datetime

from tensorkiln_api import CapacitySource
from tensorkiln_api.common import KUBE_TIME_FORMAT, kube_time

from tensorkiln.scaling.decision import Decision
from tensorkiln.scaling.metrics import Observation
from tensorkiln.scaling.offers import Offer


def target_slo_status(
    previous: dict, decision: Decision, now: float, last_scale: float | None, obs: Observation | None
) -> dict:
    """A target's slo status (TargetSLOStatus): the figures observed (none for a target no pod of which
    serves) and the decision, which keeps the time it was first reached while it repeats."""
    same = (previous.get("lastDecision"), previous.get("desiredReplicas")) == (decision.reason, decision.replicas)
    status = {}
    if obs is not None:
        status |= {
            "observedMilliseconds": round(0.0 if obs.idle else obs.latency_ms, 3),
            "latencySource": "idle" if obs.idle else obs.latency_source,
            "requestRate": round(obs.request_rate, 3),
        }
    status |= {
        "desiredReplicas": decision.replicas,
        "lastDecision": decision.reason,
        "lastDecisionMessage": decision.message[:1024],
        # When this decision was first reached: an unchanged decision leaves status unchanged.
        "lastDecisionTime": previous["lastDecisionTime"]
        if same and previous.get("lastDecisionTime")
        else format_time(now),
    }
    if obs is not None and obs.queue_ms is not None:
        status["queueMilliseconds"] = round(obs.queue_ms, 3)
    if last_scale is not None:
        status["lastScaleTime"] = format_time(last_scale)
    return status


def offer_status(offer: Offer, share: float, cost: float | None) -> dict:
    """The capacity, price, share and cost fields of a LeastCost target's slo status."""
    capacity, status = offer.capacity, {"loadShare": share}
    if capacity.per_replica is not None:
        status["capacityPerReplica"] = round(capacity.per_replica, 3)
        status["capacitySource"] = CapacitySource(capacity.source).value
    if capacity.measured_at_compile is not None:
        status["capacityMeasuredAtCompile"] = round(capacity.measured_at_compile, 3)
    if capacity.observed is not None:
        status["capacityObserved"] = round(capacity.observed, 3)
        if offer.observed_for is not None:
            status["capacityObservedFor"] = offer.observed_for
    if offer.replica_price is not None:
        status["replicaPricePerHour"] = round(offer.replica_price, 6)
    if cost is not None:
        status["costPerHour"] = cost
    return status


def format_time(at: float) -> str:
    return kube_time(datetime.fromtimestamp(at, UTC))


def parse_time(value: str | None) -> float | None:
    return datetime.strptime(value, KUBE_TIME_FORMAT).replace(tzinfo=UTC).timestamp() if value else None
