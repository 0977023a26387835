"""Serving settings tuned on the target: a model of Triton's dynamic batcher driven by the selected
engine's measured latency per batch size, and the search for the batcher and instance settings it
is served with (pure; seeded, so a manifest is reproducible from its measurements).

Why a model: the compile pod has the engine and the node but no Triton, and trying each setting on a
real server would take minutes per setting. The model is fed what the pipeline measures on the node:
the engine's service time at each batch size (one instance running alone), and how much more the
node serves with k instances running at once. `compare` sets it beside figures measured with real
Triton (tests/integration/test_batcher_model_vs_triton.py, on a SIMULATED engine of known batch time:
the batches match, the throughput runs 7-24% high, what gRPC and Triton add to each batch). It is not
yet checked on a real engine, where the service times measured by the compile carry the error too.

The batcher, as Triton's core implements it (dynamic_batch_scheduler.cc, GetDynamicBatch), for
requests of one inference each:
- it forms a batch when an instance is free; while every instance is busy, requests queue;
- the largest preferred size the queue reaches is sent at once; so is a batch that reaches the
  largest preferred size (without preferred sizes: max_batch_size);
- otherwise it waits until the oldest request has waited max_queue_delay (0: it never waits), then
  sends everything queued, up to max_batch_size, beyond the preferred sizes.
Instances share the device: a batch that starts while m instances are busy (itself included) takes
its service time times m / speedup(m), the measured gain of m instances at that batch size. Batches
already running keep their pace (the one that starts takes the whole slowdown): an approximation.
Clients: closed loop, as perf_analyzer's concurrency mode and e2e/bench_serving.py load Triton: each
of c clients sends its next request once its response has arrived, and that turnaround (gRPC both
ways, the client's own work) is neither zero nor equal: exponential, mean CLIENT_TURNAROUND_MS. It
matters: with c no more than max_batch_size x instances, clients fall into groups that take turns,
one group's requests queuing while the other's batch runs and leaving as soon as it ends, so
batches hold about c / (instances + 1) requests, not c. A model with no turnaround sent every
batch full and put 8 clients at 400/s where real Triton served 177-185/s (a SIMULATED 20 ms engine,
tests/integration/test_batcher_model_vs_triton.py). The turnaround's spread decides whether groups
stay whole: with 2 instances and a preferred size of 4, 8 clients kept groups of 4 in one real run
(mean batch 3.74) and broke them in others (2.7), as the model does below a 0.25 ms mean turnaround
and above 0.5 ms; `compare` takes the turnaround for that reason. Both are steady states, in Triton as
in the model: one instance and 8 clients ran in batches of 4 in most real runs and in one merged into
8 partway through a 4 s window (mean 6.29). Service times: lognormal around the
measured median, with the measured p95, so a setting's p95 carries the engine's own jitter.

The choice (`choose`), over a small grid (batcher off, or on with a queue delay and one preferred size
or none, times the instance counts measured): the setting with the most throughput at the highest
load, among those whose p95 for a lone client stays within LONE_CLIENT_SLACK of serving without
batching (a lone request must not wait for a batch that never comes: with the old fixed 2000 µs delay
it waited that long at every request); with an SLO, the most throughput at any load whose latency at
the SLO's percentile meets the target. Settings within TIE of the best count as equal, and the
simplest of them wins: fewer instances, the batcher off, a shorter delay, no preferred size.
"""

from __future__ import annotations

import functools
import heapq
import math
import random
from collections import deque
from dataclasses import asdict, dataclass

from tensorkiln_api.registry.manifest import BatcherSetting, Benchmark, InstanceScaling, ServingTuning, SimulatedLoad

