"""Serving settings tuned on the target: the model of Triton's dynamic batcher (batching.simulate), the choice
over its grid (batching.choose), and the compile stage that measures the selected engine for it."""

import time

import pytest
from tensorkiln_api import CompileJobSpec, batching
from tensorkiln_api.batching import (
    CLIENT_TURNAROUND_MS,
    LONE_CLIENT_SLACK,
    SLO,
    UNBATCHED,
    Engine,
    InstanceSpeedup,
    Load,
    ServiceTime,
    Setting,
    _batch_size,
    choose,
    compare,
    engine_of,
    grid,
    setting_of,
    simulate,
    throughput_bound,
)
from tensorkiln_api.registry.manifest import Benchmark, EngineManifest
from tensorkiln_compiler import pipeline, serving_tuning
from tensorkiln_compiler.benchmark import BenchmarkPlan
from tensorkiln_compiler.serving_tuning import curve_sizes

from .compiler_support import compile_spec, conv_classifier, serve_registry

SIZES = (1, 2, 4, 8, 16, 32)


def engine(service_ms, max_batch=32, speedups=(), spread=1.1) -> Engine:
    """An engine whose median service time at batch b is service_ms(b), its p95 `spread` times that."""
    times = tuple(ServiceTime(b, service_ms(b), service_ms(b) * spread) for b in SIZES if b <= max_batch)
    return Engine(times, max_batch, tuple(InstanceSpeedup(*s) for s in speedups))


EFFICIENT = engine(lambda b: 1.0 + 0.1 * b)  # a batch of 32 costs 4.2x one of 1: batching pays
LINEAR = engine(lambda b: 1.0 * b)  # a batch costs what its requests cost alone: batching gains nothing
OLD_DEFAULTS = Setting(True, (8, 16), 2000)  # what every model got before: preferred [8, 16], 2000 µs


# --- the batcher, as Triton's core forms batches ---------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "queued", "waited_ms", "sent"),
    [
        (Setting(True, (8, 16), 2000), 1, 0.0, 0),  # waits for a preferred size ...
        (Setting(True, (8, 16), 2000), 1, 2.0, 1),  # ... until the oldest has waited the delay
        (Setting(True, (8, 16), 2000), 10, 0.0, 8),  # the largest preferred size reached goes at once
        (Setting(True, (8, 16), 2000), 20, 0.0, 16),  # never above the largest preferred size in time ...
        (Setting(True, (8, 16), 2000), 20, 3.0, 20),  # ... but everything queued once the delay ran out
        (Setting(True, (8, 16), 2000), 64, 3.0, 32),  # up to max_batch_size
        (Setting(True, (), 0), 5, 0.0, 5),  # no delay: whatever is queued
        (Setting(True, (), 500), 5, 0.0, 0),  # no preferred size: max_batch_size stands for it
        (Setting(True, (), 500), 40, 0.0, 32),
        (UNBATCHED, 40, 0.0, 1),
    ],
)
def test_batches_form_as_tritons_dynamic_batcher_forms_them(setting, queued, waited_ms, sent):
    assert _batch_size(setting, 32, queued, waited_ms) == sent


def test_the_simulation_is_seeded():
    assert simulate(EFFICIENT, OLD_DEFAULTS, 8, seed=3) == simulate(EFFICIENT, OLD_DEFAULTS, 8, seed=3)
    assert simulate(EFFICIENT, OLD_DEFAULTS, 8, seed=3) != simulate(EFFICIENT, OLD_DEFAULTS, 8, seed=4)


def test_a_lone_client_without_batching_is_served_at_the_engines_own_latency():
    load = simulate(EFFICIENT, UNBATCHED, 1)
    assert load.mean_batch == 1
    assert load.p50_ms == pytest.approx(1.1, rel=0.05)  # the median service time at batch 1
    assert load.throughput_per_s == pytest.approx(1000 / (1.1 + CLIENT_TURNAROUND_MS), rel=0.05)


def test_the_old_defaults_make_a_lone_request_wait_the_whole_delay():
    """Issue 13's measurement: at 1 client the fixed 2000 µs delay halved throughput (185 against 426 req/s:
    a lone request waits for a batch that never comes), for an engine of about 2 ms at batch 1."""
    two_ms = engine(lambda b: 2.0 + 0.2 * b)
    lone, lone_unbatched = simulate(two_ms, OLD_DEFAULTS, 1), simulate(two_ms, UNBATCHED, 1)
    assert lone.p50_ms - lone_unbatched.p50_ms == pytest.approx(2.0, abs=0.05)
    cycle = 2.2 + CLIENT_TURNAROUND_MS  # a lone client's request and turnaround, without the delay
    assert lone.throughput_per_s / lone_unbatched.throughput_per_s == pytest.approx(cycle / (cycle + 2.0), rel=0.05)


