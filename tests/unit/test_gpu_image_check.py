"""`make images-gpu` refuses a GPU compiler image whose TensorRT is not its serving target's (runtime_check):
a plan loads only into the TensorRT that built it."""

import pytest
from tensorkiln_local.images import runtime_check
from tensorkiln_local.images.catalog import COMPILER_GPU


def test_the_targets_tensorrt_passes_and_another_is_refused_naming_both(monkeypatch):
    monkeypatch.setattr(runtime_check, "tensorrt_version", lambda reference: "10.13.3.9")
    assert runtime_check.check_tensorrt(COMPILER_GPU, "compiler-gpu:test") == "10.13.3.9"
    monkeypatch.setattr(runtime_check, "tensorrt_version", lambda reference: "10.5.0")
    with pytest.raises(SystemExit, match=r"TensorRT 10\.5\.0 in the image, but Triton 25\.10 .* TensorRT 10\.13\.3$"):
        runtime_check.check_tensorrt(COMPILER_GPU, "compiler-gpu:test")
