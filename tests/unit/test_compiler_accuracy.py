import numpy as np
import pytest
from tensorkiln.api import AccuracyTolerance
from tensorkiln_compiler.accuracy import compare

TOLERANCE = AccuracyTolerance()  # 0.05 abs, 0.05 rel, cosine 0.99


def check(reference, candidate, tolerance=TOLERANCE):
    return compare(
        [[np.asarray(reference, np.float32)]],
        [[np.asarray(candidate, np.float32)]],
        tolerance,
        samples=2,
        synthetic=False,
    )


def test_identical_outputs_pass_with_top1_on_class_scores():
    scores = [[0.1, 0.9], [0.8, 0.2]]
    accuracy, rejection = check(scores, scores)
    assert rejection is None
    assert (accuracy.max_abs_error, accuracy.max_rel_error, accuracy.cosine_similarity, accuracy.top1_agreement) == (
        0,
        0,
        1,
        1,
    )


def test_small_absolute_error_near_zero_passes():
    accuracy, rejection = check([[0.001, 10.0]], [[0.02, 10.1]])  # 20x off near zero, 1% off on 10
    assert rejection is None
    assert accuracy.max_rel_error == pytest.approx(0.01, rel=1e-3)  # only 10.1 is beyond the absolute limit


def test_large_error_is_rejected_with_figures():
    accuracy, rejection = check([[1.0, 2.0], [3.0, 4.0]], [[1.0, 2.0], [3.0, 4.5]])
    assert accuracy.max_abs_error == 0.5 and accuracy.max_rel_error == 0.125
    assert "maxRelError 0.05 (max 0.125)" in rejection


def test_top1_gate_only_when_asked():
    reference, candidate = [[0.4, 0.6], [0.6, 0.4]], [[0.6, 0.4], [0.6, 0.4]]
    loose = AccuracyTolerance(max_abs_error=1, max_rel_error=1, min_cosine_similarity=0)
    accuracy, rejection = check(reference, candidate, loose)
    assert accuracy.top1_agreement == 0.5 and rejection is None
    _, rejection = check(reference, candidate, loose.model_copy(update={"min_top1_agreement": 0.9}))
    assert "top-1 agreement 0.500 < minTop1Agreement 0.9" in rejection


def test_nan_outputs_are_rejected_and_figures_stay_json_safe():
    accuracy, rejection = check([[1.0, 0.0]], [[np.nan, 0.0]])
    assert rejection and "cosine similarity 0.000000" in rejection
    assert np.isfinite(accuracy.max_abs_error) and np.isfinite(accuracy.max_rel_error)


def detections(*counts, shift=0.0):
    """Unbatched feeds of one output whose rows vary per sample, like NonMaxSuppression's selected_indices."""
    return [[np.arange(count * 3, dtype=np.float32).reshape(count, 3) + shift] for count in counts]


def test_unbatched_outputs_of_varying_shape_compare_sample_by_sample():
    reference = detections(3, 0, 5)
    kw = {"samples": 3, "synthetic": False, "batched": False, "names": ["selected_indices"]}
    accuracy, rejection = compare(reference, detections(3, 0, 5), TOLERANCE, **kw)
    assert rejection is None and (accuracy.max_abs_error, accuracy.cosine_similarity) == (0, 1)
    accuracy, rejection = compare(reference, detections(3, 0, 5, shift=1.0), TOLERANCE, **kw)
    assert accuracy.max_abs_error == 1.0 and "maxRelError" in rejection  # figures pool every sample


def test_a_shape_differing_from_the_reference_is_a_graded_rejection_naming_output_and_sample():
    kw = {"samples": 3, "synthetic": False, "batched": False, "names": ["selected_indices"]}
    accuracy, rejection = compare(detections(3, 0, 5), detections(3, 1, 4), TOLERANCE, **kw)
    assert rejection == (
        "output 'selected_indices' has shape [1, 3] on sample 1, the reference [0, 3]; 1 more feeds differ in shape"
    )
    assert accuracy.max_abs_error == 0 and accuracy.cosine_similarity == pytest.approx(1)  # sample 0 agrees
