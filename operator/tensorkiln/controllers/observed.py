"""The gather step of an InferenceModel's reconcile: one `Observed` snapshot of everything the
plan (controllers.plan.plan_model) decides from.

Cluster objects come from the watch cache (ClusterState), so gathering makes no request in steady
state. Two other readings are taken here too, because they are observations the plan must not
make itself: the manifests of the engines to serve (from the registry, cached by digest) and what
the SLO scaler observed (scaling.scaler: its memory and, at most once a period per target, the
figures from Prometheus; under spec.slo.placement LeastCost, once a period for the model's targets
together, with each class's pool: its Nodes and the pods the cache holds on them). Gathering writes
nothing, the scaler's memory included: the plan decides, the apply step commits.
"""

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from tensorkiln_api import API_VERSION
from tensorkiln_api.registry import EngineManifest, Registry, RegistryError

from tensorkiln.builders import serving
from tensorkiln.builders.compilejob import compile_job_name
from tensorkiln.builders.labels import HARDWARE_CLASS
from tensorkiln.cluster.state import ClusterState
from tensorkiln.hardware.classes import GPU_PRODUCT, HardwareClass, discover, node_labels
from tensorkiln.hardware.selection import select_targets
from tensorkiln.review import cluster as review
from tensorkiln.review.checks import Finding
from tensorkiln.scaling.offers import Pool
from tensorkiln.scaling.placement import places_least_cost
from tensorkiln.scaling.scaler import Scaler
from tensorkiln.scaling.slo import Member, PlacementSignals, TargetSignals
from tensorkiln.serving import batcher_choice
from tensorkiln.settings import Settings
from tensorkiln.status.serving import Rollout, desired_engine, observe

log = logging.getLogger(__name__)

