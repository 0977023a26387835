"""Golden tests for the pure builders: the objects the operator applies, byte for byte."""

import dataclasses
from pathlib import Path

import pytest
import yaml
from tensorkiln.builders.compilejob import build_compile_job, cache_key, compile_job_name
from tensorkiln.builders.job import build_job, job_name
from tensorkiln.builders.resources import mebibytes
from tensorkiln.controllers.inferencemodel import normalised_spec
from tensorkiln.hardware.classes import discover
from tensorkiln.settings import Settings
from tensorkiln_api.names import MODEL_NAME_MAX

from .fleet import default_fleet

REPO = Path(__file__).resolve().parents[2]
SETTINGS = Settings(
    registry_uri="file:///var/lib/tensorkiln/registry", compiler_image="ghcr.io/tensorkiln/compiler:0.1.0"
)
CLASSES = {c.name: c for c in discover(default_fleet())}


def sample_model() -> dict:
    model = yaml.safe_load((REPO / "manifests/samples/resnet50-gpu.yaml").read_text())
    model["metadata"] |= {"uid": "0f6c1a52-7a43-4c58-9b7e-8f1a8a0e1b11", "generation": 1}
    return model


def compile_job_for(class_name: str) -> dict:
    model = sample_model()
    cj = build_compile_job(model, normalised_spec(model), CLASSES[class_name], SETTINGS)
    cj["metadata"]["uid"] = "5a1d2a8e-2f0e-4d4f-8a51-3c0c4b9b7f22"
    return cj


def test_gpu_compile_job_golden(golden):
    golden("compilejob-h100", compile_job_for("nvidia-h100-80gb-hbm3"))


def test_cpu_compile_job_golden(golden):
    golden("compilejob-cpu-amx", compile_job_for("cpu-amd64-intel-amx"))


def test_gpu_job_golden(golden):
    golden("job-h100", build_job(compile_job_for("nvidia-h100-80gb-hbm3")))


def test_cpu_job_golden(golden):
    golden("job-cpu-amx", build_job(compile_job_for("cpu-amd64-intel-amx")))


def test_names_are_deterministic_and_bounded():
    assert compile_job_name("resnet50", "nvidia-l4") == "resnet50--nvidia-l4"
    longest = "m" * MODEL_NAME_MAX
    long = compile_job_name(longest, "nvidia-h100-80gb-hbm3")
    assert len(long) <= 54 and long == compile_job_name(longest, "nvidia-h100-80gb-hbm3")
    assert long.startswith(f"{longest}--")  # the model's name is never cut
    assert len(job_name(compile_job_for("nvidia-h100-80gb-hbm3"))) <= 63


def test_changed_compile_options_change_the_job_name_only_then():
    base = compile_job_for("nvidia-l4")
    model = sample_model()
    model["spec"]["compile"] = {"precisions": ["FP16"]}
    changed = build_compile_job(model, normalised_spec(model), CLASSES["nvidia-l4"], SETTINGS)
    assert job_name(base) == job_name(compile_job_for("nvidia-l4"))
    assert job_name(changed) != job_name(base)


@pytest.mark.parametrize(
    "compile_options",
    [
        {"resources": {"requests": {"memory": "8Gi"}, "limits": {"memory": "8Gi"}}},
        {"deadlineSeconds": 7200},
        {"retries": 5},
    ],
)
def test_what_shapes_the_job_changes_its_name_so_a_failed_compile_runs_again_once_fixed(compile_options):
    """The model's spec.compile, fixed, through the CompileJob builder: what the operator does."""
    base = compile_job_for("nvidia-l4")
    model = sample_model()
    model["spec"]["compile"] = {**model["spec"].get("compile", {}), **compile_options}
    fixed = build_compile_job(model, normalised_spec(model), CLASSES["nvidia-l4"], SETTINGS)
    assert job_name(fixed) != job_name(base)
    assert fixed["spec"]["optionsHash"] == base["spec"]["optionsHash"]  # the same engine: a cache hit if compiled


@pytest.mark.parametrize(("hardware_class", "setting"), [("nvidia-l4", "compiler_gpu_image"),
                                                         ("cpu-amd64-intel-amx", "compiler_image")])  # fmt: skip
