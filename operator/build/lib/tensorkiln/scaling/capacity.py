"""Capacity per replica: the requests per second one serving replica of a hardware class sustains with the
SLO's latency percentile under its target (pure). spec.slo.placement LeastCost places by it.

Two figures, both kept, each with its source:
- MeasuredAtCompile, from the engine's manifest. When the compile tuned Triton's batcher
  (manifest.servingTuning) and the replica is served with the settings it chose, its model of the batcher
  gives the throughput and latency percentiles at a few loads; the capacity is the most throughput at a
  load whose percentile meets the target. Served without batching on one instance, the tuning's
  `unbatched` figures stand in. Otherwise (not tuned, or spec.serving overrides the choice) the
  benchmark's single-request service time is run through the scaler's projection (scaling.decision:
  p95 = service * (1 + f * u / (1 - u)), with the default queueing factor) on one instance: the rate
  whose projected latency reaches the target.
- Observed, from Triton's metrics while the replicas serve: the same projection on the newest settled
  observation with the replicas loaded (utilisation 0.2 to 0.9, where the execution time per request
  reflects the batches formed under load and the queueing factor is learned), at the observed execution
  time per request and the learned factor.

The observed figure, once there is one, is the one counted on: it is this deployment on this traffic.
Either is 0 when a replica cannot meet the target at all (its service time alone misses it).

The scaler's observations live in its memory; the observed figure is also kept in status with what it was
observed for (`observation_basis`: the engine, Triton's settings, the replica's resources, the SLO), so a
restarted operator counts on it (`remembered`) until it observes again, rather than on the compile's
figure, which on shared or busy nodes can be several times too high.
"""

from dataclasses import dataclass

from tensorkiln_api import CapacitySource
from tensorkiln_api.registry.manifest import BatcherSetting, EngineManifest

from tensorkiln.scaling.decision import (
    DEFAULT_QUEUEING_FACTOR,
    SUMMARY_MEMORY_S,
    Sample,
    queueing_factor,
    steady,
    utilisation_at_target,
)

LOADED = (0.2, 0.9)  # utilisation of an observation the observed capacity is projected from


@dataclass(frozen=True)
class Capacity:
    """Requests/s one replica sustains under the target, as measured at compile and as observed."""

    measured_at_compile: float | None  # None: the manifest has no figure for it
    observed: float | None  # None: no settled observation with the replicas loaded yet

    @property
    def per_replica(self) -> float | None:
        """The figure counted on: the observed one, else the compile's."""
        return self.observed if self.observed is not None else self.measured_at_compile

    @property
    def source(self) -> CapacitySource | None:
        if self.observed is not None:
            return CapacitySource.OBSERVED
        return CapacitySource.MEASURED_AT_COMPILE if self.measured_at_compile is not None else None


def _same(served: BatcherSetting, tuned: BatcherSetting) -> bool:
    """Served as tuned: the batcher's settings matter only when it is on."""
    if (served.dynamic_batching, served.instances) != (tuned.dynamic_batching, tuned.instances):
        return False
    return not served.dynamic_batching or (
        (served.preferred_batch_sizes, served.max_queue_delay_microseconds)
        == (tuned.preferred_batch_sizes, tuned.max_queue_delay_microseconds)
    )


def _benchmark_percentile(percentile: str) -> str:
    """The benchmark's figure for the SLO's percentile: it has p50, p95 and p99 (p90 is read as p95)."""
    return {"p50": "p50_ms", "p90": "p95_ms", "p95": "p95_ms", "p99": "p99_ms"}[percentile]


