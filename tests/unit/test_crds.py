"""The generated CRDs: committed copies current, documented, structural; samples and invalid cases agree."""

import re
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError
from tensorkiln_api import API_VERSION, CompileJobSpec, InferenceModelSpec, field_errors
from tensorkiln_local.crdgen import RESOURCES, render_crds

from .cel_admission import refusals

ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = ROOT / "crds"
SAMPLES = sorted((ROOT / "manifests" / "samples").glob("*.yaml"))
INVALID = sorted((ROOT / "tests" / "data" / "invalid").glob("*.yaml"))
SPEC_MODELS = {"InferenceModel": InferenceModelSpec, "CompileJob": CompileJobSpec}
RENDERED = render_crds()
CRDS = {name: yaml.safe_load(text) for name, text in RENDERED.items()}

# Keywords a structural schema must not use (or, for the last two, not with these values).
FORBIDDEN = {"$ref", "$defs", "anyOf", "allOf", "oneOf", "not", "title", "definitions"}


def root_schema(crd: dict) -> dict:
    (version,) = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def schema_nodes(node: dict, path: str = "", via: str = "root"):
    """(path, via, node) for every schema node under `node`; `via` says how it was reached."""
    yield path, via, node
    for name, prop in node.get("properties", {}).items():
        yield from schema_nodes(prop, f"{path}.{name}", "property")
    if isinstance(node.get("items"), dict):
        yield from schema_nodes(node["items"], f"{path}[]", "items")
    if isinstance(node.get("additionalProperties"), dict):
        yield from schema_nodes(node["additionalProperties"], f"{path}{{}}", "values")


def all_nodes():
    for name, crd in CRDS.items():
        for path, via, node in schema_nodes(root_schema(crd)):
            yield f"{name}:{path or '.'}", path, via, node


def resolve(node: dict, path: str) -> dict | None:
    """Follow a simple JSON path (.a.b, list filters allowed) through a schema."""
    for part in re.sub(r"\[\?\(.*?\)\]", "", path).strip(".").split("."):
        while node.get("type") == "array":
            node = node["items"]
        node = node.get("properties", {}).get(part)
        if node is None:
            return None
    return node


def test_committed_crds_are_current():
    committed = {p.name: p.read_text() for p in CRD_DIR.glob("*.yaml")}
    assert set(committed) == set(RENDERED), "crds/ is out of date: run `tensorkiln-local crds`"
    for name, text in RENDERED.items():
        assert committed[name] == text, f"crds/{name} is out of date: run `tensorkiln-local crds`"


def test_every_property_and_object_is_described():
    undocumented = [
        label
        for label, path, via, node in all_nodes()
        if (via in ("root", "property") or node.get("type") == "object")
        and path != ".metadata"  # the apiserver forbids anything but the type here
        and not node.get("description", "").strip()
    ]
    assert not undocumented


def test_schemas_are_structural():
    for label, _, _, node in all_nodes():
        assert not FORBIDDEN & node.keys(), label
        assert node.get("additionalProperties") is not False, label
        assert node.get("uniqueItems") is not True, f"{label}: use x-kubernetes-list-type: set"
        assert not ("properties" in node and "additionalProperties" in node), label
        if "nullable" in node:
            assert "type" in node, label
        untyped = node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
        assert untyped or "type" in node, f"{label} has no type"
        if "exclusiveMinimum" in node:
            assert node["exclusiveMinimum"] is True and "minimum" in node, label


def test_status_is_modelled_with_list_map_conditions():
    for crd in CRDS.values():
        status = root_schema(crd)["properties"]["status"]
        assert not status.get("x-kubernetes-preserve-unknown-fields")
        conditions = status["properties"]["conditions"]
        assert conditions["x-kubernetes-list-type"] == "map"
        assert conditions["x-kubernetes-list-map-keys"] == ["type"]
        condition = conditions["items"]["properties"]
        assert condition["status"]["enum"] == ["True", "False", "Unknown"]
        assert condition["lastTransitionTime"]["format"] == "date-time"
        assert {"reason", "message", "observedGeneration"} <= condition.keys()


