"""spec.serving.sequenceBatching: what admission alone can check (the graph is the compiler's), with the
exact messages, and the dynamic batcher it switches off when dynamicBatching.enabled is left unset."""

import pytest
from tensorkiln.builders.compilejob import build_compile_job, compilers_for
from tensorkiln.controllers.inferencemodel import normalised_spec
from tensorkiln.settings import Settings
from tensorkiln_api import InferenceModelSpec

from .cel_admission import refusals
from .test_api_models import errors_of, spec_with
from .test_builders import CLASSES, sample_model

STATE = [{"input": "state", "output": "stateN"}]
EXCLUSIVE = (
    "spec.serving.sequenceBatching: sequenceBatching and serving.dynamicBatching.enabled: true are mutually "
    "exclusive (Triton schedules a model with one batcher); unset dynamicBatching.enabled or set it to false"
)


def sequence(**fields) -> dict:
    return spec_with(**{"serving.maxBatchSize": 0, "serving.sequenceBatching": {"state": STATE, **fields}})


def test_sequence_batching_defaults_and_switches_the_dynamic_batcher_off():
    spec = InferenceModelSpec.model_validate(sequence())
    batcher = spec.serving.sequence_batching
    assert (batcher.strategy, batcher.max_sequence_idle_microseconds, batcher.state_kept_by) == ("Oldest", 10**6,
                                                                                                "Triton")  # fmt: skip
    assert batcher.max_queue_delay_microseconds == 0 and batcher.max_candidate_sequences is None
    # enabled stays unset (it is derived per class: builders.tritonconfig.batcher), and reads as off.
    assert spec.serving.dynamic_batching.enabled is None and spec.serving.dynamic_batching_on() is False
    assert InferenceModelSpec.model_validate(spec_with()).serving.dynamic_batching_on() is True
    assert refusals(sequence()) == []


def test_dynamic_batching_enabled_with_sequence_batching_is_refused_naming_both():
    spec = sequence()
    spec["serving"]["dynamicBatching"] = {"enabled": True}
    assert errors_of(spec) == [EXCLUSIVE]
    assert [str(r) for r in refusals(spec)] == [EXCLUSIVE]
    spec["serving"]["dynamicBatching"] = {"enabled": False}
    assert InferenceModelSpec.model_validate(spec).serving.dynamic_batching.enabled is False
    assert refusals(spec) == []


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"state": []}, "spec.serving.sequenceBatching.state: List should have at least 1 item after validation"),
        (
            {"state": [*STATE, {"input": "state", "output": "other"}]},
            "spec.serving.sequenceBatching.state: state has duplicate entries for input=state",
        ),
        ({"strategy": "Newest"}, "spec.serving.sequenceBatching.strategy: Input should be 'Direct' or 'Oldest'"),
        ({"stateKeptBy": "Server"}, "spec.serving.sequenceBatching.stateKeptBy: Input should be 'Triton' or 'Client'"),
        (
            {"maxSequenceIdleMicroseconds": 0},
            "spec.serving.sequenceBatching.maxSequenceIdleMicroseconds: Input should be greater than or equal to 1",
        ),
        ({"controlInputs": {"start": ""}}, "spec.serving.sequenceBatching.controlInputs.start: String should have"),
    ],
)
def test_refusals_name_the_field(fields, expected):
    spec = sequence(**fields)
    assert any(e.startswith(expected) for e in errors_of(spec)), errors_of(spec)


def test_preferred_sizes_are_not_held_against_max_batch_size_while_the_sequence_batcher_schedules():
    spec = sequence()
    spec["serving"]["dynamicBatching"] = {"preferredBatchSizes": [16]}  # maxBatchSize is 0: unused, not refused
    assert InferenceModelSpec.model_validate(spec).serving.dynamic_batching_on() is False
    assert refusals(spec) == []


def test_the_compile_job_carries_it_and_implicit_state_compiles_cpu_with_onnxruntime_only():
    model = sample_model()
    model["spec"]["serving"] = {"maxBatchSize": 0, "sequenceBatching": {"state": STATE}}
    model["spec"]["compile"] = {"objective": {"metric": "LatencyP95"}}
    spec = normalised_spec(model)
    cpu = next(c for c in CLASSES.values() if c.kind == "CPU")
    native = build_compile_job(model, spec, cpu, Settings())["spec"]
    assert native["sequenceBatching"] == spec["serving"]["sequenceBatching"]
    assert native["sequenceBatching"]["state"] == STATE and native["batched"] is False
    assert native["compilers"] == ["OnnxRuntime"]  # Triton's OpenVINO backend has no implicit state
    assert native["optionsHash"] != build_compile_job(sample_model(), normalised_spec(sample_model()), cpu,
                                                      Settings())["spec"]["optionsHash"]  # fmt: skip
    spec["serving"]["sequenceBatching"]["stateKeptBy"] = "Client"
    assert compilers_for(spec, "CPU") == ["OnnxRuntime", "OpenVINO"]
    assert "sequenceBatching" not in build_compile_job(sample_model(), normalised_spec(sample_model()), cpu,
                                                       Settings())["spec"]  # fmt: skip