QUEUE_DELAYS_US = (0, 100, 500, 1000, 2000, 5000)
LOADS = (1, 8, 32)  # concurrent clients: a lone one, a moderate load, a high one
LONE_CLIENT_SLACK = 1.2  # p95 at 1 client within this factor of serving without batching
TIE = 0.03  # throughputs within 3% are equal: the simulation's own spread
MIN_INSTANCE_SPEEDUP = 1.1  # more instances are tried only when measured to serve 10% more
CLIENT_TURNAROUND_MS = 0.5  # mean; real Triton's batches are matched from 0.5 to 4 ms alike
Z95 = 1.6449  # the standard normal's 95th percentile
ARRIVAL = ()  # an event: a client's request reaches the batcher (a batch is never empty)
PERCENTILES = {"p50": 50, "p90": 90, "p95": 95, "p99": 99}


@dataclass(frozen=True)
class ServiceTime:
    """One instance running one batch alone, as the benchmark measured it."""

    batch_size: int
    p50_ms: float
    p95_ms: float


@dataclass(frozen=True)
class InstanceSpeedup:
    """Inferences per second of `instances` instances running at once over one running alone."""

    instances: int
    batch_size: int
    speedup: float


@dataclass(frozen=True)
class Engine:
    """What the model knows of the engine on its node."""

    service_times: tuple[ServiceTime, ...]  # by batch size, one instance alone
    max_batch_size: int  # Triton's max_batch_size
    instance_speedups: tuple[InstanceSpeedup, ...] = ()  # none: one instance only

    def p50_ms(self, batch: int) -> float:
        return _interpolate(self.service_times, batch, "p50_ms")

    def spread(self, batch: int) -> float:
        """The lognormal sigma that puts the measured p95 at Z95 sigmas above the median."""
        p50, p95 = self.p50_ms(batch), _interpolate(self.service_times, batch, "p95_ms")
        return min(1.0, max(0.0, math.log(max(p95, p50) / p50) / Z95))

    def speedup(self, instances: int, batch: int) -> float:
        """The measured gain of `instances` at `batch`, interpolated over log2 of the batch sizes measured."""
        if instances == 1:
            return 1.0
        points = sorted((s.batch_size, s.speedup) for s in self.instance_speedups if s.instances == instances)
        if not points:
            return 1.0
        if batch <= points[0][0]:
            return points[0][1]
        for (b0, s0), (b1, s1) in zip(points, points[1:]):
            if batch <= b1:
                share = (math.log2(batch) - math.log2(b0)) / (math.log2(b1) - math.log2(b0))
                return s0 + share * (s1 - s0)
        return points[-1][1]

    def instance_counts(self) -> list[int]:
        """1, and each count measured to serve MIN_INSTANCE_SPEEDUP more at some batch size."""
        gains = {}
        for s in self.instance_speedups:
            gains[s.instances] = max(gains.get(s.instances, 0.0), s.speedup)
        return [1] + sorted(k for k, gain in gains.items() if k > 1 and gain >= MIN_INSTANCE_SPEEDUP)


def _interpolate(points: tuple[ServiceTime, ...], batch: int, field: str) -> float:
    """Linear between the measured batch sizes; beyond them, along the nearest segment, never falling
    with the batch size above the largest one measured (a timing's noise can tilt that segment)."""
    ordered = sorted(points, key=lambda p: p.batch_size)
    if len(ordered) == 1:  # one size measured: assume each further item costs as much
        only = ordered[0]
        return getattr(only, field) * batch / only.batch_size
    if batch <= ordered[0].batch_size:
        low, high = ordered[0], ordered[1]
    else:
        low, high = next(((a, b) for a, b in zip(ordered, ordered[1:]) if batch <= b.batch_size), ordered[-2:])
    y0, y1 = getattr(low, field), getattr(high, field)
    slope = (y1 - y0) / (high.batch_size - low.batch_size)
    if batch > high.batch_size:
        slope = max(slope, 0.0)
    return max(1e-6, y0 + slope * (batch - low.batch_size))


