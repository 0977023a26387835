"""An explicit null is absent, as at the API server (a regression of the fault suite's admission
fuzz, e2e/faults/test_fuzz_admission.py, which compares pydantic with the real API server).

The API server prunes the null of a declared field (YAML `field:` with nothing after it), and a
null value in a map, before defaulting and validation: `shapes: null` or
`resources.requests.memory: null` was admitted while pydantic refused it. KubeModel prunes them
too (api/common.py); that changes no schema, so the CRDs stay as they are.
"""

import json

import pytest
from pydantic import ValidationError
from tensorkiln_api import InferenceModelSpec, field_errors

SOURCE = {"uri": "https://models.example/m.onnx"}


def verdict(spec: dict) -> tuple[bool, list[str]]:
    """pydantic on the manifest as it travels (JSON, strictly typed like the structural schema)."""
    try:
        InferenceModelSpec.model_validate_json(json.dumps(spec), strict=True)
    except ValidationError as error:
        return False, field_errors(error)
    return True, []


@pytest.mark.parametrize(
    "spec",
    [
        {"source": {**SOURCE, "format": None}},
        {"source": SOURCE, "shapes": None},
        {"source": SOURCE, "shapes": {"batch": {"min": None, "opt": 4, "max": 32}}},
        {"source": SOURCE, "slo": {"targetMilliseconds": 20, "percentile": None, "minReplicas": None}},
        {"source": SOURCE, "compile": {"objective": None, "retries": None}},
        {"source": SOURCE, "serving": {"resources": {"requests": {"memory": None, "cpu": "1"}}}},
    ],
)
def test_an_explicit_null_is_absent_as_the_api_server_prunes_it(spec):
    assert verdict(spec) == (True, [])
    defaulted = InferenceModelSpec.model_validate(spec).model_dump(by_alias=True, mode="json")
    assert defaulted["source"]["format"] == "onnx" and defaulted["shapes"]["batch"]["max"] >= 1


def test_a_null_required_field_is_still_missing_and_named():
    ok, errors = verdict({"source": SOURCE, "slo": {"targetMilliseconds": None}})
    assert not ok and any(e.startswith("spec.slo.targetMilliseconds:") for e in errors), errors


def test_an_unknown_field_is_refused_even_when_null():
    ok, errors = verdict({"source": SOURCE, "bogusField": None})
    assert not ok and errors[0].startswith("spec.bogusField:")
