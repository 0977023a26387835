"""Which engine a target should serve, and how its rollout stands (pure)."""

from dataclasses import dataclass, replace

from tensorkiln.builders.serving import ENGINE_DIGEST
from tensorkiln.status.pods import container_problem


@dataclass(frozen=True)
class Rollout:
    """A target's Deployment as observed."""

    engine: str | None  # digest in the pod template
    replicas: int
    ready_replicas: int
    updated: bool  # every replica runs the current template and the controller has seen it
    problem: str | None = None  # why new pods do not start, when they do not
    # Not updated only because replicas were added or removed: every pod runs the current template, some
    # serve, the added ones start or the removed ones stop. A scale action is no rollout (Deployed stays
    # True, the phase Ready).
    scaling: bool = False

    @property
    def serving(self) -> bool:
        return self.ready_replicas > 0


def observe(deployment: dict | None) -> Rollout | None:
    if deployment is None:
        return None
    spec, status = deployment.get("spec", {}), deployment.get("status", {})
    annotations = spec.get("template", {}).get("metadata", {}).get("annotations", {})
    replicas = spec.get("replicas", 1)
    current = (
        status.get("observedGeneration") == deployment["metadata"].get("generation")
        and status.get("updatedReplicas", 0) == status.get("replicas", 0)  # old pods gone
    )
    available = status.get("availableReplicas", 0)
    updated = current and status.get("updatedReplicas", 0) == replicas and available >= replicas
    # Every pod on the current template, the controller has seen it, and some serve: only the count differs,
    # replicas being added (some start) or removed (some still terminating).
    scaling = current and not updated and available > 0
    return Rollout(annotations.get(ENGINE_DIGEST), replicas, status.get("readyReplicas", 0), updated, scaling=scaling)


def desired_engine(compile_job: dict | None, rollout: Rollout | None) -> str | None:
    """The compiled engine once it exists; until then (or if its compile failed) whatever serves now.

    A failed or still-running compile never takes an engine away: the previous one keeps serving.
    """
    status = (compile_job or {}).get("status", {})
    if status.get("phase") == "Succeeded" and status.get("engine"):
        return status["engine"]["digest"]
    return rollout.engine if rollout else None


def desired_replicas(spec: dict, rollout: Rollout | None) -> int:
    """Keep the current count (the SLO scaler owns it) within the SLO's bounds; start at the minimum."""
    slo = spec.get("slo") or {}
    low, high = max(slo.get("minReplicas", 1), 1), slo.get("maxReplicas", 1)
    current = rollout.replicas if rollout else low
    return min(max(current, low), max(high, low))


def with_problem(rollout: Rollout, pods: list[dict]) -> Rollout:
    """The rollout, with the first reason one of its pods cannot start (e.g. an engine that fails its sha256)."""
    for pod in pods:
        status = pod.get("status", {})
        for container in status.get("initContainerStatuses", []) + status.get("containerStatuses", []):
            problem = container_problem(pod["metadata"]["name"], container)
            if problem:
                return replace(rollout, problem=problem[:1024])
    return rollout
