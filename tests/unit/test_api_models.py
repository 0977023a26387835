"""The API models: defaults, camelCase wire format, Python mirrors of the CEL rules, conditions."""

import copy
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError
from tensorkiln.builders.tritonconfig import batcher
from tensorkiln.status.conditions import condition, merge_conditions
from tensorkiln_api import (
    CompileJobSpec,
    CompileJobStatus,
    Condition,
    HardwareMode,
    InferenceModelSpec,
    InferenceModelStatus,
    field_errors,
)
from tensorkiln_api.common import Calibration

URI = "https://models.example.com/resnet50/model.onnx"
MINIMAL = {"source": {"uri": URI}}


def spec_with(**overrides) -> dict:
    """MINIMAL with dotted-path overrides: spec_with(**{"shapes.batch.min": 0})."""
    spec = copy.deepcopy(MINIMAL)
    for path, value in overrides.items():
        *parents, leaf = path.split(".")
        node = spec
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return spec


def errors_of(spec: dict) -> list[str]:
    with pytest.raises(ValidationError) as caught:
        InferenceModelSpec.model_validate(spec)
    return field_errors(caught.value)


def test_defaults():
    spec = InferenceModelSpec.model_validate(MINIMAL)
    assert (spec.shapes.batch.min, spec.shapes.batch.opt, spec.shapes.batch.max) == (1, 8, 32)
    assert spec.hardware.mode == HardwareMode.AUTO and spec.hardware.include_cpu is False
    assert spec.compile.precisions is None  # the compiler takes what its node runs natively
    assert spec.compile.compilers.gpu == "TensorRT"
    assert spec.compile.compilers.cpu == ["OnnxRuntime", "OpenVINO"]
    assert (spec.compile.deadline_seconds, spec.compile.retries) == (3600, 2)
    assert spec.compile.accuracy.min_cosine_similarity == 0.99
    assert spec.compile.objective.metric == "LatencyP95" and spec.compile.objective.batch_size == 1
    assert spec.serving.image is None  # the operator's serving image (Settings.serving_image)
    assert spec.compile.resources is None  # builders.compilejob.DEFAULT_RESOURCES
    assert spec.serving.max_batch_size == 32
    # Unset, and left unset: derived per hardware class from its engine (builders.tritonconfig.batcher).
    batching = spec.serving.dynamic_batching
    assert spec.serving.instances_per_gpu is None and batching.enabled is None
    assert batching.preferred_batch_sizes is None and batching.max_queue_delay_microseconds is None
    assert spec.serving.dynamic_batching.queue_policy.timeout_action == "REJECT"
    assert spec.rollout.max_surge == "25%" and spec.rollout.keep_previous_engine is True
    assert spec.slo is None and spec.io is None and spec.source.format == "onnx"


def test_slo_defaults():
    slo = InferenceModelSpec.model_validate(spec_with(**{"slo.targetMilliseconds": 25})).slo
    assert (slo.percentile, slo.min_replicas, slo.max_replicas, slo.mode) == ("p95", 1, 10, "Operator")
    assert (slo.scale_up_stabilization_seconds, slo.scale_down_stabilization_seconds) == (0, 300)
    assert slo.placement == "PerClass"


def test_camel_case_round_trip():
    spec = InferenceModelSpec.model_validate(
        spec_with(**{"hardware.includeCPU": True, "serving.instancesPerGPU": 2, "slo.targetMilliseconds": 25})
    )
    wire = spec.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert wire["hardware"]["includeCPU"] is True
    assert wire["serving"]["instancesPerGPU"] == 2
    assert "maxQueueDelayMicroseconds" not in wire["serving"]["dynamicBatching"]  # unset: the compile's choice
    assert wire["slo"]["scaleDownStabilizationSeconds"] == 300
    assert "precisions" not in wire["compile"]  # unset: from the compile node's hardware
    assert "sha256" not in wire["source"]  # exclude_none: unset optionals stay off the wire
    assert InferenceModelSpec.model_validate(wire) == spec