# (apiVersion, kind) of every object a target's serving may own, all named after the target.
GATHERED = (
    ("v1", "ConfigMap"),
    ("apps/v1", "Deployment"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
    ("v1", "Service"),
    ("policy/v1", "PodDisruptionBudget"),
)


@dataclass(frozen=True)
class TargetObserved:
    """One hardware target (a class with nodes) of a model, as it is."""

    target: HardwareClass
    compile_job: dict | None  # whatever holds the target's CompileJob name, ours or not
    serving: Mapping[str, dict | None]  # by kind (plan.GATHERED): what holds the target's serving name
    pods: tuple[dict, ...] = ()  # the target's serving pods
    manifest: EngineManifest | None = None  # of `engine`, when the registry has it
    registry_error: str | None = None  # why `engine`'s manifest could not be read
    slo: TargetSignals | None = None  # what the SLO scaler observed (slo.mode Operator, serving, PerClass)

    @property
    def rollout(self) -> Rollout | None:
        return observe(self.serving.get("Deployment"))

    @property
    def engine(self) -> str | None:
        """The engine the target should serve (status.serving.desired_engine)."""
        return desired_engine(self.compile_job, self.rollout)


@dataclass(frozen=True)
class Observed:
    model: dict
    spec: dict  # validated, defaults applied
    targets: tuple[HardwareClass, ...]  # every selected class, with nodes or without
    per_target: Mapping[str, TargetObserved]  # by class name: those with nodes
    findings: tuple[Finding, ...]  # the admission checks (tensorkiln.review)
    model_service: dict | None  # what holds the model's Service name
    products: tuple[str, ...]  # GPU products on the cluster's nodes
    placement: "PlacementObserved | None" = None  # spec.slo.placement LeastCost; None: PerClass

    @property
    def blocked(self) -> bool:
        """An admission check fails: no CompileJob is created or changed."""
        return any(f.is_error for f in self.findings)

    @property
    def scaled_by_operator(self) -> bool:
        return scaled_by_operator(self.spec)


def scaled_by_operator(spec: dict) -> bool:
    """The SLO scaler sets the replicas (slo.mode Operator, its default); `spec` validated or as stored."""
    slo = spec.get("slo")
    return slo is not None and slo.get("mode", "Operator") == "Operator"


@dataclass(frozen=True)
class PlacementObserved:
    """A LeastCost model's members (the targets placed together) and what the SLO scaler observed of them."""

    members: tuple[Member, ...]
    signals: PlacementSignals


def previous_slo(model: dict, target: HardwareClass) -> dict:
    """The target's last slo status."""
    entries = model.get("status", {}).get("targets", [])
    return next((e.get("slo", {}) for e in entries if e.get("hardwareClass") == target.name), {})


def _gather_target(
    state: ClusterState,
    registry: Registry,
    scaler: Scaler,
    model: dict,
    spec: dict,
    target: HardwareClass,
) -> TargetObserved:
    meta = model["metadata"]
    namespace, name = meta["namespace"], serving.target_name(meta["name"], target)
    compile_job = state.get(API_VERSION, "CompileJob", namespace, compile_job_name(meta["name"], target.name))
    objects = {kind: state.get(api_version, kind, namespace, name) for api_version, kind in GATHERED}
    found = TargetObserved(target, compile_job, objects)
    rollout, engine = found.rollout, found.engine
    manifest, registry_error, slo = None, None, None
    if engine is not None:
        try:
            manifest = batcher_choice.for_spec(state.manifest(registry, engine), spec)
        except RegistryError as error:
            registry_error = str(error)
            log.warning("engine %s of %s/%s unavailable: %s", engine[:12], namespace, meta["name"], error)
    placed = places_least_cost(spec) and not target.simulated  # observed with the model's other targets
    if scaled_by_operator(spec) and rollout is not None and rollout.serving and not placed:
        slo = scaler.observe_target(model, spec, target)
    pods = tuple(state.pods(namespace, serving.selector(model, target))) if rollout is not None else ()
    return TargetObserved(target, compile_job, objects, pods, manifest, registry_error, slo)


def deploying(found: TargetObserved) -> bool:
    """An engine to serve and no Deployment yet: the plan creates one in this reconcile."""
    return found.rollout is None and found.engine is not None and found.manifest is not None


def _placement(
    state: ClusterState, scaler: Scaler, model: dict, spec: dict, nodes: list[dict], per_target: dict
) -> PlacementObserved | None:
    """A LeastCost model's targets with a Deployment, or about to get one (kwok-simulated ones aside: no
    Triton runs there), and what the scaler observed of them. A target about to get its Deployment counts
    as one at its minimum, so it starts with what the placement wants of it (none, for a class the
    placement leaves unused with minReplicas 0), not with a replica that would run, and cost, for a whole
    scale-down window before the placement could take it away. While the placement is held (no figures
    yet for a serving target), it starts as without LeastCost (one replica, or minReplicas)."""
    placed = [
        found
        for found in per_target.values()
        if (found.rollout is not None or deploying(found)) and not found.target.simulated
    ]
    if not placed:
        return None
    rollouts = {
        found.target.name: found.rollout or Rollout(found.engine, spec["slo"]["minReplicas"], 0, True)
        for found in placed
    }
    signals = scaler.observe_placement(model, spec, [(f.target, rollouts[f.target.name].serving) for f in placed])
    by_name = {n["metadata"]["name"]: n for n in nodes}
    members = tuple(
        Member(
            found.target, rollouts[found.target.name], previous_slo(model, found.target), found.engine,
            found.manifest,
            Pool(
                tuple(by_name[n] for n in found.target.nodes if n in by_name), found.pods,
                # the pods on the pool count only when an offer is made: not while a recent outcome repeats
                None if signals.recent is not None else state.pods_on(list(found.target.nodes)),
            ),
        )
        for found in placed
    )  # fmt: skip
    return PlacementObserved(members, signals)


def gather(
    state: ClusterState, registry: Registry, scaler: Scaler, settings: Settings, model: dict, spec: dict
) -> Observed:
    """Everything the plan needs about `model` (with its validated `spec`)."""
    meta = model["metadata"]
    nodes = state.nodes()
    targets = tuple(select_targets(spec["hardware"], discover(nodes), nodes))
    by_class = {
        cj["metadata"]["labels"].get(HARDWARE_CLASS): cj for cj in state.compile_jobs(meta["namespace"], meta["name"])
    }
    findings = tuple(review.review(state, registry, settings, model, spec, by_class))
    per_target = {t.name: _gather_target(state, registry, scaler, model, spec, t) for t in targets if t.nodes}
    placement = _placement(state, scaler, model, spec, nodes, per_target) if places_least_cost(spec) else None
    products = tuple(sorted({node_labels(n)[GPU_PRODUCT] for n in nodes if GPU_PRODUCT in node_labels(n)}))
    model_service = state.get("v1", "Service", meta["namespace"], meta["name"])
    return Observed(model, spec, targets, per_target, findings, model_service, products, placement)
