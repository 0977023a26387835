"""spec.compile.syntheticInputs: a constant or a whole range per input, and never beside a dataset."""

import pytest
from pydantic import ValidationError
from tensorkiln_api import CompileOptions, field_errors


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ({"sr": {"value": 16000, "min": 8000}}, "spec.syntheticInputs.sr.value: value must not be set with min or max"),
        ({"sr": {"min": 8000}}, "spec.syntheticInputs.sr.max: max must be set with min, and min with max"),
        ({"sr": {"min": 3, "max": 1}}, "spec.syntheticInputs.sr.min: min must be <= max"),
    ],
)
def test_an_entry_is_a_constant_or_a_whole_range(given, error):
    with pytest.raises(ValidationError) as refused:
        CompileOptions.model_validate({"syntheticInputs": given})
    assert field_errors(refused.value) == [error]


def test_entries_that_fit_are_admitted_an_empty_one_meaning_the_compilers_own_draw():
    options = CompileOptions.model_validate(
        {"syntheticInputs": {"sr": {"value": 16000}, "x": {"min": 0, "max": 1}, "y": {}}}
    )
    assert options.model_dump(by_alias=True, exclude_none=True)["syntheticInputs"] == {
        "sr": {"value": 16000.0},
        "x": {"min": 0.0, "max": 1.0},
        "y": {},
    }


def test_not_beside_a_calibration_dataset():
    with pytest.raises(ValidationError) as refused:
        CompileOptions.model_validate(
            {"syntheticInputs": {"sr": {"value": 16000}}, "calibration": {"datasetUri": "https://example.com/d.npz"}}
        )
    assert field_errors(refused.value) == [
        "spec.syntheticInputs: syntheticInputs must be unset when calibration is set: the dataset gives every input"
    ]