def test_python_names_are_accepted_too():
    spec = InferenceModelSpec(source={"uri": URI}, hardware={"include_cpu": True})
    assert spec.hardware.include_cpu is True


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"shapes.batch.min": 0}, "spec.shapes.batch.min"),
        (
            {"shapes.batch.min": 4, "shapes.batch.opt": 2, "compile.objective.batchSize": 4},
            "spec.shapes.batch.min: min must be <= opt",
        ),
        ({"shapes.batch.opt": 64, "shapes.batch.max": 32}, "spec.shapes.batch.opt: opt must be <= max"),
        ({"shapes.batch.min": 64, "shapes.batch.max": 32}, "spec.shapes.batch.min: min must be <= max"),
        (
            {"shapes.dynamicDims": [{"input": "ids", "axis": 1, "min": 8, "opt": 4, "max": 16}]},
            "spec.shapes.dynamicDims[0].min: min must be <= opt",
        ),
        ({"hardware.mode": "Explicit"}, "spec.hardware.pools: pools must not be empty when mode is Explicit"),
        (
            {
                "hardware.mode": "Explicit",
                "hardware.pools": [
                    {"name": "a", "nodeSelector": {"x": "1"}},
                    {"name": "a", "nodeSelector": {"x": "2"}},
                ],
            },
            "spec.hardware.pools: pools has duplicate entries for name=a",
        ),
        ({"hardware.pools": [{"name": "Not_A_Label", "nodeSelector": {"x": "1"}}]}, "spec.hardware.pools[0].name"),
        ({"hardware.pools": [{"name": "a", "nodeSelector": {}}]}, "spec.hardware.pools[0].nodeSelector"),
        (
            {"compile.precisions": ["FP16", "FP16"]},
            "spec.compile.precisions: precisions has duplicate entries for FP16",
        ),
        ({"compile.precisions": []}, "spec.compile.precisions"),
        (
            {"compile.objective.metric": "Throughput"},
            "spec.compile.objective.latencyBudgetMilliseconds: latencyBudgetMilliseconds is required",
        ),
        (
            {"compile.objective.batchSize": 64, "shapes.batch.max": 32},
            "spec.compile.objective.batchSize: compile.objective.batchSize must be within",
        ),
        (
            {"compile.objective.batchSize": 2, "shapes.batch.min": 4},
            "spec.compile.objective.batchSize: compile.objective.batchSize must be within",
        ),
        (
            {"compile.objective.batchSize": 2, "serving.maxBatchSize": 0},
            "spec.compile.objective.batchSize: compile.objective.batchSize must be 1 when serving.maxBatchSize is 0",
        ),
        ({"compile.calibration": {"datasetUri": "ftp://x"}}, "spec.compile.calibration.datasetUri"),
        (
            {"serving.maxBatchSize": 8, "serving.dynamicBatching.preferredBatchSizes": [16]},
            "spec.serving.dynamicBatching.preferredBatchSizes: "
            "dynamicBatching.preferredBatchSizes must all be <= maxBatchSize",
        ),
        (
            {"serving.maxBatchSize": 0, "serving.dynamicBatching.preferredBatchSizes": [1]},
            "spec.serving.dynamicBatching.preferredBatchSizes: "
            "dynamicBatching.preferredBatchSizes must all be <= maxBatchSize",
        ),
        (
            {"shapes.batch.max": 8, "serving.dynamicBatching.preferredBatchSizes": [16]},
            "spec.serving.dynamicBatching.preferredBatchSizes: "
            "serving.dynamicBatching.preferredBatchSizes must all be <= shapes.batch.max",
        ),
        (
            {"serving.dynamicBatching.preferredBatchSizes": [4097]},
            "spec.serving.dynamicBatching.preferredBatchSizes[0]",
        ),
        (
            {"serving.maxBatchSize": 64, "shapes.batch.max": 32},
            "spec.serving.maxBatchSize: serving.maxBatchSize must be <= shapes.batch.max",
        ),
        ({"serving.resources": {"limits": {"memory": "lots"}}}, "spec.serving.resources.limits.memory"),
        (
            {"slo": {"targetMilliseconds": 20, "minReplicas": 5, "maxReplicas": 2}},
            "spec.slo.minReplicas: minReplicas must be <= maxReplicas",
        ),
        ({"slo": {"targetMilliseconds": 0}}, "spec.slo.targetMilliseconds"),
        (
            {"slo": {"targetMilliseconds": 20, "mode": "HPA", "placement": "LeastCost"}},
            "spec.slo.placement: placement LeastCost needs mode: Operator",
        ),
        ({"slo": {"targetMilliseconds": 20, "placement": "Cheapest"}}, "spec.slo.placement"),
        ({"slo": {"targetMilliseconds": 20, "burstRequestsPerSecond": -1}}, "spec.slo.burstRequestsPerSecond"),
        (
            {
                "hardware.mode": "Explicit",
                "hardware.pools": [
                    {
                        "name": "p",
                        "nodeSelector": {"x": "1"},
                        "tolerations": [{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}],
                    }
                ],
            },
            "spec.hardware.pools[0].tolerations[0].effect: effect must be NoExecute when tolerationSeconds is set",
        ),
        ({"slo": {"targetMilliseconds": 20, "percentile": "p42"}}, "spec.slo.percentile"),
        ({"rollout.maxSurge": "lots"}, "spec.rollout.maxSurge: maxSurge must be a positive integer"),
        ({"rollout.maxSurge": -1}, "spec.rollout.maxSurge"),
        ({"source.uri": "ftp://x"}, "spec.source.uri"),
        ({"source.sha256": "ABC"}, "spec.source.sha256"),
        ({"replicas": 3}, "spec.replicas: Extra inputs are not permitted"),
    ],
)
def test_validation_names_the_field(overrides, expected):
    errors = errors_of(spec_with(**overrides))
    assert any(expected in e for e in errors), errors


