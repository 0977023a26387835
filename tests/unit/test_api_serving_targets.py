"""The table of serving targets (api.serving_targets) and the runtime check each compile makes against it."""

import typing

import pytest
from tensorkiln_api.compilejob import ServingTargetRelease
from tensorkiln_api.serving_targets import SERVING_TARGETS, mismatch

R2410 = SERVING_TARGETS["24.10"]


def test_the_api_accepts_exactly_the_tabled_releases():
    assert set(typing.get_args(ServingTargetRelease)) == set(SERVING_TARGETS)


@pytest.mark.parametrize(
    ("compiler", "installed"),
    [
        ("OnnxRuntime", {"onnxruntime": "1.19.2", "openvino": "2026.4.1"}),  # only the compiler's own runtime counts
        ("OpenVINO", {"openvino": "2024.4.0-16579-c3152d32c9c-releases/2024/4"}),  # a build of the release
        ("TensorRT", {}),  # absent: TensorRTUnavailable says so, not this check
        ("SimulatedServiceTime", {"onnxruntime": "1.32.0"}),  # no runtime serves the simulation
    ],
)
def test_the_target_runtime_or_a_build_of_it_passes(compiler, installed):
    assert mismatch(R2410, compiler, installed) is None


@pytest.mark.parametrize(
    ("compiler", "installed", "message"),
    [
        ("OnnxRuntime", {"onnxruntime": "1.32.0"}, "onnxruntime 1.32.0 here, but Triton 24.10 (server 2.51.0) "
         "serves OnnxRuntime engines with onnxruntime 1.19.2"),
        ("OpenVINO", {"openvino": "2024.4.1"}, "openvino 2024.4.1 here, but Triton 24.10"),
        ("TensorRT", {"tensorrt": "10.50.1"}, "serves TensorRT engines with tensorrt 10.5.0"),  # not a build of 10.5.0
    ],
)  # fmt: skip
def test_another_version_is_named_beside_the_targets(compiler, installed, message):
    assert message in mismatch(R2410, compiler, installed)


def test_a_release_without_a_recorded_tensorrt_checks_only_the_cpu_runtimes():
    newest = SERVING_TARGETS["26.06"]
    assert mismatch(newest, "TensorRT", {"tensorrt": "10.5.0"}) is None
    assert mismatch(newest, "OnnxRuntime", {"onnxruntime": "1.19.2"})
