"""The batcher settings the compile chose, from the manifest to Triton: the manifest's servingTuning (left out
of the JSON when unset, so older manifests keep their digests), config.pbtxt (a field spec.serving sets always
wins), CompileJob status.servingTuning, the CompileJob's batcherTuning and the scaler's instance count."""

import hashlib
import json

import pytest
from registry_fixtures import make_engine
from tensorkiln.builders import batcher_fields
from tensorkiln.builders.compilejob import build_compile_job
from tensorkiln.builders.tritonconfig import (
    batcher,
    config_dict,
    parse,
    render,
    served_settings,
)
from tensorkiln.controllers.inferencemodel import normalised_spec
from tensorkiln.hardware.classes import HardwareClass
from tensorkiln.scaling.slo import policy_of
from tensorkiln.serving import batcher_choice
from tensorkiln.settings import Settings
from tensorkiln.status.engine import engine_status
from tensorkiln_api import CompileJobSpec, CompileJobStatus
from tensorkiln_api.batching import tuning_for
from tensorkiln_api.inferencemodel import TargetServingStatus
from tensorkiln_api.registry.manifest import (
    BatcherSetting,
    Benchmark,
    EngineManifest,
    InstanceScaling,
    ServingTuning,
    SimulatedLoad,
    canonical_json,
)

from .test_builders import CLASSES, sample_model
from .test_serving_builders import manifest as serving_manifest
from .test_serving_builders import serving_spec_with, unbatched_manifest
from .test_serving_sequence import rank1_sr

# A manifest as the registry holds it from before servingTuning existed (tensorkiln_api.registry.manifest at the
# commit before it, serialised with canonical_json), and the digest it was published under.
OLD_MANIFEST = (
    '{"artifacts":[{"path":"model.onnx","sha256":"' + "b" * 64 + '","size":10}],"calibration":{},"candidates":'
    '[{"accuracy":null,"baseline":true,"benchmarks":[{"batchSize":1,"p50IntervalMs":null,"p50Ms":1.0,'
    '"p95IntervalMs":null,"p95Ms":1.5,"p99IntervalMs":null,"p99Ms":2.0,"runs":20,"stable":null,"threads":2,'
    '"throughputIntervalPerS":null,"throughputPerS":900.0,"warmupRuns":3}],"compiler":"OnnxRuntime","id":"baseline",'
    '"precision":"FP32","reason":"","settings":{},"status":"Selected"}],"compiler":"OnnxRuntime",'
    '"createdAt":"2025-01-01T00:00:00Z","fingerprint":{"cpu":{"usableCpus":2}},"hardwareKind":"CPU","inputs":'
    '[{"dataType":"FP32","dims":[-1,3],"name":"x"}],"key":{"compilerVersion":"0.1.0","hardwareClass":"cpu-test",'
    '"modelDigest":"' + "a" * 64 + '","optionsHash":"0123456789abcdef"},"modelName":"tiny","origin":"compiled",'
    '"outputs":[{"dataType":"FP32","dims":[-1,2],"name":"y"}],"precision":"FP32","preprocessingSteps":[],'
    '"profiles":{"batch":{"max":4,"min":1,"opt":2}},"runtimeVersions":{"onnxruntime":"1.20.0"},"schemaVersion":1,'
    '"selection":{"objective":{"batchSize":1,"metric":"LatencyP95"},"reason":"fastest","speedupVsBaseline":null,'
    '"winner":"baseline"},"sourceUri":"file:///m.onnx"}'
)
OLD_DIGEST = "2e9068c2f272b92efcc9d1d622512e1edd49aa06db5bd96c52293dd39c964efd"


def load(clients: int, throughput: float, p95: float) -> SimulatedLoad:
    return SimulatedLoad(clients=clients, throughput_per_s=throughput, p50_ms=p95 * 0.9, p90_ms=p95 * 0.95,
                         p95_ms=p95, p99_ms=p95 * 1.1, mean_batch=1.0)  # fmt: skip


def tuning(setting: BatcherSetting, max_batch_size: int = 32) -> ServingTuning:
    bench = Benchmark(batch_size=1, p50_ms=1.1, p95_ms=1.2, p99_ms=1.3, throughput_per_s=900.0, threads=2,
                      warmup_runs=3, runs=20)  # fmt: skip
    return ServingTuning(
        setting=setting,
        reason="most throughput at 32 clients ...",
        max_batch_size=max_batch_size,
        service_times=[bench, bench.model_copy(update={"batch_size": 32, "p50_ms": 4.2, "p95_ms": 4.6})],
        instance_scaling=[InstanceScaling(instances=2, batch_size=1, speedup=1.6)],
        simulated=[load(1, 900.0, 1.2), load(8, 4400.0, 1.9), load(32, 7500.0, 4.6)],
        unbatched=[load(1, 900.0, 1.2), load(8, 900.0, 9.0), load(32, 900.0, 36.0)],
        throughput_bound_per_s=7619.0,
    )