# One field set, and what the fields it leaves unset are derived to (their descriptions say so).
@pytest.mark.parametrize(
    ("overrides", "derived"),
    [
        ({}, {"shapes.batch": (1, 8, 32), "serving.maxBatchSize": 32, "preferred": [8, 16], "objective": 1}),
        ({"shapes.batch.max": 8}, {"shapes.batch": (1, 8, 8), "serving.maxBatchSize": 8, "preferred": [8]}),
        ({"shapes.batch.max": 4}, {"shapes.batch": (1, 4, 4), "serving.maxBatchSize": 4, "preferred": [4]}),
        ({"shapes.batch.max": 10000}, {"shapes.batch": (1, 8, 10000), "serving.maxBatchSize": 4096}),
        ({"shapes.batch.min": 16}, {"shapes.batch": (16, 16, 32), "objective": 16}),
        ({"shapes.batch.min": 64}, {"shapes.batch": (64, 64, 64), "serving.maxBatchSize": 64, "objective": 64}),
        ({"shapes.batch.opt": 48}, {"shapes.batch": (1, 48, 48), "serving.maxBatchSize": 48}),
        ({"serving.maxBatchSize": 4}, {"shapes.batch": (1, 8, 32), "preferred": [4]}),
        ({"serving.maxBatchSize": 12}, {"shapes.batch": (1, 8, 32), "preferred": [8, 12]}),
        ({"serving.maxBatchSize": 0}, {"shapes.batch": (1, 8, 32), "preferred": [], "objective": 1}),
        ({"serving.maxBatchSize": 0, "shapes.batch.min": 4}, {"objective": 1}),  # a request is one inference
        ({"serving.maxBatchSize": 64}, {"shapes.batch": (1, 8, 64), "preferred": [8, 16]}),
        (
            {"serving.dynamicBatching.preferredBatchSizes": [100]},
            {"shapes.batch": (1, 8, 100), "serving.maxBatchSize": 100},
        ),
        ({"serving.dynamicBatching.preferredBatchSizes": []}, {"serving.maxBatchSize": 32, "preferred": []}),
        ({"compile.objective.batchSize": 64}, {"shapes.batch": (1, 8, 64), "serving.maxBatchSize": 64}),
    ],
)
def test_unset_batch_sizes_are_derived_from_those_set(overrides, derived):
    """`preferred` is what Triton gets for an engine compiled without a choice of its own."""
    spec = InferenceModelSpec.model_validate(spec_with(**overrides))
    batch, serving = spec.shapes.batch, spec.model_dump(by_alias=True, exclude_none=True, mode="json")["serving"]
    actual = {
        "shapes.batch": (batch.min, batch.opt, batch.max),
        "serving.maxBatchSize": spec.serving.max_batch_size,
        "preferred": batcher(serving, None, gpu=False).preferred_batch_sizes,
        "objective": spec.compile.objective.batch_size,
    }
    assert {k: actual[k] for k in derived} == derived


