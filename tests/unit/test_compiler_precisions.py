"""The precisions a compile tries when the spec names none: what the node runs natively."""

import pytest
from tensorkiln_api import Precision
from tensorkiln_compiler.precisions import hardware_precisions

FP32, FP16, BF16, INT8 = Precision.FP32, Precision.FP16, Precision.BF16, Precision.INT8


@pytest.mark.parametrize(
    ("isa", "expected"),
    [
        (["avx2", "fma"], [FP32, INT8]),
        (["avx512f", "avx512_vnni"], [FP32, INT8]),  # Cascade Lake: INT8 kernels, no BF16
        (["avx512f", "avx512_vnni", "avx512_bf16"], [FP32, BF16, INT8]),  # Zen 4, Cooper Lake
        (["amx_tile", "amx_bf16", "amx_int8", "avx512_fp16", "amx_fp16"], [FP32, BF16, FP16, INT8]),  # Granite Rapids
        (["asimd"], [FP32, INT8]),
    ],
)
def test_cpu_precisions_follow_the_flags(isa, expected):
    assert hardware_precisions(False, {"cpu": {"isa": isa}}) == expected


@pytest.mark.parametrize(
    ("capabilities", "expected"),
    [
        (["7.5"], [FP32, FP16, INT8]),  # T4: no BF16
        (["8.9"], [FP32, FP16, INT8, BF16]),  # L4
        (["9.0", "7.5"], [FP32, FP16, INT8]),  # mixed: what every GPU of the node runs
        ([], [FP32, FP16, INT8]),
    ],
)
def test_gpu_precisions_follow_the_compute_capability(capabilities, expected):
    fingerprint = {"cpu": {"isa": ["avx512_bf16"]}, "gpus": [{"computeCapability": c} for c in capabilities]}
    assert hardware_precisions(True, fingerprint) == expected