@dataclass(frozen=True, order=True)
class Setting:
    """What config.pbtxt sets: the dynamic batcher (or none) and the instance count."""

    dynamic_batching: bool
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int = 0
    instances: int = 1

    def batcher_setting(self) -> BatcherSetting:
        """As the manifest records it."""
        return BatcherSetting(
            dynamic_batching=self.dynamic_batching,
            preferred_batch_sizes=list(self.preferred_batch_sizes),
            max_queue_delay_microseconds=self.max_queue_delay_us,
            instances=self.instances,
        )

    def describe(self) -> str:
        return self.batcher_setting().describe()


UNBATCHED = Setting(dynamic_batching=False)


@dataclass(frozen=True)
class Load:
    """One simulated (or measured) load: `clients` closed-loop clients."""

    clients: int
    throughput_per_s: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    mean_batch: float = 1.0

    def latency_ms(self, percentile: str) -> float:
        return getattr(self, f"{percentile}_ms")


def _percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def _batch_size(setting: Setting, max_batch: int, queued: int, waited_ms: float) -> int:
    """How many queued requests the batcher sends now to a free instance; 0: it waits (module docstring)."""
    if not setting.dynamic_batching:
        return 1
    n = min(queued, max_batch)
    preferred = [p for p in setting.preferred_batch_sizes if p <= max_batch]
    delay_ms = setting.max_queue_delay_us / 1000.0
    exceeded = delay_ms > 0 and waited_ms >= delay_ms - 1e-9
    best = max((p for p in preferred if p <= n), default=0)
    if best and not exceeded:
        return best
    if n >= (max(preferred) if preferred else max_batch) or exceeded or delay_ms == 0:
        return n
    return 0


def requests_for(clients: int) -> int:
    """Measured requests per simulated load: enough for a p95 of a few hundred samples at the least."""
    return max(400, 40 * clients)


def simulate(
    engine: Engine,
    setting: Setting,
    clients: int,
    seed: int = 0,
    requests: int | None = None,
    turnaround_ms: float = CLIENT_TURNAROUND_MS,
) -> Load:
    """`clients` closed-loop clients, each taking a mean `turnaround_ms` between a response and its next
    request, against Triton serving `engine` with `setting` (module docstring). The first 2 rounds of
    requests are a warm-up; the noise is drawn per batch from one seeded stream per load, so settings
    are compared on the same draws."""
    rng = random.Random(seed * 1_000_003 + clients)
    max_batch = engine.max_batch_size if setting.dynamic_batching else 1
    delay_ms = setting.max_queue_delay_us / 1000.0
    warmup, measured = 2 * clients, requests or requests_for(clients)

    # The interpolations are the costly part: each (busy count, batch size) once.
    @functools.cache
    def scale(busy: int, size: int) -> tuple[float, float]:
        return engine.p50_ms(size) * busy / engine.speedup(busy, size), engine.spread(size)

    queue: deque[float] = deque()  # arrival times (ms) of the waiting requests
    # (time, order, what: a batch's arrivals when it ends, ARRIVAL, or None: the queue delay's timer)
    events: list[tuple[float, int, tuple[float, ...] | None]] = []
    busy, order, timer_at, done = 0, 0, None, 0

    def send(count: int, at: float) -> None:
        nonlocal order
        for _ in range(count):
            order += 1
            heapq.heappush(events, (at + rng.expovariate(1.0 / turnaround_ms), order, ARRIVAL))

    send(clients, 0.0)
    latencies: list[float] = []
    batches: list[int] = []
    started_ms: float | None = None
    now = 0.0
    while True:
        while busy < setting.instances and queue:
            size = _batch_size(setting, max_batch, len(queue), now - queue[0])
            if size == 0:  # wait for the oldest request's delay to run out (or for more requests)
                due = queue[0] + delay_ms
                if timer_at != due:
                    timer_at, order = due, order + 1
                    heapq.heappush(events, (due, order, None))
                break
            batch = tuple(queue.popleft() for _ in range(size))
            busy += 1
            median, spread = scale(busy, size)
            service = median * math.exp(spread * rng.gauss(0.0, 1.0))
            order += 1
            heapq.heappush(events, (now + service, order, batch))
        now, _, batch = heapq.heappop(events)
        if batch is ARRIVAL:
            queue.append(now)
            continue
        if batch is None:
            timer_at = None if timer_at == now else timer_at
            continue
        busy -= 1
        send(len(batch), now)  # each client's next request
        if started_ms is None:  # measuring starts at a batch's end, so that no batch counts in part
            done += len(batch)
            started_ms = now if done >= warmup else None
            continue
        latencies.extend(now - arrival for arrival in batch)
        batches.append(len(batch))
        if len(latencies) >= measured:
            break
    ordered = sorted(latencies)
    return Load(
        clients=clients,
        throughput_per_s=len(latencies) * 1000.0 / max(now - started_ms, 1e-9),
        **{f"{name}_ms": _percentile(ordered, q) for name, q in PERCENTILES.items()},
        mean_batch=sum(batches) / len(batches),
    )