@pytest.mark.parametrize(("min_replicas", "max_replicas"), [(0, 10), (3, 10), (10, 10), (20, 20)])
def test_unset_max_replicas_is_at_least_min_replicas(min_replicas, max_replicas):
    slo = InferenceModelSpec.model_validate(
        spec_with(**{"slo": {"targetMilliseconds": 20, "minReplicas": min_replicas}})
    ).slo
    assert slo.max_replicas == max_replicas


def test_unset_toleration_effect_is_no_execute_with_toleration_seconds():
    pool = {
        "name": "p",
        "nodeSelector": {"x": "1"},
        "tolerations": [{"key": "k", "tolerationSeconds": 60}, {"key": "k"}],
    }
    spec = InferenceModelSpec.model_validate(spec_with(**{"hardware.mode": "Explicit", "hardware.pools": [pool]}))
    assert [t.effect for t in spec.hardware.pools[0].tolerations] == ["NoExecute", None]


def test_derived_values_are_written_out_and_read_back_alike():
    """normalised_spec (the operator's view) carries them; validating it again changes nothing."""
    spec = InferenceModelSpec.model_validate(spec_with(**{"serving.maxBatchSize": 4, "slo.targetMilliseconds": 20}))
    wire = spec.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert wire["shapes"]["batch"] == {"min": 1, "opt": 8, "max": 32}
    assert "preferredBatchSizes" not in wire["serving"]["dynamicBatching"]  # per class, from its engine
    assert wire["compile"]["objective"]["batchSize"] == 1 and wire["slo"]["maxReplicas"] == 10
    assert InferenceModelSpec.model_validate(wire).model_dump(by_alias=True, exclude_none=True, mode="json") == wire


def test_rules_that_hold_pass():
    InferenceModelSpec.model_validate(
        spec_with(
            **{
                "shapes.batch": {"min": 4, "opt": 16, "max": 64},
                "serving.maxBatchSize": 64,
                "serving.dynamicBatching.enabled": False,
                "serving.dynamicBatching.preferredBatchSizes": [128],  # ignored while disabled
                "compile.objective": {"metric": "Throughput", "batchSize": 16, "latencyBudgetMilliseconds": 5},
                "hardware.mode": "Explicit",
                "hardware.pools": [{"name": "l4", "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"}}],
                "rollout.maxSurge": 2,
            }
        )
    )


@pytest.mark.parametrize(
    "uri",
    [
        "file:///models/resnet50.onnx",
        "s3://my-bucket/models/resnet50.onnx",
        "https://models.example.com:8443/resnet50.onnx",
        "pvc://model-store/resnet50/model.onnx",
        "oci://registry.example.com/models/resnet50@sha256:" + "a" * 64,
        "oci://registry.example.com:5000/team/models/resnet50:v1.2_rc-1",
        "oci://127.0.0.1:5000/resnet__50:latest",
        "oci://[::1]:5000/models/resnet50:v1",
        "oci://ghcr.io/org/model-car.onnx:1",
    ],
)
def test_source_uri_schemes(uri):
    assert InferenceModelSpec.model_validate({"source": {"uri": uri}}).source.uri == uri
    assert Calibration.model_validate({"datasetUri": uri}).dataset_uri == uri  # the same pattern


@pytest.mark.parametrize(
    "uri",
    [
        "oci://registry.example.com/Models/resnet50:v1",  # uppercase repository
        "oci://registry.example.com/models/resnet50",  # neither tag nor digest
        "oci://registry.example.com/models/resnet50:",  # an empty tag
        "oci://registry.example.com/models/resnet50:.v1",  # a tag starts with [A-Za-z0-9_]
        "oci://registry.example.com/models/resnet50:" + "v" * 129,  # a tag has at most 128 characters
        "oci://registry.example.com/models/resnet50@sha256:" + "A" * 64,  # digest hex is lowercase
        "oci://registry.example.com/models/resnet50@sha256:" + "a" * 63,
        "oci://registry.example.com/models/resnet50@sha512:" + "a" * 128,  # sha256 only
        "oci://user:pass@registry.example.com/models/resnet50:v1",  # credentials in the URI
        "oci://token@registry.example.com/models/resnet50:v1",
        "oci://registry.example.com/models//resnet50:v1",  # an empty path component
        "oci://registry.example.com/models/resnet50/:v1",
        "oci://registry.example.com/models/../resnet50:v1",
        "oci://registry.example.com/-models/resnet50:v1",
        "oci://registry.example.com:port/models/resnet50:v1",
        "oci:///models/resnet50:v1",  # no host
        "oci://registry.example.com/models/resnet50:v1?x=1",
        "oci://registry.example.com/models/resnet50:v1#f",
        "oci://registry.example.com/models/resnet50:v1/model.onnx",
    ],
)
def test_oci_source_uris_refused(uri):
    with pytest.raises(ValidationError) as caught:
        InferenceModelSpec.model_validate({"source": {"uri": uri}})
    assert any(e.startswith("spec.source.uri") for e in field_errors(caught.value)), uri