def test_names_subresources_and_printer_columns():
    for resource in RESOURCES:
        crd = CRDS[f"{resource.crd_name}.yaml"]
        assert crd["spec"]["scope"] == "Namespaced"
        assert crd["spec"]["names"]["shortNames"] == list(resource.short_names)
        assert crd["spec"]["names"]["categories"] == ["tensorkiln"]
        (version,) = crd["spec"]["versions"]
        assert version["subresources"] == {"status": {}}
        for column in version["additionalPrinterColumns"]:
            if not column["jsonPath"].startswith(".metadata."):
                assert resolve(root_schema(crd), column["jsonPath"]), column


def test_cel_rules_name_an_existing_field():
    rules = 0
    for label, _, _, node in all_nodes():
        for rule in node.get("x-kubernetes-validations", []):
            rules += 1
            if rule.get("optionalOldSelf"):  # the root's rules on metadata.name: checked at creation only
                assert rule["rule"].startswith("oldSelf.hasValue() || "), f"{label}: {rule}"
            assert resolve(node, rule["fieldPath"]), f"{label}: {rule}"
            assert rule["message"].startswith(rule["fieldPath"].lstrip(".")), f"{label}: {rule}"
    assert rules >= 8


def test_int_or_string_and_defaults():
    spec = root_schema(CRDS["inferencemodels.tensorkiln.dev.yaml"])["properties"]["spec"]
    surge = resolve(spec, ".rollout.maxSurge")
    assert surge["x-kubernetes-int-or-string"] is True and surge["default"] == "25%"
    assert resolve(spec, ".shapes.batch.min")["default"] == 1
    assert spec["properties"]["shapes"]["default"] == {"batch": {"min": 1}}
    # Derived from other fields when unset: no schema default, the description says what unset means.
    for derived in (".shapes.batch.opt", ".shapes.batch.max", ".serving.maxBatchSize", ".slo.maxReplicas"):
        assert "default" not in resolve(spec, derived) and "Unset: " in resolve(spec, derived)["description"]
    assert "default" not in spec["properties"]["slo"]  # optional without default: absent
    assert spec["required"] == ["source"]


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_samples_validate(path):
    doc = yaml.safe_load(path.read_text())
    assert doc["apiVersion"] == API_VERSION
    SPEC_MODELS[doc["kind"]].model_validate(doc["spec"])
    if doc["kind"] == "InferenceModel":
        assert refusals(doc["spec"]) == []


def test_there_are_enough_invalid_cases():
    assert len(INVALID) >= 12


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_invalid_manifests_fail_python_validation_at_the_expected_field(path):
    text = path.read_text()
    match = re.match(r"# expect: (.+)\n", text)
    assert match, f"{path.name} must start with '# expect: <substring of the apiserver error>'"
    doc = yaml.safe_load(text)
    assert doc["apiVersion"] == API_VERSION and doc["kind"] == "InferenceModel"
    with pytest.raises(ValidationError) as caught:
        InferenceModelSpec.model_validate(doc["spec"])
    errors = field_errors(caught.value)
    assert any(match.group(1) in e for e in errors), errors
    # Those a CEL rule refuses (not the schema's own constraints): the rule names the same field.
    refused = [str(r) for r in refusals(doc["spec"])]
    assert not refused or any(r.startswith(match.group(1)) for r in refused), refused


def test_the_cel_rules_refuse_the_invalid_manifests_that_break_them():
    refused = [path.name for path in INVALID if refusals(yaml.safe_load(path.read_text())["spec"])]
    assert len(refused) >= 10, refused


def _bounds(schema, path=""):
    if isinstance(schema, dict):
        for key in ("maximum", "minimum"):
            if key in schema:
                yield f"{path}.{key}", schema[key]
        for key, value in schema.items():
            yield from _bounds(value, f"{path}.{key}")
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            yield from _bounds(value, f"{path}[{i}]")


def test_integer_bounds_survive_the_api_servers_float64():
    """The API server reads a schema's bounds as float64 and refuses a CRD whose integer bound is
    not exact there (2**63 - 1 was): every bound within 2**53."""
    too_big = [(name, where, value) for name, crd in CRDS.items() for where, value in _bounds(crd)
               if abs(value) > 2**53]  # fmt: skip
    assert too_big == []