@dataclass(frozen=True)
class SLO:
    """spec.slo: the latency target at a percentile."""

    target_ms: float
    percentile: str = "p95"


@dataclass(frozen=True)
class Choice:
    """The setting chosen, the figures the model gives it, and why."""

    setting: Setting
    loads: tuple[Load, ...]  # the chosen setting at each of LOADS
    unbatched: tuple[Load, ...]  # no batching, one instance, at each of LOADS: the reference
    bound_per_s: float  # throughput_bound
    slo: SLO | None  # what it was chosen for; None: the lone-client rule
    reason: str


def throughput_bound(engine: Engine) -> float:
    """The throughput (inferences/s) the engine's own batch efficiency allows on this node: the best
    of batch size / service time over the batch sizes measured, times the best measured instance gain."""
    return max(
        t.batch_size * 1000.0 / t.p50_ms * max([engine.speedup(k, t.batch_size) for k in engine.instance_counts()])
        for t in engine.service_times
        if t.batch_size <= engine.max_batch_size
    )


def grid(engine: Engine) -> list[Setting]:
    """The settings tried: the batcher off, or on with each queue delay and no preferred size or one of
    the batch sizes measured (2 and up), each with every instance count worth trying."""
    counts = engine.instance_counts()
    settings = [Setting(False, instances=k) for k in counts]
    if engine.max_batch_size < 2:
        return settings
    sizes = sorted({t.batch_size for t in engine.service_times if 2 <= t.batch_size <= engine.max_batch_size})
    preferred = [()] + [(b,) for b in sizes]
    return settings + [Setting(True, p, d, k) for d in QUEUE_DELAYS_US for p in preferred for k in counts]


def _lone_wait_us(setting: Setting, max_batch: int) -> int:
    """How long the batcher holds a lone request: the delay, unless a batch of one is sent at once."""
    if not setting.dynamic_batching or setting.max_queue_delay_us == 0 or max_batch == 1:
        return 0
    return 0 if 1 in setting.preferred_batch_sizes else setting.max_queue_delay_us


def _simplicity(setting: Setting, high_load: Load) -> tuple:
    """Fewer instances, no batcher, a shorter delay, no preferred size; then the lowest p95 at high load."""
    batcher = (setting.dynamic_batching, setting.max_queue_delay_us, bool(setting.preferred_batch_sizes))
    return (setting.instances, *batcher, high_load.p95_ms, setting)