TUNED = BatcherSetting(dynamic_batching=True, preferred_batch_sizes=[16], max_queue_delay_microseconds=100, instances=2)
OFF = BatcherSetting(dynamic_batching=False, instances=1)


def tuned_manifest(tmp_path, setting=TUNED, kind="CPU", compiler="OnnxRuntime", **extra) -> EngineManifest:
    base = serving_manifest(tmp_path, compiler, kind)
    return base.model_copy(update={"serving_tuning": tuning(setting, **extra)})


def rendered(manifest: EngineManifest, **serving):
    return parse(render(config_dict("m", manifest, serving_spec_with(**serving))))


# --- the manifest ------------------------------------------------------------------------------------------


def test_a_manifest_from_before_keeps_its_json_and_digest():
    old = EngineManifest.model_validate_json(OLD_MANIFEST)
    assert old.serving_tuning is None
    assert canonical_json(old.to_json_dict()) == OLD_MANIFEST
    assert old.digest() == OLD_DIGEST == hashlib.sha256(OLD_MANIFEST.encode()).hexdigest()
    assert "servingTuning" not in json.loads(old.model_dump_json(by_alias=True))


def test_the_chosen_settings_round_trip_through_the_manifest_and_change_its_digest(tmp_path):
    plain = make_engine(tmp_path).manifest
    tuned = plain.model_copy(update={"serving_tuning": tuning(TUNED)})
    wire = tuned.to_json_dict()
    assert wire["servingTuning"]["setting"] == {
        "dynamicBatching": True, "preferredBatchSizes": [16], "maxQueueDelayMicroseconds": 100, "instances": 2,
    }  # fmt: skip
    assert EngineManifest.model_validate(json.loads(canonical_json(wire))) == tuned
    assert tuned.digest() != plain.digest()


# --- config.pbtxt: a field spec.serving sets wins, the compile's choice fills the rest ------------------


def test_an_engine_without_a_choice_gets_the_fixed_defaults(tmp_path):
    config = rendered(serving_manifest(tmp_path, "OnnxRuntime", "CPU"))
    assert list(config.dynamic_batching.preferred_batch_size) == [8, 16]
    assert config.dynamic_batching.max_queue_delay_microseconds == 2000
    assert config.instance_group[0].count == 1


def test_the_compiles_choice_fills_every_field_the_spec_leaves_unset(tmp_path):
    config = rendered(tuned_manifest(tmp_path))
    assert list(config.dynamic_batching.preferred_batch_size) == [16]
    assert config.dynamic_batching.max_queue_delay_microseconds == 100
    assert config.instance_group[0].count == 2  # a CPU class: per pod


def test_a_field_the_spec_sets_always_wins(tmp_path):
    spec_batching = {"preferredBatchSizes": [4], "maxQueueDelayMicroseconds": 0}
    config = rendered(tuned_manifest(tmp_path), dynamicBatching=spec_batching)
    assert list(config.dynamic_batching.preferred_batch_size) == [4]
    assert config.dynamic_batching.max_queue_delay_microseconds == 0
    assert config.instance_group[0].count == 2  # not set: the compile's
    # One field set, the others the compile's.
    config = rendered(tuned_manifest(tmp_path), dynamicBatching={"maxQueueDelayMicroseconds": 500})
    assert list(config.dynamic_batching.preferred_batch_size) == [16]
    assert config.dynamic_batching.max_queue_delay_microseconds == 500
    # Even a value equal to the old default is the user's (no schema default fills it any more).
    config = rendered(tuned_manifest(tmp_path), dynamicBatching={"maxQueueDelayMicroseconds": 2000})
    assert config.dynamic_batching.max_queue_delay_microseconds == 2000


def test_instances_per_gpu_set_wins_on_a_gpu_class_only(tmp_path):
    gpu = tuned_manifest(tmp_path, kind="GPU", compiler="TensorRT")
    assert rendered(gpu).instance_group[0].count == 2
    assert rendered(gpu, instancesPerGPU=3).instance_group[0].count == 3
    # A CPU class runs the compile's count per pod: instancesPerGPU is per GPU.
    assert rendered(tuned_manifest(tmp_path), instancesPerGPU=3).instance_group[0].count == 2


