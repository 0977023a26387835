import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto
from tensorkiln_api import Shapes
from tensorkiln_compiler.data import load_dataset, synthesize
from tensorkiln_compiler.errors import InvalidInput
from tensorkiln_compiler.fetch import fetch
from tensorkiln_compiler.inspection import Tensor, inspect_model
from tensorkiln_compiler.text import synthetic_feeds

from .compiler_support import conv_classifier, text_encoder


@pytest.fixture
def inputs(tmp_path):
    shapes = Shapes.model_validate({"batch": {"min": 1, "opt": 2, "max": 4}})
    return inspect_model(conv_classifier(tmp_path / "m.onnx"), shapes, 2).inputs


def load(tmp_path, inputs, max_calibration=256, **arrays):
    np.savez(tmp_path / "d.npz", **arrays)
    fetched = fetch(f"file://{tmp_path}/d.npz", tmp_path, field="spec.calibration.datasetUri", what="CalibrationData")
    return load_dataset(fetched, inputs, max_calibration)


def test_npz_split_holds_validation_out(tmp_path, inputs):
    x = np.arange(20 * 192, dtype=np.float64).reshape(20, 3, 8, 8)
    data = load(tmp_path, inputs, x=x)
    assert data.calibration["x"].dtype == np.float32  # cast to the input's type
    assert len(data.calibration["x"]) == 15 and len(data.validation["x"]) == 5
    assert not set(data.calibration["x"][:, 0, 0, 0]) & set(data.validation["x"][:, 0, 0, 0])
    assert len(load(tmp_path, inputs, max_calibration=4, x=x).calibration["x"]) == 4
    manifest = data.manifest()
    assert manifest["syntheticData"] is False and manifest["sha256"] and manifest["validationSamples"] == 5


def test_directory_of_npy(tmp_path, inputs):
    (tmp_path / "data").mkdir()
    np.save(tmp_path / "data" / "x.npy", np.zeros((1, 3, 8, 8), np.float32))
    fetched = fetch(f"file://{tmp_path}/data", tmp_path, field="spec.calibration.datasetUri", what="CalibrationData")
    data = load_dataset(fetched, inputs, 8)
    assert data.calibration["x"] is data.validation["x"]  # one sample: validated on itself


@pytest.mark.parametrize(
    ("arrays", "expected"),
    [
        ({"y": np.zeros((2, 3, 8, 8))}, "d.npz has no array for input 'x' (has: y)"),
        ({"x": np.zeros((0, 3, 8, 8), np.float32)}, "array 'x' is empty"),
        ({"x": np.zeros((2, 3, 8), np.float32)}, "array 'x' has shape (2, 3, 8); input 'x' needs rank 4"),
        ({"x": np.zeros((2, 3, 16, 8), np.float32)}, "axis 2 of input 'x' accepts 8..8"),
        ({"x": np.zeros((2, 3, 8, 8), np.complex64)}, "array 'x' is complex64"),
    ],
)
def test_bad_datasets_name_the_input(tmp_path, inputs, arrays, expected):
    with pytest.raises(InvalidInput) as error:
        load(tmp_path, inputs, **arrays)
    assert error.value.reason == "CalibrationDataInvalid"
    assert error.value.message.startswith("spec.calibration.datasetUri") and expected in error.value.message


def test_not_a_dataset(tmp_path, inputs):
    (tmp_path / "d.npz").write_text("hello")
    fetched = fetch(f"file://{tmp_path}/d.npz", tmp_path, field="spec.calibration.datasetUri", what="CalibrationData")
    with pytest.raises(InvalidInput, match="neither an .npz nor a directory"):
        load_dataset(fetched, inputs, 8)


def test_synthetic_data_is_seeded_and_shaped(inputs):
    first, second = synthesize(inputs), synthesize(inputs)
    assert first.synthetic and first.manifest()["datasetUri"] is None
    assert first.calibration["x"].shape == (12, 3, 8, 8) and first.validation["x"].shape == (4, 3, 8, 8)
    np.testing.assert_array_equal(first.validation["x"], second.validation["x"])
    assert [s["x"].shape for s in first.calibration_samples()][:2] == [(1, 3, 8, 8)] * 2


def test_batches_fill_the_last_batch(inputs):
    data = synthesize(inputs)  # 4 validation samples
    batches = data.batches(3)
    assert [b["x"].shape[0] for b in batches] == [3, 3]
    np.testing.assert_array_equal(batches[1]["x"][1], data.validation["x"][0])