def choose(engine: Engine, slo: SLO | None = None, seed: int = 0) -> Choice:
    """The setting to serve `engine` with (module docstring), with its simulated figures and why."""
    settings = grid(engine)
    # A lone client sends one request at a time: only how long the batcher holds it matters.
    lone_wait = {s: _lone_wait_us(s, engine.max_batch_size) for s in settings}
    lone = {wait: simulate(engine, Setting(True, (), wait) if wait else UNBATCHED, 1, seed)
            for wait in sorted(set(lone_wait.values()))}  # fmt: skip
    reference = lone[0]

    def meets(load: Load) -> bool:
        return load.latency_ms(slo.percentile) <= slo.target_ms

    pool = [s for s in settings if slo and meets(lone[lone_wait[s]])]
    if pool:
        rule = f"most throughput with {slo.percentile} within the SLO's {slo.target_ms:g} ms"
    else:
        limit = LONE_CLIENT_SLACK * reference.p95_ms
        pool = [s for s in settings if lone[lone_wait[s]].p95_ms <= limit]
        rule = f"most throughput at {LOADS[-1]} clients with p95 at 1 client within {LONE_CLIENT_SLACK:g}x no batching"
        if slo:
            rule += f" (no setting meets the SLO's {slo.target_ms:g} ms {slo.percentile} even for a lone client)"
            slo = None
    figures = {s: (lone[lone_wait[s]], *(simulate(engine, s, c, seed) for c in LOADS[1:])) for s in pool}

    def score(setting: Setting) -> float:
        loads = figures[setting]
        if slo:  # the most any load within the target gets
            return max((load.throughput_per_s for load in loads if meets(load)), default=0.0)
        return loads[-1].throughput_per_s

    best = max(score(s) for s in pool)
    chosen = min((s for s in pool if score(s) >= (1 - TIE) * best), key=lambda s: _simplicity(s, figures[s][-1]))
    loads = figures[chosen]
    unbatched = figures.get(UNBATCHED) or (reference, *(simulate(engine, UNBATCHED, c, seed) for c in LOADS[1:]))
    bound = throughput_bound(engine)
    reason = (
        f"{rule}: {chosen.describe()}: {loads[-1].throughput_per_s:.0f}/s at {LOADS[-1]} clients "
        f"(no batching {unbatched[-1].throughput_per_s:.0f}/s; the engine's batch efficiency allows {bound:.0f}/s), "
        f"p95 at 1 client {loads[0].p95_ms:.2f} ms (no batching {reference.p95_ms:.2f} ms)"
    )
    return Choice(chosen, loads, unbatched, bound, slo, reason)


def engine_of(tuning: ServingTuning) -> Engine:
    """The model's view of an engine from what its manifest records (manifest.servingTuning)."""
    return Engine(
        service_times=tuple(ServiceTime(t.batch_size, t.p50_ms, t.p95_ms) for t in tuning.service_times),
        max_batch_size=tuning.max_batch_size,
        instance_speedups=tuple(InstanceSpeedup(s.instances, s.batch_size, s.speedup) for s in tuning.instance_scaling),
    )


def setting_of(setting: BatcherSetting) -> Setting:
    return Setting(setting.dynamic_batching, tuple(setting.preferred_batch_sizes),
                   setting.max_queue_delay_microseconds, setting.instances)  # fmt: skip


def tuning_for(
    times: list[Benchmark],
    scaling: list[InstanceScaling],
    max_batch_size: int,
    slo_target_ms: float | None = None,
    slo_percentile: str = "p95",
) -> ServingTuning:
    """`choose` on what was measured, as the manifest records it (pure)."""
    measured = ServingTuning(  # the measurements alone first: engine_of reads them so
        setting=BatcherSetting(dynamic_batching=False), reason="", max_batch_size=max_batch_size,
        slo_target_ms=slo_target_ms, slo_percentile=slo_percentile, service_times=times, instance_scaling=scaling,
        simulated=[], unbatched=[], throughput_bound_per_s=0.0,
    )  # fmt: skip
    choice = choose(engine_of(measured), SLO(slo_target_ms, slo_percentile) if slo_target_ms else None)
    return measured.model_copy(
        update={
            "setting": choice.setting.batcher_setting(),
            "reason": choice.reason,
            "simulated": [SimulatedLoad.model_validate(asdict(load)) for load in choice.loads],
            "unbatched": [SimulatedLoad.model_validate(asdict(load)) for load in choice.unbatched],
            "throughput_bound_per_s": choice.bound_per_s,
        }
    )


