"""docs/reference/api.md is the API reference rendered from the pydantic models: current, complete."""

from tensorkiln_local import apireference
from tensorkiln_local.cluster import paths
from tensorkiln_local.crdgen import RESOURCES, build_crd


def test_the_committed_api_reference_is_current():
    assert paths.API_REFERENCE.read_text() == apireference.render(), "run: tensorkiln-local docs"


def _leaf_paths(node: dict, path: str):
    for name, child in node.get("properties", {}).items():
        yield f"{path}.{name}"
        yield from _leaf_paths(child, f"{path}.{name}")
        items = child.get("items")
        if isinstance(items, dict):
            yield from _leaf_paths(items, f"{path}.{name}[]")


def test_every_field_of_both_kinds_has_a_row():
    text = apireference.render()
    for resource in RESOURCES:
        (version,) = build_crd(resource)["spec"]["versions"]
        schema = version["schema"]["openAPIV3Schema"]["properties"]
        for part in ("spec", "status"):
            for field in _leaf_paths(schema[part], part):
                assert f"| `{field}` |" in text, field