def test_a_class_compiles_in_its_kinds_compiler_image_and_another_one_makes_another_job(hardware_class, setting):
    base = compile_job_for(hardware_class)
    assert base["spec"]["image"] == getattr(SETTINGS, setting)  # TensorRT's image on a GPU, the CPU image else
    model = sample_model()
    other = build_compile_job(model, normalised_spec(model), CLASSES[hardware_class],
                              dataclasses.replace(SETTINGS, **{setting: "compiler:2"}))  # fmt: skip
    assert other["spec"]["image"] == "compiler:2" and job_name(other) != job_name(base)


def test_batching_mode_is_part_of_the_compile_job_and_its_cache_key():
    base = compile_job_for("nvidia-l4")
    model = sample_model()
    model["spec"].setdefault("serving", {})["maxBatchSize"] = 0
    unbatched = build_compile_job(model, normalised_spec(model), CLASSES["nvidia-l4"], SETTINGS)
    assert "batched" not in base["spec"]  # batched is the default: every batched CompileJob stays as it was
    assert unbatched["spec"]["batched"] is False and unbatched["spec"]["objective"]["batchSize"] == 1
    assert unbatched["spec"]["optionsHash"] != base["spec"]["optionsHash"]
    model["spec"]["serving"]["maxBatchSize"] = 16  # another batch limit: the same engine
    rebatched = build_compile_job(model, normalised_spec(model), CLASSES["nvidia-l4"], SETTINGS)
    assert rebatched["spec"]["optionsHash"] == base["spec"]["optionsHash"]


def test_where_openvino_compiles_the_served_batch_limit_is_part_of_the_cache_key():
    """OpenVINO candidates are timed padded to serving.maxBatchSize, as Triton's openvino backend serves them:
    another limit can make another candidate win, so it is another key (on GPU classes it stays one)."""
    base = compile_job_for("cpu-amd64-intel-amx")
    model = sample_model()
    model["spec"].setdefault("serving", {})["maxBatchSize"] = 4
    rebatched = build_compile_job(model, normalised_spec(model), CLASSES["cpu-amd64-intel-amx"], SETTINGS)
    assert "OpenVINO" in base["spec"]["compilers"]
    assert base["spec"]["batcherTuning"]["maxBatchSize"] != rebatched["spec"]["batcherTuning"]["maxBatchSize"] == 4
    assert rebatched["spec"]["optionsHash"] != base["spec"]["optionsHash"]


def test_synthetic_input_values_reach_the_compile_job_and_its_cache_key():
    base = compile_job_for("nvidia-l4")
    model = sample_model()
    model["spec"]["compile"] = {"syntheticInputs": {"input": {"min": 0, "max": 1}}}
    given = build_compile_job(model, normalised_spec(model), CLASSES["nvidia-l4"], SETTINGS)
    assert "syntheticInputs" not in base["spec"]
    assert given["spec"]["syntheticInputs"] == {"input": {"min": 0.0, "max": 1.0}}
    assert given["spec"]["optionsHash"] != base["spec"]["optionsHash"]


def test_the_serving_target_reaches_the_compile_job_and_its_cache_key():
    base = compile_job_for("cpu-amd64-intel-amx")
    model = sample_model()
    targeted = build_compile_job(
        model,
        normalised_spec(model),
        CLASSES["cpu-amd64-intel-amx"],
        dataclasses.replace(SETTINGS, serving_target="24.10"),
    )
    assert "servingTarget" not in base["spec"]
    assert targeted["spec"]["servingTarget"] == "24.10"
    assert targeted["spec"]["optionsHash"] != base["spec"]["optionsHash"]  # engines of another runtime never hit


