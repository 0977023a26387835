"""Golden tests for the serving builders, and Triton's own protobuf parsing every rendered config."""

import pytest
from registry_fixtures import make_engine
from tensorkiln.builders import serving
from tensorkiln.builders.tritonconfig import UnservableScalar, config_dict, parse, render
from tensorkiln.controllers.inferencemodel import normalised_spec
from tensorkiln.settings import Settings
from tensorkiln_api.registry.manifest import Candidate, Selection, TensorInfo

from .test_builders import CLASSES, sample_model

DIGEST = "ab" * 32


def manifest(tmp_path, compiler: str, kind: str):
    base = make_engine(tmp_path).manifest
    winner = Candidate(
        id=f"{compiler.lower()}-int8",
        compiler=compiler,
        precision="INT8",
        status="Selected",
        settings={"config": {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": "2"}},
    )
    return base.model_copy(
        update={
            "compiler": compiler,
            "hardware_kind": kind,
            "precision": "INT8",
            "inputs": [TensorInfo(name="x", data_type="FP32", dims=[-1, 3, -1, -1])],
            "outputs": [TensorInfo(name="probs", data_type="FP32", dims=[-1, 2])],
            "profiles": {"inputs": {"x": {"min": [1, 3, 48, 192], "opt": [8, 3, 48, 192], "max": [32, 3, 48, 192]}}},
            "candidates": [winner],
            "selection": Selection(objective={"batchSize": 8}, winner=winner.id, reason="fastest"),
        }
    )


# One renderer for every cluster: the local cluster's configs are these (its serving image has the native backends).
CASES = {
    "tensorrt-h100": ("TensorRT", "GPU", "nvidia-h100-80gb-hbm3"),
    "onnxruntime-cpu": ("OnnxRuntime", "CPU", "cpu-amd64-intel-amx"),
    "openvino-cpu": ("OpenVINO", "CPU", "cpu-amd64-intel-amx"),
}


@pytest.mark.parametrize("case", CASES)
def test_config_golden_and_valid_for_triton(tmp_path, golden, case):
    compiler, kind, class_name = CASES[case]
    model = sample_model()
    spec = normalised_spec(model)
    config_map = serving.build_config_map(model, spec, CLASSES[class_name], manifest(tmp_path, compiler, kind))
    text = config_map["data"]["config.pbtxt"]
    golden(f"triton-config-{case}.pbtxt", text)
    config = parse(text)  # Triton's ModelConfig protobuf: wrong field names fail here
    assert config.max_batch_size == 32
    assert list(config.input[0].dims) == [3, 48, 192]
    assert list(config.dynamic_batching.preferred_batch_size) == [8, 16]


def test_native_platforms(tmp_path):
    serving_spec = normalised_spec(sample_model())["serving"]

    def config(compiler, kind):
        return parse(render(config_dict("m", manifest(tmp_path, compiler, kind), serving_spec)))

    assert config("TensorRT", "GPU").platform == "tensorrt_plan"
    assert config("TensorRT", "GPU").instance_group[0].kind == 1  # KIND_GPU
    assert config("OnnxRuntime", "CPU").platform == "onnxruntime_onnx"
    assert config("OpenVINO", "CPU").backend == "openvino"
    assert config("OpenVINO", "CPU").default_model_filename == "model.xml"
    simulation = config("SimulatedServiceTime", "GPU")
    assert simulation.backend == "python" and simulation.parameters["engine_file"].string_value == "simulation.json"
    assert not simulation.default_model_filename  # the Python backend loads model.py


@pytest.mark.parametrize(
    ("compiler", "kind", "backend", "runner"),
    [
        ("OnnxRuntime", "CPU", "onnxruntime_onnx", False),
        ("OpenVINO", "CPU", "openvino", False),
        ("TensorRT", "GPU", "tensorrt_plan", False),
        # The simulation standing in for a GPU: no native backend serves it, the python-backend runner sleeps.
        ("SimulatedServiceTime", "GPU", "python", True),
    ],
)
def test_every_real_engine_is_served_natively_and_only_the_simulation_by_the_python_backend(
    tmp_path, compiler, kind, backend, runner
):
    model, target = sample_model(), CLASSES["nvidia-l4"] if kind == "GPU" else CLASSES["cpu-amd64-intel-amx"]
    spec = normalised_spec(model)
    config_map = serving.build_config_map(model, spec, target, manifest(tmp_path, compiler, kind))
    config = parse(config_map["data"]["config.pbtxt"])
    assert (config.platform or config.backend) == backend
    deployment = serving.build_deployment(model, spec, target, DIGEST, config_map, 1, Settings())
    (fetch,) = deployment["spec"]["template"]["spec"]["initContainers"]
    assert ("--python-backend" in fetch["args"]) is runner


def serving_spec_with(**serving) -> dict:
    """spec.serving of the sample with `serving` set, the rest defaulted (or derived) by normalised_spec."""
    model = sample_model()
    model["spec"]["serving"] = {**model["spec"].get("serving", {}), **serving}
    return normalised_spec(model)["serving"]


def test_batching_off_renders_no_dynamic_batcher(tmp_path):
    serving_spec = serving_spec_with(maxBatchSize=0)
    config = parse(render(config_dict("m", manifest(tmp_path, "OnnxRuntime", "CPU"), serving_spec)))
    assert not config.HasField("dynamic_batching")
    assert list(config.input[0].dims) == [-1, 3, 48, 192]  # the batch dimension is the model's own


# The stateful model of tests/unit/compiler_support.stateful_model, compiled unbatched (serving.maxBatchSize 0).
STATEFUL_PROFILES = {
    "batched": False,
    "dynamicDims": [
        {"input": "chunk", "axis": 0, "min": 1, "opt": 2, "max": 4},
        {"input": "state", "axis": 1, "min": 1, "opt": 2, "max": 4},
    ],
    "inputs": {
        "chunk": {"min": [1, 16], "opt": [2, 16], "max": [4, 16]},
        "state": {"min": [2, 1, 8], "opt": [2, 2, 8], "max": [2, 4, 8]},
        "sr": {"min": [], "opt": [], "max": []},
    },
}


def unbatched_manifest(tmp_path, compiler: str = "OnnxRuntime"):
    return manifest(tmp_path, compiler, "CPU").model_copy(
        update={
            "inputs": [
                TensorInfo(name="chunk", data_type="FP32", dims=[-1, 16]),
                TensorInfo(name="state", data_type="FP32", dims=[2, -1, 8]),
                TensorInfo(name="sr", data_type="INT64", dims=[]),
            ],
            "outputs": [
                TensorInfo(name="out", data_type="FP32", dims=[-1, 8]),
                TensorInfo(name="stateN", data_type="FP32", dims=[2, -1, 8]),
            ],
            "profiles": STATEFUL_PROFILES,
            "selection": Selection(objective={"batchSize": 1}, winner=f"{compiler.lower()}-int8", reason="fastest"),
        }
    )


def rank1_sr(manifest):
    """The stateful model exported with `sr` as [1] (a Reshape to [] inside the graph), as UnservableScalar asks."""
    manifest = manifest.model_copy(deep=True)  # the fixture's manifest is shared
    manifest.inputs[:] = [t.model_copy(update={"dims": [1]}) if t.name == "sr" else t for t in manifest.inputs]
    if "sr" in manifest.profiles.get("inputs", {}):
        manifest.profiles["inputs"]["sr"] = {"min": [1], "opt": [1], "max": [1]}
    return manifest


def test_unbatched_engine_config_golden_full_shapes_and_a_scalar_refused(tmp_path, golden):
    """Triton 2.51 refuses a scalar's empty reshape in a model with max_batch_size 0 ("cannot have empty reshape
    for non-batching model as scalar tensors are not supported": silero-vad's `sr` on local-0, make matrix),
    and a native backend would give the model the [1] clients send: such a scalar is refused, and the model
    exported with it as [1] is served at its full shapes."""
    text = render(config_dict("stateful", rank1_sr(unbatched_manifest(tmp_path)), serving_spec_with(maxBatchSize=0)))
    golden("triton-config-onnxruntime-cpu-unbatched.pbtxt", text)
    config = parse(text)
    assert config.max_batch_size == 0 and not config.HasField("dynamic_batching")
    assert {t.name: list(t.dims) for t in config.input} == {"chunk": [-1, 16], "state": [2, -1, 8], "sr": [1]}
    assert not any(t.HasField("reshape") for t in config.input)
    assert {t.name: list(t.dims) for t in config.output} == {"out": [-1, 8], "stateN": [2, -1, 8]}
    # The scalar itself: refused, naming the input and the way out.
    with pytest.raises(
        UnservableScalar, match="'sr' is a scalar .*serving.maxBatchSize 0.*export the model with that input of shape"
    ):
        config_dict("stateful", unbatched_manifest(tmp_path), serving_spec_with(maxBatchSize=0))


def test_an_unbatched_engine_is_served_unbatched_whatever_max_batch_size_says(tmp_path):
    # While a batched replacement compiles (keepPreviousEngine), the unbatched engine is still served.
    serving_spec = serving_spec_with(maxBatchSize=8)
    config = parse(render(config_dict("stateful", rank1_sr(unbatched_manifest(tmp_path)), serving_spec)))
    assert config.max_batch_size == 0 and not config.HasField("dynamic_batching")
    assert list(config.input[1].dims) == [2, -1, 8]


def test_a_batched_rank_1_tensor_is_reshaped_too(tmp_path):
    vector = manifest(tmp_path, "OnnxRuntime", "CPU").model_copy(
        update={"outputs": [TensorInfo(name="score", data_type="FP32", dims=[-1])]}
    )
    config = parse(render(config_dict("m", vector, serving_spec_with(maxBatchSize=8))))
    assert config.max_batch_size == 8  # [batch] is [batch, 1] to clients, [batch] to the model
    assert list(config.output[0].dims) == [1] and list(config.output[0].reshape.shape) == []


@pytest.mark.parametrize(("max_batch_size", "preferred"), [(1, [1]), (4, [4]), (12, [8, 12]), (64, [8, 16])])
def test_preferred_batch_sizes_left_unset_fit_max_batch_size(tmp_path, max_batch_size, preferred):
    serving_spec = serving_spec_with(maxBatchSize=max_batch_size)
    config = parse(render(config_dict("m", manifest(tmp_path, "OnnxRuntime", "CPU"), serving_spec)))
    assert config.max_batch_size == max_batch_size
    assert list(config.dynamic_batching.preferred_batch_size) == preferred


@pytest.mark.parametrize("case", ["tensorrt-h100", "openvino-cpu"])
def test_deployment_services_and_pdb_golden(tmp_path, golden, case):
    compiler, kind, class_name = CASES[case]
    model = sample_model()
    spec = normalised_spec(model)
    target = CLASSES[class_name]
    settings = Settings(registry_uri="file:///var/lib/tensorkiln/registry")
    config_map = serving.build_config_map(model, spec, target, manifest(tmp_path, compiler, kind))
    deployment = serving.build_deployment(model, spec, target, DIGEST, config_map, 2, settings)
    golden(
        f"serving-{case}",
        {
            "deployment": deployment,
            "targetService": serving.build_target_service(model, target),
            "modelService": serving.build_model_service(model),
            "pdb": serving.build_pdb(model, target, 2),
        },
    )


def test_deployment_never_drops_capacity_and_rolls_only_on_engine_or_config(tmp_path):
    model, target = sample_model(), CLASSES["nvidia-l4"]
    spec = normalised_spec(model)
    settings = Settings()
    config_map = serving.build_config_map(model, spec, target, manifest(tmp_path, "TensorRT", "GPU"))
    one = serving.build_deployment(model, spec, target, DIGEST, config_map, 1, settings)
    assert one["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = one["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    scaled = serving.build_deployment(model, spec, target, DIGEST, config_map, 3, settings)
    assert scaled["spec"]["template"] == one["spec"]["template"]  # scaling does not roll pods
    upgraded = serving.build_deployment(model, spec, target, "cd" * 32, config_map, 1, settings)
    assert upgraded["spec"]["template"] != one["spec"]["template"]
    assert serving.build_pdb(model, target, 1) is None


@pytest.mark.parametrize("case", ["tensorrt-h100", "openvino-cpu"])
def test_a_new_compiler_image_or_version_leaves_the_triton_deployment_as_it_was(tmp_path, case):
    """A chart upgrade that changes only compilerImage and compilerVersion rolls no Triton pod: engine-fetch runs
    its own image (engineFetchImage), so the Deployment, pod template and its hash annotations are identical."""
    compiler, kind, class_name = CASES[case]
    model, target = sample_model(), CLASSES[class_name]
    spec = normalised_spec(model)
    config_map = serving.build_config_map(model, spec, target, manifest(tmp_path, compiler, kind))
    before = Settings(compiler_image="ghcr.io/tensorkiln/compiler:0.1.0", compiler_version="0.1.0")
    after = Settings(
        compiler_image="ghcr.io/tensorkiln/compiler@sha256:" + "ef" * 32, compiler_version="0.1.0+3a65e709f1c7"
    )
    deployments = [
        serving.build_deployment(model, spec, target, DIGEST, config_map, 2, settings, engine_bytes=10 << 20)
        for settings in (before, after)
    ]
    assert deployments[0] == deployments[1]
    (fetch,) = deployments[0]["spec"]["template"]["spec"]["initContainers"]
    assert fetch["image"] == before.engine_fetch_image == "ghcr.io/tensorkiln/engine-fetch:0.1.0"
    assert fetch["command"] == ["tensorkiln-engine-fetch"]
    # Its own image is part of the template: a new engine-fetch rolls the pods (maxUnavailable 0).
    pinned = Settings(engine_fetch_image="registry.example.test/engine-fetch@sha256:" + "cd" * 32)
    rolled = serving.build_deployment(model, spec, target, DIGEST, config_map, 2, pinned, engine_bytes=10 << 20)
    assert rolled["spec"]["template"]["spec"]["initContainers"][0]["image"] == pinned.engine_fetch_image
    assert rolled["spec"]["template"] != deployments[0]["spec"]["template"]
    assert rolled["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_hpa_mode_golden_and_the_deployment_leaves_replicas_to_it(tmp_path, golden):
    model = sample_model()
    model["spec"]["slo"] |= {"mode": "HPA", "minReplicas": 2, "scaleDownStabilizationSeconds": 120}
    spec = normalised_spec(model)
    target = CLASSES["nvidia-l4"]
    hpa = serving.build_hpa(model, spec, target)
    golden("hpa-l4", hpa)
    assert hpa["spec"]["metrics"][0]["external"]["target"]["value"] == "25"
    config_map = serving.build_config_map(model, spec, target, manifest(tmp_path, "TensorRT", "GPU"))
    deployment = serving.build_deployment(model, spec, target, DIGEST, config_map, None, Settings())
    assert "replicas" not in deployment["spec"]
    assert serving.build_hpa(sample_model(), normalised_spec(sample_model()), target) is None  # Operator mode


def test_a_gpu_class_always_gets_its_gpu_whatever_resources_the_user_asks_for():
    gpu, cpu = (next(c for c in CLASSES.values() if c.kind == kind) for kind in ("GPU", "CPU"))
    asked = {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "4Gi"}}
    assert serving.triton_resources(asked, gpu) == {
        "requests": {"cpu": "1", "memory": "2Gi"},
        "limits": {"memory": "4Gi", "nvidia.com/gpu": "1"},
    }
    # GPUs alone: the GPU default's cpu and memory besides.
    assert serving.triton_resources({"limits": {"nvidia.com/gpu": "2"}}, gpu) == {
        "requests": {"cpu": "2", "memory": "8Gi"},
        "limits": {"nvidia.com/gpu": "2", "memory": "8Gi"},
    }
    assert serving.triton_resources(asked, cpu) == asked
    assert serving.triton_resources(None, gpu) == serving.DEFAULT_RESOURCES["GPU"]


@pytest.mark.parametrize(
    ("kind", "asked", "expected"),
    [
        # The defaults: memory limited at the request, no CPU limit.
        ("GPU", None, {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"memory": "8Gi", "nvidia.com/gpu": "1"}}),
        ("CPU", None, {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "1Gi"}}),
        # A small request keeps the default's limit (the simulated engine's replicas, packed on local-0); a
        # large one is limited at itself.
        ("CPU", {"requests": {"cpu": "100m", "memory": "256Mi"}},
         {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}),
        ("GPU", {"requests": {"memory": "24Gi"}},
         {"requests": {"memory": "24Gi", "cpu": "2"}, "limits": {"nvidia.com/gpu": "1", "memory": "24Gi"}}),
        # A limit alone is the request too, as the API server defaults it.
        ("CPU", {"limits": {"cpu": "2", "memory": "3Gi"}},
         {"requests": {"cpu": "2", "memory": "3Gi"}, "limits": {"cpu": "2", "memory": "3Gi"}}),
    ],
)  # fmt: skip
def test_triton_has_cpu_and_memory_requests_and_a_memory_limit(tmp_path, kind, asked, expected):
    target = CLASSES["nvidia-l4"] if kind == "GPU" else CLASSES["cpu-amd64-intel-amx"]
    model = sample_model()
    if asked is not None:
        model["spec"]["serving"] = {**model["spec"].get("serving", {}), "resources": asked}
    spec = normalised_spec(model)
    config_map = serving.build_config_map(model, spec, target, manifest(tmp_path, "OnnxRuntime", kind))
    pod = serving.build_deployment(model, spec, target, DIGEST, config_map, 1, Settings())["spec"]["template"]["spec"]
    (triton,) = pod["containers"]
    assert triton["resources"] == expected


def test_engine_fetch_has_small_fixed_resources_and_no_cpu_limit(tmp_path):
    for target in (CLASSES["nvidia-l4"], CLASSES["cpu-amd64-intel-amx"]):
        model = sample_model()
        spec = normalised_spec(model)
        config_map = serving.build_config_map(model, spec, target, manifest(tmp_path, "OnnxRuntime", target.kind))
        deployment = serving.build_deployment(model, spec, target, DIGEST, config_map, 1, Settings())
        (fetch,) = deployment["spec"]["template"]["spec"]["initContainers"]
        assert fetch["resources"] == {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}


def pod_volumes(tmp_path, settings: Settings, **sized) -> dict[str, dict]:
    model, target = sample_model(), CLASSES["nvidia-l4"]
    spec = normalised_spec(model)
    config_map = serving.build_config_map(model, spec, target, manifest(tmp_path, "TensorRT", "GPU"))
    deployment = serving.build_deployment(model, spec, target, DIGEST, config_map, 1, settings, **sized)
    return {v["name"]: v["emptyDir"] for v in deployment["spec"]["template"]["spec"]["volumes"] if "emptyDir" in v}


def test_the_model_repository_is_sized_from_the_engine_and_tmp_is_small(tmp_path):
    # Unknown engine: the setting's size.
    assert pod_volumes(tmp_path, Settings()) == {"models": {"sizeLimit": "16Gi"}, "tmp": {"sizeLimit": "256Mi"}}
    assert pod_volumes(tmp_path, Settings(model_repository_size_limit="40960Mi"))["models"] == {"sizeLimit": "40Gi"}
    # Known: the engine twice (a restarted pod's engine-fetch stages a new copy beside the old one), 256 MiB
    # more, 1 GiB at least.
    assert pod_volumes(tmp_path, Settings(), engine_bytes=3 << 30)["models"] == {"sizeLimit": "6400Mi"}
    assert pod_volumes(tmp_path, Settings(), engine_bytes=(3 << 30) + 1)["models"] == {"sizeLimit": "6401Mi"}
    assert pod_volumes(tmp_path, Settings(), engine_bytes=10 << 20)["models"] == {"sizeLimit": "1Gi"}
    engine = manifest(tmp_path, "TensorRT", "GPU")
    assert serving.engine_size(engine) == sum(a.size for a in engine.artifacts) > 0


def test_replicas_spread_over_their_pools_nodes_and_each_rollout_on_its_own(tmp_path):
    model, target = sample_model(), CLASSES["nvidia-l4"]
    spec = normalised_spec(model)
    config_map = serving.build_config_map(model, spec, target, manifest(tmp_path, "TensorRT", "GPU"))
    deployment = serving.build_deployment(model, spec, target, DIGEST, config_map, 3, Settings())
    (spread,) = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert spread == {
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        # A preference: a hard constraint would leave a one-node pool's second replica Pending.
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": deployment["spec"]["selector"]["matchLabels"]},
        "matchLabelKeys": ["pod-template-hash"],
    }
    assert spread["labelSelector"]["matchLabels"] == deployment["spec"]["template"]["metadata"]["labels"]