def test_a_choice_without_batching_turns_the_batcher_off_unless_the_spec_turns_it_on(tmp_path):
    off = tuned_manifest(tmp_path, OFF)
    assert not rendered(off).HasField("dynamic_batching")
    config = rendered(off, dynamicBatching={"enabled": True})
    assert config.HasField("dynamic_batching")
    assert list(config.dynamic_batching.preferred_batch_size) == []  # the compile's: none
    assert config.dynamic_batching.max_queue_delay_microseconds == 0
    # And the spec may turn off what the compile chose.
    assert not rendered(tuned_manifest(tmp_path), dynamicBatching={"enabled": False}).HasField("dynamic_batching")


@pytest.mark.parametrize(
    "batching, preferred, delay, max_queue_size",
    [
        ({"maxQueueDelayMicroseconds": 500}, [], 500, 0),
        ({"preferredBatchSizes": [4]}, [4], 0, 0),
        ({"preferredBatchSizes": []}, [], 0, 0),  # none, set: the batcher forms the largest batches it can
        ({"queuePolicy": {"maxQueueSize": 64}}, [], 0, 64),
    ],
)
def test_a_batcher_setting_the_spec_sets_keeps_the_batcher_on_against_the_compiles_choice(
    tmp_path, batching, preferred, delay, max_queue_size
):
    config = rendered(tuned_manifest(tmp_path, OFF), dynamicBatching=batching)
    assert config.HasField("dynamic_batching")
    assert list(config.dynamic_batching.preferred_batch_size) == preferred  # unset: the compile's (none)
    assert config.dynamic_batching.max_queue_delay_microseconds == delay
    assert config.dynamic_batching.default_queue_policy.max_queue_size == max_queue_size
    status = served(tuned_manifest(tmp_path, OFF), dynamicBatching=batching)
    assert status["scheduler"] == "Dynamic" and status["chosenBy"].startswith("spec: enabled")
    assert "unused" not in status


def test_a_queue_policy_left_at_its_defaults_asks_for_nothing(tmp_path):
    spec = serving_spec_with(dynamicBatching={"queuePolicy": {"timeoutAction": "REJECT", "maxQueueSize": 0}})
    assert batcher_fields.fields_set(spec) == []
    assert not rendered(tuned_manifest(tmp_path, OFF), dynamicBatching=spec["dynamicBatching"]).HasField(
        "dynamic_batching"
    )


STATE = {"state": [{"input": "state", "output": "stateN"}]}
UNUSED = [
    (
        {"dynamicBatching": {"enabled": False, "maxQueueDelayMicroseconds": 500}},
        "spec.serving.dynamicBatching.maxQueueDelayMicroseconds is set but unused: Triton runs no dynamic batcher, "
        "as serving.dynamicBatching.enabled is false; unset it, or unset enabled to batch",
    ),
    (
        {"maxBatchSize": 0, "dynamicBatching": {"enabled": True, "preferredBatchSizes": [],
                                                "maxQueueDelayMicroseconds": 500}},
        "spec.serving.dynamicBatching.enabled, spec.serving.dynamicBatching.preferredBatchSizes and "
        "spec.serving.dynamicBatching.maxQueueDelayMicroseconds are set but unused: Triton runs no dynamic batcher, "
        "as serving.maxBatchSize is 0 (the model is served unbatched); unset them, or set maxBatchSize above 0",
    ),
    (
        {"maxBatchSize": 0, "sequenceBatching": STATE, "dynamicBatching": {"maxQueueDelayMicroseconds": 500}},
        "spec.serving.dynamicBatching.maxQueueDelayMicroseconds is set but unused: Triton runs no dynamic batcher, "
        "as serving.sequenceBatching is set and a model has one scheduler (the sequence batcher's own delay is "
        "serving.sequenceBatching.maxQueueDelayMicroseconds); unset it",
    ),
]  # fmt: skip


@pytest.mark.parametrize("serving, message", UNUSED)
def test_a_batcher_setting_the_spec_runs_no_batcher_for_is_reported_unused_naming_it(tmp_path, serving, message):
    manifest = rank1_sr(unbatched_manifest(tmp_path)) if "sequenceBatching" in serving else tuned_manifest(tmp_path)
    status = served(manifest, **serving)
    assert status["scheduler"] == ("Sequence" if "sequenceBatching" in serving else "None")
    assert "preferredBatchSizes" not in status
    assert status["unused"] == message
    TargetServingStatus.model_validate(status)  # the CRD's schema takes it
    assert batcher_fields.unused(serving_spec_with(**serving)) == (message.split(" ")[0].rstrip(","), message)


