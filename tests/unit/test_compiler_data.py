import numpy as np
import pytest
from tensorkiln.api import Shapes
from tensorkiln_compiler.data import load_dataset, synthesize
from tensorkiln_compiler.errors import InvalidInput
from tensorkiln_compiler.fetch import fetch
from tensorkiln_compiler.inspection import inspect_model

from .compiler_support import conv_classifier


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
