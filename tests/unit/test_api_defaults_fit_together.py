"""Defaults that fit together: the minimal InferenceModel (a source, everything else defaulted) with any one
field set to a value valid on its own is admitted, by the pydantic model and by the CRD's CEL rules alike.

The fields and their values come from the CRD's spec schema, which crdgen renders from the pydantic models:
every property however deep (inside list items too), each with values at its bounds, around the defaults
and at the int32 and int64 limits, so a field is covered as soon as it is declared. A value is valid on its
own unless a rule refuses it whose fields the case sets itself (maxSurge 0, or a dynamicDims entry's min
above the opt the entry needs): a contradiction of the user's own making, not of a default. A rule that makes
another field required (reason FieldValueRequired: pools with mode Explicit, latencyBudgetMilliseconds with
metric Throughput) gets that field added, as the user would have to, and then the case must pass.

What the spec leaves unset is then derived: the derived spec (the operator's normalised_spec) must pass the
same rules with every field set, and read back unchanged.
"""

import copy
import json
from typing import get_args, get_origin

import pytest
from pydantic import BaseModel, ValidationError
from tensorkiln_api import InferenceModelSpec, field_errors
from tensorkiln_api.common import (
    DNS_LABEL_PATTERN,
    DNS_SUBDOMAIN_PATTERN,
    LABEL_VALUE_PATTERN,
    MODEL_URI_PATTERN,
    QUALIFIED_NAME_PATTERN,
    QUANTITY_PATTERN,
    SHA256_PATTERN,
)
from tensorkiln_api.inferencemodel import PRODUCT_GLOB_PATTERN

from .cel_admission import SPEC_SCHEMA, Path, dotted, fields_read, refusals

MINIMAL = {"source": {"uri": "https://models.example.com/resnet50/model.onnx"}}
MAP_KEY = "cpu"  # a label key and a resource name alike: a key every map of the spec takes
PATTERN_VALUES = {
    MODEL_URI_PATTERN: [
        "file:///models/m.onnx",
        "s3://models/m.onnx",
        "https://models.example.com/",
        "pvc://claim/m",
        "gs://models/m.onnx",
        "hf://owner/model@0123abc/m.onnx",
    ],
    SHA256_PATTERN: ["0" * 64, "f" * 64],
    DNS_LABEL_PATTERN: ["a", "a-0"],
    DNS_SUBDOMAIN_PATTERN: ["a", "a-0.b"],
    PRODUCT_GLOB_PATTERN: ["NVIDIA-H100*", "*"],
    QUALIFIED_NAME_PATTERN: ["k", "example.com/k"],
    LABEL_VALUE_PATTERN: ["", "v"],
    QUANTITY_PATTERN: ["0", "500m", "1Gi", "1e3"],
}
# Besides a field's bounds: either side of the defaults derived from other fields (8 and 16, 10, 32), and the
# int32 and int64 limits.
INTEGERS = (-1, 0, 1, 7, 9, 11, 15, 17, 31, 33, 4096, 4097, 2**31 - 1, 2**63 - 1)
NUMBERS = (0.0, 0.5, 1.0, 1e6)
PERCENT = "50%"  # int-or-string fields take a count or a percentage


def values(node: dict) -> list:
    """Values `node` accepts by its own constraints (type, enum, bounds, length, pattern)."""
    if "enum" in node:
        return list(node["enum"])
    if node.get("x-kubernetes-int-or-string"):
        return _integers(node) + (_strings(node) if "pattern" in node else ["x", PERCENT])
    kind = node.get("type")
    if kind == "object" and "properties" in node:
        return [minimal(node)]
    if kind == "object":
        return [{MAP_KEY: v} for v in values(node["additionalProperties"])]
    if kind == "array":
        items, low, high = values(node["items"]), node.get("minItems", 0), node.get("maxItems", 16)
        full = items[:high] if node.get("x-kubernetes-list-type") == "set" else items[:1] * high
        # Empty last: the first value of a list is a set one (what a FieldValueRequired rule asks for).
        return [[v] for v in items] + ([full] if len(full) >= max(low, 2) else []) + ([[]] if low == 0 else [])
    if kind == "integer":
        return _integers(node)
    if kind == "number":
        return _numbers(node)
    if kind == "boolean":
        return [True, False]
    if kind == "string":
        return _strings(node)
    raise AssertionError(f"no values for {node}")


def _bounds(node: dict, step: float) -> tuple[float | None, float | None]:
    low, high = node.get("minimum"), node.get("maximum")
    if low is not None and node.get("exclusiveMinimum"):
        low += step
    if high is not None and node.get("exclusiveMaximum"):
        high -= step
    return low, high


def _integers(node: dict) -> list[int]:
    low, high = _bounds(node, 1)
    edges = [v for v in (low, None if low is None else low + 1, high) if v is not None]
    inside = [v for v in INTEGERS if (low is None or v >= low) and (high is None or v <= high)]
    return sorted(set(edges + inside))


def _numbers(node: dict) -> list[float]:
    low, high = _bounds(node, 0.001)
    inside = [v for v in NUMBERS if (low is None or v >= low) and (high is None or v <= high)]
    return sorted({v for v in (low, high) if v is not None} | set(inside))