def test_an_engine_compiled_unbatched_leaves_the_batcher_settings_unused_until_its_replacement_serves(tmp_path):
    engine = tuned_manifest(tmp_path).model_copy(update={"profiles": {"batched": False}})
    status = served(engine, maxBatchSize=8, dynamicBatching={"maxQueueDelayMicroseconds": 500})
    assert (status["scheduler"], status["maxBatchSize"]) == ("None", 0)
    assert status["unused"] == (
        "spec.serving.dynamicBatching.maxQueueDelayMicroseconds is set but unused: Triton runs no dynamic batcher, "
        "as the engine served was compiled unbatched; used once the engine compiled for serving.maxBatchSize 8 "
        "replaces it"
    )
    # The spec alone leaves nothing unused: admission has nothing to say.
    spec = serving_spec_with(maxBatchSize=8, dynamicBatching={"maxQueueDelayMicroseconds": 500})
    assert batcher_fields.unused(spec) is None


def test_tuned_preferred_sizes_above_a_lowered_max_batch_size_give_way_to_the_defaults(tmp_path):
    config = rendered(tuned_manifest(tmp_path), maxBatchSize=8)
    assert config.max_batch_size == 8
    assert list(config.dynamic_batching.preferred_batch_size) == [8]
    assert config.dynamic_batching.max_queue_delay_microseconds == 100  # the rest of the choice stands


def test_batcher_without_a_manifest_is_the_fixed_defaults():
    serving = normalised_spec(sample_model())["serving"]
    assert batcher(serving, None, gpu=True).instances == 1
    assert batcher(serving, None, gpu=False).preferred_batch_sizes == [8, 16]


def served(manifest: EngineManifest, **serving) -> dict:
    spec = serving_spec_with(**serving)
    chosen = served_settings(config_dict("m", manifest, spec), batcher(spec, manifest, gpu=False), manifest)
    if manifest.serving_tuning is not None and "compile" in chosen["chosenBy"]:
        assert chosen.pop("reason") == manifest.serving_tuning.reason
    else:
        assert "reason" not in chosen
    return chosen


def test_the_inference_models_status_says_what_the_config_sets_and_who_chose_it(tmp_path):
    assert served(tuned_manifest(tmp_path)) == {
        "scheduler": "Dynamic", "maxBatchSize": 32, "preferredBatchSizes": [16], "maxQueueDelayMicroseconds": 100,
        "instances": 2, "chosenBy": "compile: enabled, preferredBatchSizes, maxQueueDelayMicroseconds, instances",
    }  # fmt: skip
    mixed = served(tuned_manifest(tmp_path), dynamicBatching={"maxQueueDelayMicroseconds": 500})
    assert mixed["maxQueueDelayMicroseconds"] == 500
    # A batcher setting the spec sets keeps the batcher on whatever the compile chooses: enabled is the spec's too.
    assert mixed["chosenBy"] == "spec: enabled, maxQueueDelayMicroseconds; compile: preferredBatchSizes, instances"
    old = served(serving_manifest(tmp_path, "OnnxRuntime", "CPU"))
    assert old["preferredBatchSizes"] == [8, 16] and old["chosenBy"].startswith("default: enabled, preferredBatchSizes")
    # The batcher off: only what Triton runs is shown, and why it is off.
    assert served(tuned_manifest(tmp_path, OFF)) == {
        "scheduler": "None", "maxBatchSize": 32, "instances": 1, "chosenBy": "compile: enabled, instances",
    }  # fmt: skip
    assert served(tuned_manifest(tmp_path), dynamicBatching={"enabled": False})["chosenBy"] == (
        "spec: enabled; compile: instances"
    )
    lowered = served(tuned_manifest(tmp_path), maxBatchSize=8)
    assert lowered["preferredBatchSizes"] == [8] and "default: preferredBatchSizes" in lowered["chosenBy"]


