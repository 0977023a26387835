"""The admission fuzz's mutants (e2e/faults/manifests.py) without a cluster: a mutant breaks the one rule it
names, so the pydantic model (and the API server, in the fault suite) refuses it naming that field. A mutant that
broke a second rule by the way failed the fault suite with an error that named another field."""

import importlib.util
import sys
from pathlib import Path

import pytest

MANIFESTS = Path(__file__).resolve().parents[2] / "e2e" / "faults" / "manifests.py"
SOURCE = {"uri": "s3://models/m.onnx"}


@pytest.fixture(scope="module")
def manifests():
    spec = importlib.util.spec_from_file_location("fault_manifests", MANIFESTS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


@pytest.mark.parametrize(
    ("spec", "mutation", "path", "how"),
    [
        # Only shapes.batch.min set, above the default opt (seed 106): opt and max are derived from it.
        ({"shapes": {"batch": {"min": 16}}}, "min-gt-max", ["shapes", "batch", "opt"], "batch-max"),
        ({"shapes": {"batch": {"min": 16}}}, "min-gt-max", ["shapes", "batch", "min"], "batch-min"),
        # serving.maxBatchSize above the default batch max (seed 4): shapes.batch.max is derived from it.
        ({"serving": {"maxBatchSize": 64}}, "cel", ["compile", "objective", "batchSize"], "objective-outside-profile"),
    ],
)
def test_a_mutant_breaks_only_the_rule_it_names(manifests, spec, mutation, path, how):
    assert manifests.pydantic_verdict({"source": SOURCE, **spec}) == (True, [])
    case = manifests.mutate({"source": SOURCE, **spec}, mutation, path, how)
    accepted, errors = manifests.pydantic_verdict(case.spec)
    assert not accepted and errors and all(error.startswith(f"{case.field}:") for error in errors), errors
