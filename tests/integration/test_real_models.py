"""Real models from PyPI wheels, applied as a new user would (a minimal spec on the real CPU node):
two that serve, compared with onnxruntime through Triton, and one that cannot be served, refused
with its exact message. The whole coverage matrix (ten models, a compile each) is `make matrix`
(e2e/bench_models.py); these are the quick ones, so that `make test` proves the path. silero-vad is
among them because only the cluster path showed its Triton refusing its scalar input's config."""

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


@pytest.mark.parametrize(
    "name",
    [
        "digits-mlp-opset9",  # an old opset, classic-ML operators
        "silero-vad",  # stateful, served unbatched, a rank-0 input, control flow
    ],
)
def test_a_real_model_serves_and_matches_onnxruntime(api, operator, staged, name):
    row = matrix.run_one(api, real_models.BY_NAME[name], staged, timeout=600)
    assert row["result"] == matrix.SERVED, row
    assert row["engine"] != "-" and row["cosine"] > 0.999


def test_a_model_with_a_map_output_is_refused_with_the_hint(api, operator, staged):
    row = matrix.run_one(api, real_models.BY_NAME["digits-mlp-opset9-zipmap"], staged, timeout=600)
    assert row["result"] == matrix.REFUSED, row