def _strings(node: dict) -> list[str]:
    low, high = node.get("minLength", 0), node.get("maxLength")
    if "pattern" in node:
        assert node["pattern"] in PATTERN_VALUES, f"add values for the new pattern {node['pattern']!r}"
        return [v for v in PATTERN_VALUES[node["pattern"]] if low <= len(v) <= (high or len(v))]
    return ["x" * max(low, 1)] + (["x" * high] if high else [])


def minimal(node: dict) -> dict:
    """The object `node` describes with its required fields only, each at its first value."""
    return {name: values(node["properties"][name])[0] for name in node.get("required", [])}


def leaves(node: dict, path: Path = ()) -> list[tuple[Path, dict]]:
    """Every field under `node` that takes a value (not an object of fields): its path and schema.
    A list of objects is entered at item 0."""
    if node.get("type") == "object" and "properties" in node:
        return [leaf for name, prop in node["properties"].items() for leaf in leaves(prop, (*path, name))]
    if node.get("type") == "array" and node["items"].get("type") == "object" and "properties" in node["items"]:
        return leaves(node["items"], (*path, 0))
    return [(path, node)]


def schema_at(path: Path) -> dict:
    node = SPEC_SCHEMA
    for part in path:
        node = node["items"] if isinstance(part, int) else node["properties"][part]
    return node


def with_field(spec: dict, path: Path, value) -> dict:
    """`spec` with the field at `path` set; the objects and lists on the way created minimal."""
    spec = copy.deepcopy(spec)
    node = spec
    for depth, part in enumerate(path[:-1]):
        if isinstance(part, str) and part not in node:
            container = schema_at(path[: depth + 1])
            node[part] = [minimal(container["items"])] if container["type"] == "array" else minimal(container)
        node = node[part]
    node[path[-1]] = value
    return spec


def is_set(spec: dict, path: Path) -> bool:
    node = spec
    for part in path:
        if isinstance(part, int):
            if not isinstance(node, list) or part >= len(node):
                return False
        elif not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def verdicts(spec: dict) -> tuple[list[str], list]:
    """pydantic's errors (the manifest as it travels: JSON, strict) and the CEL rules' refusals."""
    try:
        InferenceModelSpec.model_validate_json(json.dumps(spec), strict=True)
        errors = []
    except ValidationError as error:
        errors = field_errors(error)
    return errors, refusals(spec)


LEAVES = leaves(SPEC_SCHEMA)


def model_leaves(model: type[BaseModel], path: Path = ()) -> set[Path]:
    """Every field of the pydantic model that takes a value, by wire name (lists of models at item 0)."""
    found = set()
    for name, info in model.model_fields.items():
        here = (*path, info.alias or name)
        for arg in (info.annotation, *get_args(info.annotation)):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                found |= model_leaves(arg, here)
                break
            if (
                get_origin(arg) is list
                and isinstance(get_args(arg)[0], type)
                and issubclass(get_args(arg)[0], BaseModel)
            ):
                found |= model_leaves(get_args(arg)[0], (*here, 0))
                break
        else:
            found.add(here)
    return found


def test_every_field_of_the_models_is_enumerated():
    assert {path for path, _ in LEAVES} == model_leaves(InferenceModelSpec)
    assert len(LEAVES) >= 60


def test_the_minimal_spec_is_admitted():
    assert verdicts(MINIMAL) == ([], [])


@pytest.mark.parametrize(("path", "node"), LEAVES, ids=[dotted(path).lstrip(".") for path, _ in LEAVES])
def test_one_field_set_alone_is_admitted_and_its_derived_spec_too(path, node):
    admitted = 0
    for value in values(node):
        spec = with_field(MINIMAL, path, value)
        errors, refused = verdicts(spec)
        required = [r for r in refused if r.rule.get("reason") == "FieldValueRequired" and not is_set(spec, r.field)]
        if required:  # a field the value makes required: given, as the user would
            for refusal in required:
                spec = with_field(spec, refusal.field, values(schema_at(refusal.field))[0])
            errors, refused = verdicts(spec)
        case = f"spec{dotted(path)}={value!r}: pydantic {errors}, CEL {[str(r) for r in refused]}"
        assert bool(errors) == bool(refused), f"pydantic and the CEL rules disagree on {case}"
        if refused:
            # Refused for what the case itself sets (the value is invalid alone), never for a default.
            for refusal in refused:
                read = [refusal.where + field for field in fields_read(refusal.rule)]
                assert all(is_set(spec, field) for field in read), f"a default is refused: {case}"
            continue
        admitted += 1
        derived = InferenceModelSpec.model_validate(spec).model_dump(by_alias=True, exclude_none=True, mode="json")
        assert verdicts(derived) == ([], []), f"the derived spec of {case} breaks a rule"
        again = InferenceModelSpec.model_validate(derived).model_dump(by_alias=True, exclude_none=True, mode="json")
        assert again == derived, f"the derived spec of {case} does not read back unchanged"
    assert admitted, f"no value of spec{dotted(path)} was admitted"