COMPILE_JOB_SPEC = {
    "modelName": "resnet50",
    "source": {"uri": URI},
    "hardware": {
        "className": "nvidia-l4",
        "kind": "GPU",
        "product": "NVIDIA-L4",
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"},
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "resources": {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"nvidia.com/gpu": 1}},
    },
    "compilers": ["TensorRT"],
    "precisions": ["FP16", "INT8"],
    "registry": {"uri": "file:///var/lib/tensorkiln/registry"},
    "optionsHash": "0123456789abcdef",
}


def test_compile_job_spec_round_trip():
    spec = CompileJobSpec.model_validate(COMPILE_JOB_SPEC)
    assert spec.hardware.simulated is False and spec.image == "ghcr.io/tensorkiln/compiler:0.1.0"
    assert (spec.shapes.batch.opt, spec.shapes.batch.max, spec.objective.batch_size) == (8, 32, 1)
    assert spec.deadline_seconds == 3600
    wire = spec.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert wire["hardware"]["nodeAffinity"] == COMPILE_JOB_SPEC["hardware"]["nodeAffinity"]
    assert CompileJobSpec.model_validate(wire) == spec


def test_compile_job_spec_unbatched_benchmarks_one_inference_per_request():
    spec = CompileJobSpec.model_validate({**COMPILE_JOB_SPEC, "batched": False, "shapes": {"batch": {"min": 4}}})
    assert spec.objective.batch_size == 1
    assert CompileJobSpec.model_validate(COMPILE_JOB_SPEC).batched  # absent: batched, as every CompileJob was
    with pytest.raises(ValidationError) as caught:
        CompileJobSpec.model_validate({**COMPILE_JOB_SPEC, "batched": False, "objective": {"batchSize": 2}})
    assert field_errors(caught.value) == [
        "spec.objective.batchSize: objective.batchSize must be 1 when batched is false "
        "(a request is then one inference of full shapes)"
    ]


def test_compile_job_spec_rejects_bad_registry():
    bad = {**COMPILE_JOB_SPEC, "registry": {"uri": "https://registry.example.com/x"}}
    with pytest.raises(ValidationError) as caught:
        CompileJobSpec.model_validate(bad)
    assert any(e.startswith("spec.registry.uri") for e in field_errors(caught.value))


def test_status_round_trip():
    status = {
        "observedGeneration": 3,
        "phase": "Compiling",
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "Compiling",
                "message": "1/2 compiled",
                "lastTransitionTime": "2025-01-02T03:04:05Z",
                "observedGeneration": 3,
            },
        ],
        "targets": [
            {
                "hardwareClass": "nvidia-l4",
                "kind": "GPU",
                "product": "NVIDIA-L4",
                "nodeCount": 2,
                "simulated": True,
                "compileJob": "resnet50-nvidia-l4",
                "compilePhase": "Succeeded",
                "engine": {"digest": "a" * 64, "uri": "file:///var/lib/tensorkiln/registry/x/model.plan"},
                "replicas": 1,
                "readyReplicas": 1,
            },
        ],
        "targetSummary": "1/2 compiled",
    }
    parsed = InferenceModelStatus.model_validate(status)
    assert parsed.model_dump(by_alias=True, exclude_none=True, mode="json") == status
    job = CompileJobStatus.model_validate({"phase": "Running", "jobName": "j", "startTime": "2025-01-02T03:04:05Z"})
    assert job.attempts == 0 and job.start_time.tzinfo is not None


NOW = datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)


def test_operator_conditions_fit_the_api_type():
    """The controllers build conditions as dicts; they must round-trip through the API model."""
    (built,) = merge_conditions([], [condition("Ready", None, "Pending", "")], 1, NOW)
    assert built["lastTransitionTime"] == "2025-01-02T03:04:05Z"
    assert Condition.model_validate(built).model_dump(by_alias=True, exclude_none=True, mode="json") == built
