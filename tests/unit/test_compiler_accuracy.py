import numpy as np
import onnxruntime as ort
import pytest
from tensorkiln.status.engine import engine_status
from tensorkiln_api import AccuracyTolerance, CompileJobSpec, Shapes
from tensorkiln_compiler import pipeline
from tensorkiln_compiler.accuracy import compare
from tensorkiln_compiler.benchmark import BenchmarkPlan
from tensorkiln_compiler.data import synthesize
from tensorkiln_compiler.inspection import inspect_model
from tensorkiln_compiler.text import Padding, padding

from .compiler_support import compile_spec, conv_classifier, serve_registry, text_encoder

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


# --- a text encoder's padding -------------------------------------------------------------------------

TEXT_DIMS = [{"input": name, "axis": 1, "min": 1, "opt": 8, "max": 16} for name in ("input_ids", "attention_mask")]
TEXT_SHAPES = {"batch": {"min": 1, "opt": 2, "max": 4}, "dynamicDims": TEXT_DIMS}


def text_run(tmp_path, **graph):
    """The reference graph, and the one with `graph`'s changes, run on synthetic text feeds in batches of 2:
    (model info, feeds, reference outputs, candidate outputs)."""
    model = inspect_model(text_encoder(tmp_path / "ref.onnx"), Shapes.model_validate(TEXT_SHAPES), 2)
    feeds = synthesize(model.inputs, table_rows=model.table_rows).batches(2)
    candidate = text_encoder(tmp_path / "candidate.onnx", **graph)
    runs = []
    for path in (model.path, candidate):
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        runs.append([session.run(None, feed) for feed in feeds])
    return model, feeds, *runs


def test_garbage_at_padded_positions_passes_when_the_mask_is_read_and_fails_when_not(tmp_path):
    model, feeds, reference, candidate = text_run(tmp_path, garbage_padding=True)
    names = [t.name for t in model.outputs]
    assert names == ["last_hidden_state", "pooled"]
    found = padding(feeds, model.inputs, model.outputs)
    assert found.mask == "attention_mask" and found.per_token == (True, False)  # pooled: a static hidden of 4
    kw = {"samples": 4, "synthetic": True, "names": names}

    accuracy, rejection = compare(reference, candidate, TOLERANCE, padding=found, **kw)
    assert rejection is None and accuracy.max_abs_error == 0 and accuracy.cosine_similarity == pytest.approx(1)
    tokens = sum(int(feed["attention_mask"].sum()) for feed in feeds)
    padded = sum(int((feed["attention_mask"] == 0).sum()) for feed in feeds)
    assert padded > 0  # the synthetic feeds are padded, so the garbage is there
    assert accuracy.padding_ignored.model_dump(by_alias=True) == {
        "mask": "attention_mask",
        "outputs": ["last_hidden_state"],
        "comparedElements": tokens * 4 + len(feeds) * 2 * 4,  # the tokens' states, and every pooled element
        "ignoredElements": padded * 4,
    }

    naive, rejection = compare(reference, candidate, TOLERANCE, **kw)  # every element, as before masks were read
    assert naive.max_abs_error > 900 and "cosine similarity" in rejection and naive.padding_ignored is None


def test_a_real_difference_on_the_tokens_is_still_caught(tmp_path):
    model, feeds, reference, _ = text_run(tmp_path)
    candidate = [
        [outputs[0] + 0.5 * feed["attention_mask"][..., None], outputs[1]] for feed, outputs in zip(feeds, reference)
    ]
    found = padding(feeds, model.inputs, model.outputs)
    accuracy, rejection = compare(reference, candidate, TOLERANCE, samples=4, synthetic=True, padding=found)
    assert accuracy.max_abs_error == pytest.approx(0.5) and "maxRelError" in rejection
    assert accuracy.padding_ignored.outputs == ["0"]  # unnamed outputs go by index


