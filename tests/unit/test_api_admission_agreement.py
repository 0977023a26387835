"""The pydantic models and the API server agree on what is a valid InferenceModel (regressions of
the fault suite's admission fuzz, e2e/faults/test_fuzz_admission.py, which compares the two on
hundreds of generated manifests against the real API server).

Disagreements found there: explicit nulls (fixed: tests/unit/test_api_null_pruning.py), and URIs
holding whitespace outside Go RE2's \\s ([\\t\\n\\f\\r ]: not the vertical tab, U+0085, U+00A0,
U+2000..U+200A, U+3000, ...), which MODEL_URI_PATTERN's \\S admitted at the API server while
pydantic's Rust regex (Unicode \\s) refused them. Fixed: the API's patterns spell out their classes
([^\\x00-\\x20\\x7f-\\x9f] for a URI character), which both engines, and Python's re, read alike.
"""

import json
import re

import pytest
from pydantic import ValidationError
from tensorkiln_api import InferenceModelSpec, field_errors
from tensorkiln_api.common import MODEL_URI_PATTERN
from tensorkiln_local.crdgen import RESOURCES, build_crd


def verdict(spec: dict) -> tuple[bool, list[str]]:
    """pydantic on the manifest as it travels (JSON, strictly typed like the structural schema)."""
    try:
        InferenceModelSpec.model_validate_json(json.dumps(spec), strict=True)
    except ValidationError as error:
        return False, field_errors(error)
    return True, []


# Escapes that RE2 reads as ASCII classes and Rust regex as Unicode ones (\s, \w, \d, \b and their
# negations), and Unicode classes (\p, \P), which Python's re cannot read.
ENGINE_DEPENDENT = re.compile(r"(?<!\\)(\\\\)*\\[sSwWdDbBpP]")


def patterns(node) -> list[str]:
    """Every regex of a CRD: schema patterns, and the literals CEL rules hand to matches()."""
    found = []
    if isinstance(node, dict):
        if isinstance(node.get("pattern"), str):
            found.append(node["pattern"])
        for rule in node.get("x-kubernetes-validations", []):
            # In a CEL string literal a backslash is doubled: undo it to get the regex.
            found += [m.replace("\\\\", "\\") for m in re.findall(r"matches\('((?:[^'\\]|\\.)*)'\)", rule["rule"])]
        for value in node.values():
            found += patterns(value)
    elif isinstance(node, list):
        for value in node:
            found += patterns(value)
    return found


def test_no_pattern_uses_a_class_the_regex_engines_read_differently():
    found = [p for r in RESOURCES for p in patterns(build_crd(r))]
    assert len(found) >= 10
    assert [p for p in found if ENGINE_DEPENDENT.search(p)] == []


@pytest.mark.parametrize(
    "uri",
    [
        "file:///models/m.onnx",
        "file:///models/m odel.onnx",
        "file:///模型.onnx",
        "file:///models/m\x0bodel.onnx",  # vertical tab: RE2 \S, not Rust \S
        "file:///models/m\x85odel.onnx",  # NEL (a C1 control): Rust \s only
        "file:///models/m\xa0odel.onnx",  # no-break space: RE2 \S, not Rust \S
        "file:///m\u2003.onnx",  # em space: likewise
        "file:///models/m\x7fodel.onnx",
    ],
)
def test_uris_get_the_verdict_the_api_servers_regex_engine_gives(uri):
    # Python's re reads MODEL_URI_PATTERN as RE2 does: it spells out every class.
    assert verdict({"source": {"uri": uri}})[0] == bool(re.fullmatch(MODEL_URI_PATTERN, uri))


@pytest.mark.parametrize("uri", ["file:///models/m\xa0odel.onnx", "file:///m\u2003.onnx"])
def test_uris_with_unicode_spaces_are_admitted(uri):
    # A file name may hold them; a control character, or an ASCII space, is refused.
    assert verdict({"source": {"uri": uri}}) == (True, [])
    assert not verdict({"source": {"uri": uri.replace("\xa0", "\x0b").replace("\u2003", "\x9f")}})[0]
