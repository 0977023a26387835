"""`tensorkiln infer`'s request: inputs from files checked against the model's metadata, and the answer."""

import numpy as np
import pytest
from PIL import Image
from tensorkiln_client.request import RequestError, ServedTensor, checked, describe_output, inputs_from, top_k

IMAGE = ServedTensor("x", "FP32", (-1, 3, 48, 192))
IDS = ServedTensor("input_ids", "INT64", (-1, -1))
MASK = ServedTensor("attention_mask", "INT64", (-1, -1))


def test_a_sample_without_its_batch_axis_gets_one_where_the_model_batches():
    assert checked(IMAGE, np.zeros((3, 48, 192), np.float32), batching=True).shape == (1, 3, 48, 192)
    with pytest.raises(RequestError):  # full shapes: nothing is added
        checked(IMAGE, np.zeros((3, 48, 192), np.float32), batching=False)


def test_unbatched_full_shapes_pass_as_they_are_and_a_scalar_is_sent_as_triton_s_1(tmp_path):
    state, sr = ServedTensor("state", "FP32", (2, -1, 8)), ServedTensor("sr", "INT64", (1,))  # max_batch_size 0
    np.savez(tmp_path / "step.npz", state=np.zeros((2, 3, 8), np.float32), sr=np.array(16000))
    inputs = inputs_from(tmp_path / "step.npz", [state, sr], batching=False)
    assert inputs["state"].shape == (2, 3, 8) and inputs["sr"].tolist() == [16000]


def test_a_wrong_shape_or_dtype_names_the_tensor_what_it_expects_and_what_it_got():
    with pytest.raises(RequestError) as shape:
        checked(IMAGE, np.zeros((1, 3, 48, 190), np.float32), batching=True)
    assert str(shape.value) == "input 'x': expected shape [-1, 3, 48, 192] of FP32 (float32), got [1, 3, 48, 190]"
    with pytest.raises(RequestError) as dtype:
        checked(IMAGE, np.zeros((1, 3, 48, 192)), batching=True)
    assert str(dtype.value) == (
        "input 'x': expected dtype float32 (FP32), got float64; convert it, e.g. array.astype(np.float32)"
    )


def test_npy_npz_and_their_mistakes(tmp_path):
    np.save(tmp_path / "one.npy", np.ones((2, 3, 48, 192), np.float32))
    assert inputs_from(tmp_path / "one.npy", [IMAGE], True)["x"].shape == (2, 3, 48, 192)
    np.savez(tmp_path / "text.npz", input_ids=np.ones((1, 7), np.int64), attention_mask=np.ones((1, 7), np.int64))
    both = inputs_from(tmp_path / "text.npz", [IDS, MASK], True)
    assert {k: v.shape for k, v in both.items()} == {"input_ids": (1, 7), "attention_mask": (1, 7)}
    np.savez(tmp_path / "typo.npz", input_id=np.ones((1, 7), np.int64), attention_mask=np.ones((1, 7), np.int64))
    with pytest.raises(RequestError, match=r"holds \['attention_mask', 'input_id'\]; the model's inputs are"):
        inputs_from(tmp_path / "typo.npz", [IDS, MASK], True)
    with pytest.raises(RequestError, match="the model has 2 inputs \\(input_ids, attention_mask\\): give a .npz"):
        inputs_from(tmp_path / "one.npy", [IDS, MASK], True)
    (tmp_path / "x.csv").write_text("1,2\n")
    with pytest.raises(RequestError, match="expected a .npy, .npz or image file"):
        inputs_from(tmp_path / "x.csv", [IMAGE], True)


def test_an_image_is_resized_to_the_input_laid_out_as_it_wants_and_scaled_to_0_1(tmp_path):
    Image.new("RGB", (640, 100), (255, 0, 51)).save(tmp_path / "line.png")
    (x,) = inputs_from(tmp_path / "line.png", [IMAGE], True).values()
    assert x.shape == (1, 3, 48, 192) and x.dtype == np.float32
    np.testing.assert_allclose(x[0, :, 0, 0], [1.0, 0.0, 0.2], atol=1e-6)
    nhwc = ServedTensor("image", "FP32", (-1, 224, 224, 3))
    assert inputs_from(tmp_path / "line.png", [nhwc], True)["image"].shape == (1, 224, 224, 3)
    with pytest.raises(RequestError, match="does not look like an image"):
        inputs_from(tmp_path / "line.png", [IDS], True)


def test_a_classifier_gets_its_top_k_and_anything_else_a_summary():
    assert top_k(np.array([[0.1, 0.7, 0.2]], np.float32), 2) == [(1, pytest.approx(0.7)), (2, pytest.approx(0.2))]
    assert top_k(np.zeros((2, 3)), 2) is None  # two samples: no single ranking
    assert describe_output("probs", np.array([[0.9, 0.1]], np.float32), 5) == [
        "probs: shape [1, 2] float32",
        "  class 0: 0.9000",
        "  class 1: 0.1000",
    ]
    assert describe_output("boxes", np.arange(8, dtype=np.float32).reshape(1, 2, 4), 5)[1] == (
        "  min 0, max 7, mean 3.5"
    )
