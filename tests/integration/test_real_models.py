"""Real models from PyPI wheels, applied as a new user would (a minimal spec on the real CPU node):
one that Triton's native backend serves, compared with onnxruntime through Triton, and two that
cannot be served, refused with their exact messages. The whole coverage matrix (a compile each) is
`make matrix` (e2e/bench_models.py); these are the quick ones, so that `make test` proves the path.
silero-vad is among them because only the cluster path showed Triton refusing its scalar input."""

from pathlib import Path

import pytest
from tensorkiln_local import matrix
from tensorkiln_local.cluster import real_models

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def staged():
    directory = Path(real_models.STAGED_ROOT)
    real_models.stage(directory, names=["digits-mlp-opset9", "digits-mlp-opset9-zipmap", "silero-vad"])
    return directory


def test_a_real_model_serves_natively_and_matches_onnxruntime(api, operator, staged):
    row = matrix.run_one(api, real_models.BY_NAME["digits-mlp-opset9"], staged, timeout=600)  # old opset, classic ML
    assert row["result"] == matrix.SERVED, row
    assert row["engine"] != "-" and row["cosine"] > 0.999
    assert row["served_by"] in ("onnxruntime_onnx", "openvino"), row  # Triton's native backend, not the runner


@pytest.mark.parametrize(
    "name",
    [
        "digits-mlp-opset9-zipmap",  # a map output: the compile refuses it, with the hint
        "silero-vad",  # a rank-0 input served unbatched: compiled, then refused for Triton, naming the input
    ],
)
def test_a_model_that_cannot_be_served_is_refused_with_the_reason(api, operator, staged, name):
    row = matrix.run_one(api, real_models.BY_NAME[name], staged, timeout=600)
    assert row["result"] == matrix.REFUSED, row