def test_more_instances_serve_more_only_as_measured():
    two = Setting(False, instances=2)
    alone = simulate(LINEAR, UNBATCHED, 32).throughput_per_s
    assert simulate(LINEAR, two, 32).throughput_per_s == pytest.approx(alone, rel=0.01)
    gaining = engine(lambda b: 1.0 * b, speedups=[(2, 1, 1.8)])
    gain = simulate(gaining, two, 32).throughput_per_s / simulate(gaining, UNBATCHED, 32).throughput_per_s
    assert gain == pytest.approx(1.8, rel=0.05)


# --- the choice --------------------------------------------------------------------------------------------


def test_an_efficient_engine_batches_at_load_and_adds_nothing_for_a_lone_client():
    choice = choose(EFFICIENT)
    assert choice.setting.dynamic_batching
    lone, *_, high = choice.loads
    assert lone.clients == 1 and high.clients == 32
    assert lone.p95_ms <= choice.unbatched[0].p95_ms * 1.01  # no added delay for a lone request
    assert high.throughput_per_s > 5 * choice.unbatched[-1].throughput_per_s
    assert high.throughput_per_s <= choice.bound_per_s * 1.01
    assert "dynamic batching" in choice.reason and "/s at 32 clients" in choice.reason


def test_an_engine_that_gains_nothing_from_batches_is_served_without_batching():
    choice = choose(LINEAR)
    assert choice.setting == UNBATCHED
    assert choice.reason.startswith("most throughput at 32 clients")


def test_the_choice_beats_the_old_defaults_at_every_load():
    chosen = choose(EFFICIENT)
    for load, old in zip(chosen.loads, [simulate(EFFICIENT, OLD_DEFAULTS, c) for c in (1, 8, 32)]):
        assert load.throughput_per_s >= old.throughput_per_s * 0.97


def test_without_an_slo_a_lone_clients_p95_stays_within_the_slack():
    """A slow engine at batch 1 (10 ms) may wait 2000 µs (1.2x), not 5000."""
    slow = engine(lambda b: 10.0 + 0.1 * b)
    for setting in grid(slow):
        if setting.max_queue_delay_us > 2000 and setting.dynamic_batching and 1 not in setting.preferred_batch_sizes:
            assert simulate(slow, setting, 1).p95_ms > LONE_CLIENT_SLACK * simulate(slow, UNBATCHED, 1).p95_ms
    choice = choose(slow)
    assert choice.loads[0].p95_ms <= LONE_CLIENT_SLACK * choice.unbatched[0].p95_ms


def test_instances_are_chosen_when_they_gain_and_batching_does_not():
    choice = choose(engine(lambda b: 1.0 * b, speedups=[(2, 1, 1.6), (2, 32, 1.6)]))
    assert choice.setting == Setting(False, instances=2)
    # A gain below MIN_INSTANCE_SPEEDUP is noise: one instance.
    assert choose(engine(lambda b: 1.0 * b, speedups=[(2, 1, 1.05)])).setting == UNBATCHED


def test_with_an_slo_the_choice_serves_the_most_within_it():
    """4 ms p95: 32 clients wait for a batch of 32 (4.2 ms) and miss it; 8 clients meet it."""
    slo = SLO(4.0)
    choice = choose(EFFICIENT, slo)
    assert choice.slo == slo and "within the SLO's 4 ms" in choice.reason

    def within(loads):
        return max((load.throughput_per_s for load in loads if load.p95_ms <= slo.target_ms), default=0.0)

    best = within(choice.loads)
    assert best > 0 and choice.loads[0].p95_ms <= slo.target_ms
    for setting in grid(EFFICIENT):  # brute force: nothing in the grid serves more within the SLO
        loads = [simulate(EFFICIENT, setting, c) for c in (1, 8, 32)]
        if loads[0].p95_ms <= slo.target_ms:
            assert within(loads) <= best * 1.03 + 1e-9


def test_clients_taking_turns_keep_instances_that_gain_busy_without_a_preferred_size():
    """Two instances that serve 1.9x one. Clients' unequal turnarounds split them into groups that take turns,
    so both instances get batches with no preferred size to split them (with clients in lockstep, the
    first free instance took all 32 requests and the other idled): the simplest such setting wins."""
    gaining = engine(lambda b: 1.0 + 0.1 * b, speedups=[(2, 1, 1.9), (2, 32, 1.9)])
    choice = choose(gaining)
    assert choice.setting == Setting(True, (), 0, 2)
    one = simulate(gaining, Setting(True, (), 0, 1), 32)
    assert choice.loads[-1].mean_batch < 32 / 2 and choice.loads[-1].throughput_per_s > 1.4 * one.throughput_per_s


def test_the_clients_turnaround_decides_whether_groups_of_clients_stay_whole():
    """Two instances, preferred size 4, 8 clients: real Triton kept groups of 4 in one run and broke them
    in others (tests/integration/test_batcher_model_vs_triton.py); the model does either with the turnaround."""
    fixed = Engine((ServiceTime(1, 20.0, 20.0), ServiceTime(8, 20.0, 20.0)), 8,
                   (InstanceSpeedup(2, 1, 2.0), InstanceSpeedup(2, 8, 2.0)))  # fmt: skip
    fours = Setting(True, (4,), 2000, instances=2)
    tight, loose = simulate(fixed, fours, 8, turnaround_ms=0.25), simulate(fixed, fours, 8, turnaround_ms=2.0)
    assert tight.mean_batch == pytest.approx(4.0, abs=0.1)
    assert loose.mean_batch < 3.0 and loose.throughput_per_s < 0.75 * tight.throughput_per_s