def measured_at_compile(
    manifest: EngineManifest, served: BatcherSetting, max_batch_size: int, percentile: str, target_ms: float
) -> float | None:
    """Requests/s one replica sustains under `target_ms` at `percentile`, from the compile's figures;
    `served`: the batcher and instance count the replica is served with (builders.tritonconfig.batcher,
    in the manifest's terms), `max_batch_size`: serving.maxBatchSize. None when the manifest has no
    figure to go by."""
    tuning = manifest.serving_tuning
    loads = None
    if tuning is not None and tuning.max_batch_size == max_batch_size:
        if _same(served, tuning.setting):
            loads = tuning.simulated
        elif not served.dynamic_batching and served.instances == 1:
            loads = tuning.unbatched
    if loads:
        meeting = [load.throughput_per_s for load in loads if getattr(load, f"{percentile}_ms") <= target_ms]
        return max(meeting, default=0.0)
    winner = next((c for c in manifest.candidates if c.id == manifest.selection.winner), None)
    smallest = min(winner.benchmarks if winner else (), key=lambda b: b.batch_size, default=None)
    if smallest is None or smallest.p50_ms <= 0:
        return None
    if getattr(smallest, _benchmark_percentile(percentile)) > target_ms:
        return 0.0  # a lone request already misses the target
    return capacity_at_target(smallest.p50_ms, target_ms)


def capacity_at_target(service_ms: float, target_ms: float) -> float:
    """Requests/s one single-instance replica of a fixed `service_ms` sustains with its projected latency at
    `target_ms` (scaling.decision.projected_latency_ms, at the default queueing factor)."""
    return utilisation_at_target(service_ms, DEFAULT_QUEUEING_FACTOR, target_ms) * 1000.0 / service_ms


def observation_basis(
    engine: str, served: BatcherSetting, request: tuple[str, float] | None, slo: dict, max_batch_size: int
) -> str:
    """What an observed capacity holds for, as status shows it (capacityObservedFor): a change of any part
    (a new engine, other batcher settings or resources, another SLO) makes an earlier observation void.
    `engine`: the digest of the engine served (status.targets[].engine.digest)."""
    per_replica = f"{request[1]:g} {request[0]} per replica" if request else "no resource request"
    return (
        f"engine {engine[:12]}, maxBatchSize {max_batch_size}, {served.describe()}, {per_replica}, "
        f"{slo['percentile']} < {slo['targetMilliseconds']:g} ms"
    )


def remembered(previous: dict, basis: str | None) -> float | None:
    """The observed capacity a target's last status holds (capacityObserved), while it was observed for
    `basis`; None otherwise."""
    value = previous.get("capacityObserved")
    if basis is None or value is None or previous.get("capacityObservedFor") != basis:
        return None
    return float(value)


def cpu_share(manifest: EngineManifest, cores: float | None) -> float:
    """The share of the compile's CPU figures one replica counts on: the cores it requests over those the
    compile pod measured with (its usable CPUs), at most 1. CPU-bound inference scales about with cores,
    and a request is what the node guarantees a container under contention (it may burst above it, but
    the placement must not count on that). 1 when either is unknown."""
    measured = (manifest.fingerprint.get("cpu") or {}).get("usableCpus")
    return min(1.0, cores / measured) if cores and measured else 1.0


def observed(samples: list[Sample], target_ms: float, last_scale_at: float | None, instances: int) -> float | None:
    """Requests/s one replica sustains under `target_ms`, projected from the newest settled observation
    (none within a minute after a scale action, and none but after a minute of steady load: Triton's
    summary still mixes in the time before) with the replicas loaded; None when there is none."""
    factor = queueing_factor(samples, last_scale_at, instances)
    for sample in reversed([s for s in samples if steady(samples, s)]):
        if last_scale_at is not None and last_scale_at <= sample.at < last_scale_at + SUMMARY_MEMORY_S:
            continue
        if not sample.busy or not sample.service_ms or not sample.rate or not sample.replicas:
            continue
        if LOADED[0] <= sample.busy / (sample.replicas * instances) < LOADED[1]:
            u = utilisation_at_target(sample.service_ms, factor, target_ms)
            return u * instances * sample.rate / sample.busy  # busy / rate: instance-seconds per request
    return None
