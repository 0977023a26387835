"""TensorRT option translation (pure) and the no-silent-fallback rule; no GPU needed."""

import pytest
from tensorkiln_api import CompileJobSpec, Precision, Shapes
from tensorkiln_compiler.candidates import BuildContext, Skipped
from tensorkiln_compiler.candidates.tensorrt import TrtPlan, plan_build, require
from tensorkiln_compiler.data import synthesize
from tensorkiln_compiler.errors import TensorRTUnavailable
from tensorkiln_compiler.inspection import inspect_model

from .compiler_support import compile_spec, conv_classifier


@pytest.fixture
def model(tmp_path):
    shapes = Shapes.model_validate({"batch": {"min": 1, "opt": 8, "max": 32}})
    return inspect_model(conv_classifier(tmp_path / "m.onnx"), shapes, 8)


def test_profile_comes_from_spec_shapes(model):
    plan = plan_build(model, Precision.FP32, "10.8.0.43")
    assert plan.profile == {"x": ((1, 3, 8, 8), (8, 3, 8, 8), (32, 3, 8, 8))}
    assert plan.settings("10.8.0.43")["profile"] == {"x": [[1, 3, 8, 8], [8, 3, 8, 8], [32, 3, 8, 8]]}


@pytest.mark.parametrize(
    ("precision", "variant", "flags"),
    [
        (Precision.FP32, "source", ()),
        (Precision.FP16, "source", ("FP16",)),
        (Precision.BF16, "source", ("BF16",)),
        (Precision.INT8, "qdq", ("INT8", "FP16")),  # Q/DQ sets INT8 where quantized, FP16 elsewhere
    ],
)
def test_tensorrt_10_precision_by_builder_flags(model, precision, variant, flags):
    plan = plan_build(model, precision, "10.8.0.43")
    assert (plan.onnx_variant, plan.network_flags, plan.builder_flags) == (variant, (), flags)


@pytest.mark.parametrize(
    ("precision", "variant"), [(Precision.FP32, "source"), (Precision.FP16, "fp16"), (Precision.INT8, "qdq")]
)
def test_tensorrt_11_strongly_typed_precision_from_the_onnx(model, precision, variant):
    plan = plan_build(model, precision, "11.4.0.106")
    assert plan == TrtPlan(variant, ("STRONGLY_TYPED",), (), plan.profile, "NONE")


def test_tensorrt_11_has_no_bf16_export(model):
    with pytest.raises(Skipped, match="no BF16 export"):
        plan_build(model, Precision.BF16, "11.4.0.106")


def test_compatibility_options(model):
    plan = plan_build(model, Precision.FP16, "10.8.0.43", hardware_compatibility="ampere-plus", version_compatible=True)
    assert plan.hardware_compatibility == "AMPERE_PLUS"
    assert plan.builder_flags == ("FP16", "VERSION_COMPATIBLE", "EXCLUDE_LEAN_RUNTIME")
    assert (
        plan_build(
            model, Precision.FP32, "10.8.0.43", hardware_compatibility="same-compute-capability"
        ).hardware_compatibility
        == "SAME_COMPUTE_CAPABILITY"
    )


def test_too_old_tensorrt_is_unavailable(model):
    with pytest.raises(TensorRTUnavailable, match="TensorRT 8.6.1 is older than 10"):
        plan_build(model, Precision.FP16, "8.6.1")


def context(tmp_path, model, kind: str, gpus: list) -> BuildContext:
    body = compile_spec(tmp_path / "m.onnx", tmp_path / "registry", compilers=["TensorRT"])
    body["hardware"] = {"className": "gpu-test", "kind": kind, "nodeSelector": {}}
    return BuildContext(
        spec=CompileJobSpec.model_validate(body), model=model, dataset=synthesize(model.inputs),
        fingerprint={"cpu": {"isa": []}, "gpus": gpus}, threads=1, work_dir=tmp_path,
    )  # fmt: skip


def test_cpu_class_skips_tensorrt(tmp_path, model):
    with pytest.raises(Skipped, match="GPU classes only"):
        require(context(tmp_path, model, "CPU", []))


def test_gpu_class_without_tensorrt_fails_instead_of_falling_back(tmp_path, model, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "tensorrt", None)  # `import tensorrt` raises ImportError
    with pytest.raises(TensorRTUnavailable, match="cannot import tensorrt"):
        require(context(tmp_path, model, "GPU", [{"product": "NVIDIA H100"}]))