def test_an_slo_no_setting_meets_falls_back_to_the_lone_client_rule():
    choice = choose(EFFICIENT, SLO(0.5))  # below the engine's own latency at batch 1
    assert choice.slo is None
    assert "no setting meets the SLO's 0.5 ms p95 even for a lone client" in choice.reason
    assert choice.loads[0].p95_ms <= LONE_CLIENT_SLACK * choice.unbatched[0].p95_ms


def test_the_choice_is_fast_and_deterministic():
    started = time.perf_counter()
    first = choose(EFFICIENT, SLO(50.0))
    assert time.perf_counter() - started < 2.0  # typically a few tenths of a second, on a loaded node too
    assert choose(EFFICIENT, SLO(50.0)) == first


def test_the_throughput_bound_is_the_best_batch_over_its_latency_times_the_instance_gain():
    assert throughput_bound(EFFICIENT) == pytest.approx(32 * 1000 / 4.2)
    assert throughput_bound(LINEAR) == pytest.approx(1000.0)
    assert throughput_bound(engine(lambda b: 1.0 * b, speedups=[(2, 1, 1.5)])) == pytest.approx(1500.0)
    assert throughput_bound(engine(lambda b: 1.0 + 0.1 * b, max_batch=8)) == pytest.approx(8 * 1000 / 1.8)


def test_compare_reports_how_far_the_model_is_from_real_triton():
    simulated = simulate(EFFICIENT, UNBATCHED, 8)
    real = Load(8, simulated.throughput_per_s * 0.8, 1, 1, simulated.p95_ms * 1.25, 1)
    (deviation,) = compare(EFFICIENT, UNBATCHED, [real])
    assert deviation.throughput_error == pytest.approx(0.25) and deviation.p95_error == pytest.approx(-0.2)
    assert deviation.within(0.25) and not deviation.within(0.2)


# --- the compile stage -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("low", "high", "sizes"), [(1, 1, [1]), (1, 4, [1, 2, 4]), (1, 12, [1, 2, 4, 8, 12])])
def test_the_latency_curve_is_measured_at_powers_of_two_and_the_maximum(low, high, sizes):
    assert curve_sizes(low, high) == sizes


def bench(size: int, p50: float) -> Benchmark:
    return Benchmark(batch_size=size, p50_ms=p50, p95_ms=p50 * 1.1, p99_ms=p50 * 1.2,
                     throughput_per_s=size * 1000 / p50, threads=2, warmup_runs=0, runs=20)  # fmt: skip


def test_the_recorded_choice_is_what_the_model_gives_the_measurements():
    times = [bench(b, 1.0 + 0.1 * b) for b in SIZES]
    tuning = batching.tuning_for(times, [], 32)
    assert tuning.setting.dynamic_batching and tuning.service_times == times
    assert [load.clients for load in tuning.simulated] == [1, 8, 32]
    again = choose(engine_of(tuning))
    assert setting_of(tuning.setting) == again.setting
    assert tuning.simulated[-1].throughput_per_s == pytest.approx(again.loads[-1].throughput_per_s)
    assert tuning.throughput_bound_per_s == pytest.approx(32 * 1000 / 4.2)


def test_a_real_compile_tunes_the_batcher_when_the_compile_job_asks(tmp_path, monkeypatch):
    serve_registry(tmp_path / "registry", monkeypatch)
    monkeypatch.setattr(serving_tuning, "PROBE_S", 0.1)
    model = conv_classifier(tmp_path / "m.onnx")
    body = compile_spec(model, tmp_path / "registry", batcherTuning={"maxBatchSize": 4})
    options = pipeline.Options(BenchmarkPlan(warmup=0, runs=3, min_runs=3, max_runs=6), tune_runtime_settings=False)
    manifest = pipeline.run(CompileJobSpec.model_validate(body), tmp_path / "work", options).manifest
    tuning = manifest.serving_tuning
    assert [t.batch_size for t in tuning.service_times] == [1, 2, 4]  # 1 and 2 from selection, 4 measured after
    assert tuning.max_batch_size == 4 and tuning.slo_target_ms is None
    assert tuning.setting.instances in (1, 2, 4) and tuning.reason
    assert EngineManifest.model_validate(manifest.to_json_dict()) == manifest


def test_without_batcher_tuning_a_compile_records_none(tmp_path, monkeypatch):
    serve_registry(tmp_path / "registry", monkeypatch)
    model = conv_classifier(tmp_path / "m.onnx")
    body = compile_spec(model, tmp_path / "registry")
    options = pipeline.Options(BenchmarkPlan(warmup=0, runs=3), tune_runtime_settings=False)
    manifest = pipeline.run(CompileJobSpec.model_validate(body), tmp_path / "work", options).manifest
    assert manifest.serving_tuning is None and "servingTuning" not in manifest.to_json_dict()
