"""The real-model matrix's fixtures (tensorkiln_local.cluster.real_models), offline: no wheel is
fetched here. The specs it writes are valid API objects, and the inputs it makes have the shapes,
types and contents the models take."""

import numpy as np
import pytest
from tensorkiln_api import CompileJobSpec
from tensorkiln_api.inferencemodel import InferenceModelSpec
from tensorkiln_local.cluster import real_models as rm


@pytest.mark.parametrize("model", rm.MODELS, ids=lambda m: m.name)
def test_minimal_specs_are_valid_api_objects(model, tmp_path):
    spec = InferenceModelSpec.model_validate(model.inference_model(sha256="0" * 64)["spec"])
    assert spec.source.uri == f"file://{rm.STAGED_ROOT}/{model.name}.onnx"
    assert spec.compile.objective.batch_size == model.batch_size
    job = CompileJobSpec.model_validate(
        model.compile_job(tmp_path / model.filename, tmp_path / "data.npz", f"file://{tmp_path}/registry")
    )
    assert job.batched == model.batched == (spec.serving.max_batch_size != 0)
    if model.batched:
        assert job.shapes.batch.min <= job.objective.batch_size <= job.shapes.batch.max
    else:  # one inference of full shapes a request (every dynamic axis, axis 0 too, from dynamicDims)
        assert job.objective.batch_size == 1


def test_names_are_unique_dns_labels_and_each_model_has_a_source():
    assert len(rm.BY_NAME) == len(rm.MODELS)
    for model in rm.MODELS:
        assert model.name.replace("-", "").isalnum() and model.name.islower() and len(model.name) <= 63
        assert (model.source is None) != (model.derive is None), model.name


def test_sentences_are_wordpiece_ids_with_cls_and_sep():
    for sentence, ids in rm.SENTENCES:
        assert ids[0] == 101 and ids[-1] == 102 and 100 not in ids, sentence  # no [UNK]
        assert all(0 < i < 30522 for i in ids)
        assert len(ids) <= rm.TEXT_LENGTH


def test_text_batch_pads_and_masks():
    feeds = rm.text_batch(30, seed=1, token_types=True)
    assert set(feeds) == {"input_ids", "attention_mask", "token_type_ids"}
    ids, mask = feeds["input_ids"], feeds["attention_mask"]
    assert ids.shape == mask.shape == (30, rm.TEXT_LENGTH) and ids.dtype == mask.dtype == np.int64
    assert np.array_equal(mask, ids != 0) and (ids[:, 0] == 101).all()
    lengths = mask.sum(axis=1)
    assert (ids[np.arange(30), lengths - 1] == 102).all()
    assert len(set(lengths.tolist())) > 3  # a real spread of sequence lengths
    assert np.array_equal(rm.text_batch(30, seed=1)["input_ids"], ids)


def test_audio_is_speech_between_near_silence():
    speech, silence = rm.speech_like(1.0, seed=3), rm.near_silence(1.0, seed=3)
    assert speech.dtype == silence.dtype == np.float32
    assert len(speech) == len(silence) == rm.SAMPLE_RATE
    assert 0.4 < np.abs(speech).max() <= 0.55 and np.abs(silence).max() < 0.02
    stream = rm.audio_stream(4.0, seed=0)
    assert len(stream) == 4 * rm.SAMPLE_RATE
    loud = np.array([np.abs(stream[i : i + rm.CHUNK]).max() > 0.1 for i in range(0, len(stream), rm.CHUNK)])
    assert 0.2 < loud.mean() < 0.8  # both speech and silence in every stream


def test_letterbox_keeps_aspect_and_pads_grey():
    image = np.zeros((100, 200, 3), np.uint8)
    out = rm.letterbox(image, 320)
    assert out.shape == (3, 320, 320) and out.dtype == np.float32
    assert out[:, :160].max() == 0 and np.allclose(out[:, 161:], 114 / 255)


def test_digits_are_held_out_rows():
    x = rm.digits_samples(None, 16, seed=0)["X"]
    assert x.shape == (16, 64) and x.dtype == np.float32 and 0 <= x.min() and x.max() <= 16