def test_without_an_attention_mask_nothing_is_masked_and_the_figures_are_as_before(tmp_path):
    model = inspect_model(
        conv_classifier(tmp_path / "m.onnx"), Shapes.model_validate({"batch": TEXT_SHAPES["batch"]}), 2
    )
    feeds = synthesize(model.inputs).batches(2)
    assert padding(feeds, model.inputs, model.outputs) is None
    no_mask = inspect_model(
        text_encoder(tmp_path / "t.onnx", mask_name=""),
        Shapes.model_validate({**TEXT_SHAPES, "dynamicDims": TEXT_DIMS[:1]}),
        2,
    )
    assert padding(synthesize(no_mask.inputs).batches(2), no_mask.inputs, no_mask.outputs) is None
    accuracy, rejection = check([[1.0, 2.0], [3.0, 4.0]], [[1.0, 2.0], [3.0, 4.5]])
    assert accuracy.padding_ignored is None and "paddingIgnored" not in accuracy.model_dump(by_alias=True, mode="json")
    assert (accuracy.max_abs_error, accuracy.max_rel_error) == (0.5, 0.125)


def test_a_mask_that_is_not_0_or_1_is_not_read_as_padding(tmp_path):
    model, feeds, _, _ = text_run(tmp_path)
    additive = [{**feed, "attention_mask": (feed["attention_mask"] - 1) * 10000} for feed in feeds]
    assert padding(additive, model.inputs, model.outputs) is None


def test_top1_of_per_token_scores_is_taken_over_each_rows_tokens():
    mask = np.array([[1, 1, 0], [1, 1, 1], [0, 0, 0]])  # the last row has no token: no top-1 of its own
    reference = np.array([[1.0, 2.0, 0.0], [3.0, 1.0, 0.0], [0.0, 0.0, 0.0]], np.float32)
    candidate = np.array([[1.0, 2.0, 50.0], [3.0, 1.0, 0.0], [9.0, 0.0, 0.0]], np.float32)
    found = Padding("attention_mask", (mask.astype(bool),), (True,))
    loose = AccuracyTolerance(max_abs_error=100, max_rel_error=100, min_cosine_similarity=0)
    accuracy, _ = compare([[reference]], [[candidate]], loose, samples=3, synthetic=False, padding=found)
    assert accuracy.top1_agreement == 1.0 and accuracy.max_abs_error == 0
    naive, _ = compare([[reference]], [[candidate]], loose, samples=3, synthetic=False)
    assert naive.top1_agreement == pytest.approx(2 / 3)


def test_a_compiled_text_encoder_says_it_left_the_padding_out(tmp_path, monkeypatch):
    registry = serve_registry(tmp_path / "registry", monkeypatch)
    body = compile_spec(text_encoder(tmp_path / "t.onnx", token_types=True), tmp_path / "registry", shapes={
        **TEXT_SHAPES, "dynamicDims": [*TEXT_DIMS, {**TEXT_DIMS[0], "input": "token_type_ids"}]})  # fmt: skip
    outcome = pipeline.run(
        CompileJobSpec.model_validate(body),
        tmp_path / "work",
        pipeline.Options(BenchmarkPlan(warmup=0, runs=3), tune_runtime_settings=False),
    )
    manifest = outcome.manifest
    assert manifest.calibration["syntheticText"]["tableRows"] == {"input_ids": 50, "token_type_ids": 2}
    for candidate in manifest.candidates:
        assert candidate.status in ("Selected", "Passed"), (candidate.id, candidate.reason)
        assert candidate.accuracy.padding_ignored.outputs == ["last_hidden_state"]
    stored = registry.manifest(outcome.payload["engine"]["digest"])
    assert stored["candidates"][0]["accuracy"]["paddingIgnored"]["mask"] == "attention_mask"
    _, conditions = engine_status(manifest, "ab" * 32, "file:///r", False)
    message = next(c["message"] for c in conditions if c["type"] == "AccuracyPassed")
    assert "padded positions (attention_mask 0) of 'last_hidden_state' left out: " in message
    assert message.endswith(" padded ones ignored"), message