def test_the_compiler_version_reaches_the_compile_job_and_names_its_cache_key():
    model = sample_model()
    build = dataclasses.replace(SETTINGS, compiler_version="0.1.0+3a65e709f1c7")
    compile_job = build_compile_job(model, normalised_spec(model), CLASSES["cpu-amd64-intel-amx"], build)
    compile_job["spec"]["modelDigest"] = "ab" * 32
    assert compile_job["spec"]["compilerVersion"] == "0.1.0+3a65e709f1c7"
    # The key the compiler publishes under (its spec.compilerVersion), whatever this operator's own setting.
    assert cache_key(compile_job, SETTINGS).compiler_version == "0.1.0+3a65e709f1c7"
    # Not an option of the engine: the same options hash, the same Job's name.
    assert compile_job["spec"]["optionsHash"] == compile_job_for("cpu-amd64-intel-amx")["spec"]["optionsHash"]


def test_gpu_job_requests_a_gpu_tolerates_the_taint_and_is_restricted():
    job = build_job(compile_job_for("nvidia-l4"))
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-L4"}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert job["spec"]["backoffLimit"] == 2 and job["spec"]["activeDeadlineSeconds"] == 3600
    assert job["metadata"]["ownerReferences"][0]["kind"] == "CompileJob"


def test_local_file_source_and_registry_are_host_paths_at_the_same_path(golden):
    model = sample_model()
    model["spec"]["source"] = {"uri": "file:///srv/models/det/model.onnx"}
    settings = Settings(registry_uri="file:///var/lib/tk/registry", compiler_image="ghcr.io/tensorkiln/compiler:0.1.0")
    cj = build_compile_job(model, normalised_spec(model), CLASSES["cpu-amd64-intel-amx"], settings)
    cj["metadata"]["uid"] = "5a1d2a8e-2f0e-4d4f-8a51-3c0c4b9b7f22"
    pod = build_job(cj)["spec"]["template"]["spec"]
    assert {"name": "model-source", "hostPath": {"path": "/srv/models/det", "type": "Directory"}} in pod["volumes"]
    mounts = pod["containers"][0]["volumeMounts"]
    assert {"name": "model-source", "mountPath": "/srv/models/det", "readOnly": True} in mounts
    assert {"name": "registry", "mountPath": "/var/lib/tk/registry"} in mounts


def test_pvc_registry_is_mounted_and_the_compiler_sees_a_file_uri(golden):
    settings = Settings(registry_uri="pvc://engines/prod", compiler_image="ghcr.io/tensorkiln/compiler:0.1.0")
    model = sample_model()
    cj = build_compile_job(model, normalised_spec(model), CLASSES["nvidia-l4"], settings)
    cj["metadata"]["uid"] = "5a1d2a8e-2f0e-4d4f-8a51-3c0c4b9b7f22"
    job = build_job(cj, registry_secret=None)
    golden("job-l4-pvc-registry", job)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert '"registry":{"uri":"file:///var/lib/tensorkiln/registry/prod"}' in container["env"][0]["value"]


def test_a_gpu_compile_pod_is_memory_limited_at_its_request_and_a_cpu_one_keeps_its_defaults():
    gpu = build_job(compile_job_for("nvidia-l4"))["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert gpu == {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"nvidia.com/gpu": "1", "memory": "16Gi"}}
    cpu = build_job(compile_job_for("cpu-amd64-intel-amx"))["spec"]["template"]["spec"]["containers"][0]["resources"]
    # The CPU class's default already has its limits: the compiler sizes its threads by the CPU limit.
    assert cpu == {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "2", "memory": "6Gi"}}