def retuned(
    tuning: ServingTuning, max_batch_size: int, slo_target_ms: float | None, slo_percentile: str
) -> ServingTuning:
    """The compile's measurements chosen from again for another serving.maxBatchSize or spec.slo (the operator's,
    when the spec changed since the compile: no new compile is needed, the choice is pure); `tuning` itself when
    it was chosen for these, or when it measured no batch size up to max_batch_size. Above the largest batch size
    measured, service times are extrapolated (_interpolate)."""
    times = tuple(t.model_dump_json() for t in tuning.service_times if t.batch_size <= max_batch_size)
    asked = (max_batch_size, slo_target_ms, slo_percentile)
    if not times or (tuning.max_batch_size, tuning.slo_target_ms, tuning.slo_percentile) == asked:
        return tuning
    scaling = tuple(s.model_dump_json() for s in tuning.instance_scaling)
    chosen = _retuned(times, scaling, max_batch_size, slo_target_ms, slo_percentile)

    def slo(target: float | None, percentile: str) -> str:
        return f"{percentile} {target:g} ms" if target else "none"

    changed = []
    if max_batch_size != tuning.max_batch_size:
        changed.append(f"maxBatchSize {max_batch_size} (compiled for {tuning.max_batch_size})")
    if (slo_target_ms, slo_percentile) != (tuning.slo_target_ms, tuning.slo_percentile):
        before = slo(tuning.slo_target_ms, tuning.slo_percentile)
        changed.append(f"SLO {slo(slo_target_ms, slo_percentile)} (compiled for {before})")
    reason = f"chosen again from the compile's measurements for {' and '.join(changed)}: {chosen.reason}"
    return chosen.model_copy(update={"reason": reason})


@functools.lru_cache(maxsize=256)  # the operator asks at every reconcile; a choice takes tenths of a second
def _retuned(
    times: tuple[str, ...], scaling: tuple[str, ...], max_batch_size: int, slo_target_ms: float | None, percentile: str
) -> ServingTuning:
    """retuned, on the measurements as JSON (pydantic models are not hashable)."""
    return tuning_for([Benchmark.model_validate_json(t) for t in times],
                      [InstanceScaling.model_validate_json(s) for s in scaling],
                      max_batch_size, slo_target_ms, percentile)  # fmt: skip


@dataclass(frozen=True)
class Deviation:
    """The model beside real Triton at one load."""

    clients: int
    simulated: Load
    measured: Load
    throughput_error: float  # (simulated - measured) / measured
    p95_error: float

    def within(self, tolerance: float) -> bool:
        return abs(self.throughput_error) <= tolerance and abs(self.p95_error) <= tolerance


def compare(
    engine: Engine,
    setting: Setting,
    measured: list[Load],
    seed: int = 0,
    turnaround_ms: float = CLIENT_TURNAROUND_MS,
) -> list[Deviation]:
    """The model's figures for `setting`, with clients of mean `turnaround_ms`, beside `measured`, real
    Triton's at the same client counts (e.g.
    e2e/bench_serving.py's, with Triton configured as `setting`, on the node the engine was compiled on):
    how far the model is off, per load. For an engine from the registry:
    compare(engine_of(manifest.serving_tuning), setting_of(manifest.serving_tuning.setting), measured)."""
    deviations = []
    for real in measured:
        simulated = simulate(engine, setting, real.clients, seed, turnaround_ms=turnaround_ms)
        deviations.append(
            Deviation(
                clients=real.clients,
                simulated=simulated,
                measured=real,
                throughput_error=(simulated.throughput_per_s - real.throughput_per_s) / real.throughput_per_s,
                p95_error=(simulated.p95_ms - real.p95_ms) / real.p95_ms,
            )
        )
    return deviations