def text_shapes(*names, opt=8):
    dims = [{"input": name, "axis": 1, "min": 1, "opt": opt, "max": 16} for name in names]
    return Shapes.model_validate({"batch": {"min": 1, "opt": 2, "max": 4}, "dynamicDims": dims})


TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def test_a_text_encoders_synthetic_feeds_look_like_tokenised_text(tmp_path):
    model = inspect_model(text_encoder(tmp_path / "t.onnx", token_types=True), text_shapes(*TEXT_INPUTS), 2)
    assert model.table_rows == {"input_ids": 50, "token_type_ids": 2}  # the Gathers' tables
    data = synthesize(model.inputs, table_rows=model.table_rows)
    feeds = {name: np.concatenate([data.calibration[name], data.validation[name]]) for name in TEXT_INPUTS}
    mask, ids, types = feeds["attention_mask"], feeds["input_ids"], feeds["token_type_ids"]
    assert mask.shape == ids.shape == types.shape == (16, 8) and mask.dtype == ids.dtype == np.int64
    tokens = mask.sum(axis=1)
    assert (np.diff(mask, axis=1) <= 0).all() and set(np.unique(mask)) == {0, 1}  # 1s, then 0s: a prefix
    assert tokens.min() >= 1 and len(set(tokens)) > 3  # one token at least, lengths vary
    assert ((ids >= 1) & (ids < 50))[mask == 1].all() and (ids[mask == 0] == 0).all()  # [PAD] = 0 after
    assert set(np.unique(types)) == {0, 1} and (types[mask == 0] == 0).all()
    assert (np.diff(types, axis=1)[mask[:, 1:] == 1] >= 0).all()  # segment 0, then 1, within the tokens
    text = data.manifest()["syntheticText"]
    assert text["attentionMask"] == "attention_mask" and text["tableRows"] == {"input_ids": 50, "token_type_ids": 2}
    assert text["tokensPerRow"] == [int(tokens.min()), int(tokens.max())] and text["idRanges"]["token_type_ids"] == [
        0,
        1,
    ]
    session = ort.InferenceSession(str(model.path), providers=["CPUExecutionProvider"])
    session.run(None, data.batches(2)[0])  # every id within its table: onnxruntime's Gather accepts them
    np.testing.assert_array_equal(
        synthesize(model.inputs, table_rows=model.table_rows).validation["input_ids"], data.validation["input_ids"]
    )


def test_ids_of_a_table_dequantised_in_the_graph_are_bounded_by_shape_inference(tmp_path):
    path = text_encoder(tmp_path / "t.onnx", int8_table=True, vocab=20)
    model = inspect_model(path, text_shapes("input_ids", "attention_mask"), 2)
    assert model.table_rows == {"input_ids": 20}
    ids = synthesize(model.inputs, table_rows=model.table_rows).calibration["input_ids"]
    assert ids.max() < 20 and ids.max() > 15  # the whole table, not only the 0..15 kept for unknown tables


def test_unknown_tables_keep_ids_small_and_token_types_0_and_unbatched_rows_are_the_last_axis():
    tensors = [Tensor(name, TensorProto.INT64, (None, None)) for name in TEXT_INPUTS]
    shapes = dict.fromkeys(TEXT_INPUTS, (16, 2, 8))  # unbatched: the sample index, then [batch, seq]
    arrays = synthetic_feeds(tensors, shapes, {}, seed=0)
    mask = arrays["attention_mask"]
    assert mask.shape == (16, 2, 8) and (np.diff(mask, axis=-1) <= 0).all() and (mask.sum(axis=-1) >= 1).all()
    assert arrays["input_ids"].max() < 16 and not arrays["token_type_ids"].any()  # a type table of 1 row is possible
    without_mask = [t for t in tensors if t.name != "attention_mask"]
    assert synthetic_feeds(without_mask, shapes, {}, seed=0) == {}


def test_without_an_attention_mask_synthetic_ids_are_drawn_as_before(tmp_path):
    path = text_encoder(tmp_path / "t.onnx", mask_name="")
    model = inspect_model(path, text_shapes("input_ids"), 2)
    assert model.table_rows == {}
    data = synthesize(model.inputs, table_rows=model.table_rows)
    before = np.random.default_rng(0).integers(0, 16, (16, 8))  # what synthesis has always drawn
    np.testing.assert_array_equal(np.concatenate([data.calibration["input_ids"], data.validation["input_ids"]]), before)
    assert "syntheticText" not in data.manifest() and data.text is None