@pytest.mark.parametrize(
    ("asked", "expected"),
    [
        # A request alone: limited at the larger of it and the default's limit (the request, on a GPU class).
        ({"requests": {"cpu": "2", "memory": "32Gi"}},
         {"requests": {"cpu": "2", "memory": "32Gi"}, "limits": {"nvidia.com/gpu": "1", "memory": "32Gi"}}),
        ({"requests": {"memory": "1Gi"}},
         {"requests": {"memory": "1Gi", "cpu": "4"}, "limits": {"nvidia.com/gpu": "1", "memory": "16Gi"}}),
        # A limit alone: the request is the limit, as the API server would default it.
        ({"limits": {"cpu": "3", "memory": "4Gi"}},
         {"requests": {"cpu": "3", "memory": "4Gi"}, "limits": {"cpu": "3", "memory": "4Gi", "nvidia.com/gpu": "1"}}),
        # Both: as asked.
        ({"requests": {"cpu": "1", "memory": "8Gi"}, "limits": {"memory": "8Gi"}},
         {"requests": {"cpu": "1", "memory": "8Gi"}, "limits": {"memory": "8Gi", "nvidia.com/gpu": "1"}}),
    ],
)  # fmt: skip
def test_a_compile_pod_has_cpu_and_memory_requests_and_a_memory_limit_whatever_the_model_asks(asked, expected):
    model = sample_model()
    model["spec"]["compile"] = {"resources": asked}
    cj = build_compile_job(model, normalised_spec(model), CLASSES["nvidia-l4"], SETTINGS)
    cj["metadata"]["uid"] = "5a1d2a8e-2f0e-4d4f-8a51-3c0c4b9b7f22"
    # The CompileJob keeps what the model asked (its Job's name hashes it): the Job's pod gets the rest.
    assert cj["spec"]["hardware"]["resources"]["limits"].get("memory") == asked.get("limits", {}).get("memory")
    assert build_job(cj)["spec"]["template"]["spec"]["containers"][0]["resources"] == expected


def test_a_compile_pods_volumes_have_size_limits_from_the_settings():
    def volumes(**limits) -> dict:
        pod = build_job(compile_job_for("cpu-amd64-intel-amx"), **limits)["spec"]["template"]["spec"]
        return {v["name"]: v["emptyDir"] for v in pod["volumes"] if "emptyDir" in v}

    assert volumes() == {
        "work": {"sizeLimit": Settings.compile_work_size_limit},
        "tmp": {"sizeLimit": Settings.compile_tmp_size_limit},
    }
    # Written as the API server writes them back, or every reconcile would see the Job differ.
    assert volumes(work_size_limit="65536Mi", tmp_size_limit="1.5Gi") == {
        "work": {"sizeLimit": "64Gi"},
        "tmp": {"sizeLimit": "1536Mi"},
    }


def test_size_settings_come_from_the_environment_and_a_non_size_is_refused(monkeypatch):
    assert (Settings().compile_work_size_limit, Settings().compile_tmp_size_limit) == ("32Gi", "8Gi")
    assert Settings().model_repository_size_limit == "16Gi"
    monkeypatch.setenv("TENSORKILN_COMPILE_WORK_SIZE_LIMIT", "100Gi")
    monkeypatch.setenv("TENSORKILN_COMPILE_TMP_SIZE_LIMIT", "2Gi")
    monkeypatch.setenv("TENSORKILN_MODEL_REPOSITORY_SIZE_LIMIT", "40Gi")
    settings = Settings.from_env()
    assert (settings.compile_work_size_limit, settings.compile_tmp_size_limit) == ("100Gi", "2Gi")
    assert settings.model_repository_size_limit == "40Gi"
    for wrong in ("lots", "0", "-1Gi"):
        monkeypatch.setenv("TENSORKILN_COMPILE_TMP_SIZE_LIMIT", wrong)
        with pytest.raises(ValueError, match="TENSORKILN_COMPILE_TMP_SIZE_LIMIT"):
            Settings.from_env()


@pytest.mark.parametrize(
    ("size", "written"),
    [(1, "1Mi"), (1 << 20, "1Mi"), ((1 << 20) + 1, "2Mi"), (1 << 30, "1Gi"), ("1024Mi", "1Gi"), ("1.5Gi", "1536Mi"),
     ("20G", "19074Mi"), ("3Ti", "3Ti"), (5 << 30, "5Gi")],
)  # fmt: skip
def test_sizes_are_whole_mebibytes_written_as_the_api_server_writes_them(size, written):
    assert mebibytes(size) == written


def test_a_new_compiler_version_alone_gets_a_job_of_its_own():
    """The finished Job of the previous compiler build must not stand for the new one (same image, same options)."""
    before = compile_job_for("nvidia-h100-80gb-hbm3")
    after = {**before, "spec": {**before["spec"], "compilerVersion": before["spec"]["compilerVersion"] + ".next"}}
    assert job_name(after) != job_name(before)
    assert after["spec"]["optionsHash"] == before["spec"]["optionsHash"]