def test_a_changed_slo_or_max_batch_size_is_chosen_for_again_from_the_compiles_measurements(tmp_path):
    manifest = tuned_manifest(tmp_path)  # chosen by the lone-client rule, for maxBatchSize 32
    spec = normalised_spec(sample_model())
    spec["serving"]["maxBatchSize"], spec["slo"] = 32, None
    assert batcher_choice.for_spec(manifest, spec) is manifest  # as chosen: nothing to do
    spec["slo"] = {"targetMilliseconds": 2.0, "percentile": "p99"}
    again = batcher_choice.for_spec(manifest, spec).serving_tuning
    fresh = tuning_for(manifest.serving_tuning.service_times, manifest.serving_tuning.instance_scaling, 32, 2.0, "p99")
    assert again.model_copy(update={"reason": fresh.reason}) == fresh
    assert (again.slo_target_ms, again.slo_percentile) == (2.0, "p99")
    assert again.reason.startswith(
        "chosen again from the compile's measurements for SLO p99 2 ms (compiled for none): "
    )
    assert "within the SLO's 2 ms" in again.reason
    spec["serving"]["maxBatchSize"] = 8
    lowered = batcher_choice.for_spec(manifest, spec).serving_tuning
    assert lowered.max_batch_size == 8 and [t.batch_size for t in lowered.service_times] == [1]
    assert lowered.reason.startswith(
        "chosen again from the compile's measurements for maxBatchSize 8 (compiled for 32) and SLO p99 2 ms (compiled for none)"
    )
    assert all(size <= 8 for size in lowered.setting.preferred_batch_sizes)
    # No dynamic batcher to choose for: the manifest as it is.
    spec["serving"]["maxBatchSize"] = 0
    assert batcher_choice.for_spec(manifest, spec) is manifest


# --- status, the CompileJob, the scaler ------------------------------------------------------------------


def test_compile_job_status_shows_the_choice(tmp_path):
    manifest = tuned_manifest(tmp_path)
    fields, _ = engine_status(manifest, "ab" * 32, "file:///r/engines/ab", cache_hit=False)
    summary = fields["servingTuning"]
    assert summary == {
        "dynamicBatching": True,
        "preferredBatchSizes": [16],
        "maxQueueDelayMicroseconds": 100,
        "instances": 2,
        "clients": 32,
        "throughputPerSecond": 7500.0,
        "unbatchedThroughputPerSecond": 900.0,
        "throughputBoundPerSecond": 7619.0,
        "loneClientP95Ms": 1.2,
        "reason": "most throughput at 32 clients ...",
    }
    CompileJobStatus.model_validate({"servingTuning": summary})  # the CRD's schema takes it
    untuned, _ = engine_status(serving_manifest(tmp_path, "OnnxRuntime", "CPU"), "ab" * 32, "u", cache_hit=False)
    assert "servingTuning" not in untuned


def test_compile_job_status_gives_each_candidates_timed_runs():
    manifest = EngineManifest.model_validate_json(OLD_MANIFEST)  # its baseline was timed 20 times at batch 1
    fields, _ = engine_status(manifest, "ab" * 32, "file:///r/engines/ab", cache_hit=False)
    assert fields["candidates"][0]["timedRuns"] == 20
    CompileJobStatus.model_validate({"candidates": fields["candidates"]})  # the CRD's schema takes it


def test_the_compile_job_asks_for_tuning_with_the_slo_outside_the_cache_key():
    model = sample_model()
    spec = normalised_spec(model)
    settings = Settings(registry_uri="file:///var/lib/tensorkiln/registry")
    job = build_compile_job(model, spec, CLASSES["nvidia-l4"], settings)["spec"]
    assert job["batcherTuning"] == {"maxBatchSize": 32, "sloTargetMilliseconds": 25.0, "sloPercentile": "p95"}
    CompileJobSpec.model_validate(job)
    tighter = {**model, "spec": {**model["spec"], "slo": {**model["spec"]["slo"], "targetMilliseconds": 5}}}
    other = build_compile_job(tighter, normalised_spec(tighter), CLASSES["nvidia-l4"], settings)["spec"]
    assert other["batcherTuning"]["sloTargetMilliseconds"] == 5 and other["optionsHash"] == job["optionsHash"]


@pytest.mark.parametrize(
    "serving", [{"maxBatchSize": 0}, {"sequenceBatching": {"state": [{"input": "s_in", "output": "s_out"}]}}]
)
def test_no_tuning_is_asked_when_triton_does_not_run_the_dynamic_batcher(serving):
    model = sample_model()
    model = {**model, "spec": {**model["spec"], "serving": {**model["spec"].get("serving", {}), **serving}}}
    job = build_compile_job(model, normalised_spec(model), CLASSES["nvidia-l4"], Settings(registry_uri="file:///r"))
    assert "batcherTuning" not in job["spec"]


def test_the_scaler_counts_the_instances_triton_runs(tmp_path):
    spec = {"slo": normalised_spec(sample_model())["slo"], "serving": {}}
    cpu = HardwareClass(name="cpu", kind="CPU", product="cpu", node_selector={}, nodes=("local-0",))
    assert policy_of(spec, cpu).instances == 1
    assert policy_of(spec, cpu, tuned_manifest(tmp_path)).instances == 2
