"""What one hardware class offers a LeastCost model: the solver's ClassOffer (scaling.placement), built
from what the reconcile's observe step read (pure).

- capacity: requests/s one replica sustains under the SLO (scaling.capacity: as measured at compile, or
  as observed), of which the placement counts on COUNTED_SHARE;
- price: per replica-hour, from the class's price (hardware.prices) and what a replica requests;
- bounds: spec.slo.minReplicas and maxReplicas (minReplicas 0 lets a class go unused);
- room: the target's replicas on its pool and how many more fit (hardware.pools), from the class's
  Nodes and the pods the watch cache holds on them.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from tensorkiln_api.registry.manifest import BatcherSetting, EngineManifest

from tensorkiln.builders.serving import triton_resources
from tensorkiln.builders.tritonconfig import batcher
from tensorkiln.hardware.classes import HardwareClass
from tensorkiln.hardware.pools import Room, replica_request, room
from tensorkiln.hardware.prices import replica_price
from tensorkiln.scaling.capacity import (
    Capacity,
    cpu_share,
    measured_at_compile,
    observation_basis,
    observed,
    remembered,
)
from tensorkiln.scaling.decision import Sample
from tensorkiln.scaling.placement import ClassOffer

# Of a replica's capacity at the target (where its percentile reaches the target, so that half the time
# it is over), the share the placement counts on: replicas run at most at this share of it.
COUNTED_SHARE = 0.8


@dataclass(frozen=True)
class Offer:
    offer: ClassOffer  # what the solver takes
    capacity: Capacity  # per replica under the target, both figures (offer.capacity: COUNTED_SHARE of it)
    observed_for: str | None  # what capacity.observed holds for (capacity.observation_basis); None: no engine
    replica_price: float | None  # per replica-hour (offer.price)
    room: Room  # on the class's pool (offer.running, offer.free)


@dataclass(frozen=True)
class Pool:
    """A target's pool as observed: the class's Nodes, the target's own serving pods, and every pod the
    watch cache holds on those nodes (read only when an offer is to be made: once an SLO period)."""

    nodes: tuple[dict, ...]
    own_pods: tuple[dict, ...]
    bound: Sequence[dict] | None  # None: not counted (the cache does not serve pods)


def class_offer(
    target: HardwareClass,
    spec: dict,
    engine: str | None,
    manifest: EngineManifest | None,
    samples: list[Sample],
    last_scale_at: float | None,
    previous: dict,
    pool: Pool,
) -> Offer:
    """The offer of `target` for a model with the validated `spec`; `engine`: the digest of the engine it
    serves, `manifest`: that engine's (None: not read), `samples`: the SLO scaler's recent observations of
    it, oldest first, `previous`: its last slo status (an observed capacity there counts while the scaler
    has none of its own)."""
    slo, serving = spec["slo"], spec["serving"]
    gpu = target.kind == "GPU"
    resources = triton_resources(serving.get("resources"), target)
    chosen = batcher(serving, manifest, gpu)
    served = BatcherSetting(
        dynamic_batching=chosen.enabled, preferred_batch_sizes=list(chosen.preferred_batch_sizes),
        max_queue_delay_microseconds=chosen.max_queue_delay_microseconds, instances=chosen.instances,
    )  # fmt: skip
    request = replica_request(target.kind, resources)
    gpus = request[1] if gpu and request else 1
    compile_figure = None
    if manifest is not None:
        compile_figure = measured_at_compile(
            manifest, served, serving["maxBatchSize"], slo["percentile"], slo["targetMilliseconds"]
        )
    if compile_figure is not None and gpu:
        compile_figure *= gpus  # the compile measured one GPU; Triton runs the instances on each of the replica's
    elif compile_figure is not None and manifest is not None:
        compile_figure *= cpu_share(manifest, request[1] if request else None)
    basis = None if engine is None else observation_basis(engine, served, request, slo, serving["maxBatchSize"])
    seen = observed(samples, slo["targetMilliseconds"], last_scale_at, chosen.instances)
    capacity = Capacity(compile_figure, seen if seen is not None else remembered(previous, basis))
    price_error = target.price_error
    if request is None and not gpu:
        price = None  # a replica that requests no CPU has no share of the price per core to go by
        if target.price_per_hour is not None:
            price_error = "its replicas request no CPU, and the price is per core"
    else:
        price = replica_price(target.kind, target.price_per_hour, request[1] if request else 0.0, gpus)
    found = room(target.kind, resources, list(pool.nodes), list(pool.own_pods), pool.bound)
    counted = (capacity.per_replica or 0.0) * COUNTED_SHARE  # unknown: 0, only the minimum is placed
    offer = ClassOffer(
        target.name, counted, price, slo["minReplicas"], slo["maxReplicas"], found.running, found.free, price_error
    )
    return Offer(offer, capacity, basis, price, found)
