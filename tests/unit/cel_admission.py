"""What the API server's CEL rules say of an InferenceModel spec, offline: the CRD's structural defaulting,
then every x-kubernetes-validations rule under spec, evaluated with cel-python (its regexes are RE2's, as
the API server's are), with Kubernetes' quantity library.

Only the rules: the schema's own constraints (types, bounds, patterns) are checked by pydantic here, and
by the real API server in tests/integration/test_admission.py.
"""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import celpy
from celpy import celtypes
from tensorkiln_api import INFERENCE_MODEL
from tensorkiln_api.common import quantity_value
from tensorkiln_local.crdgen import build_crd

(_VERSION,) = build_crd(INFERENCE_MODEL)["spec"]["versions"]
SPEC_SCHEMA = _VERSION["schema"]["openAPIV3Schema"]["properties"]["spec"]
Path = tuple[str | int, ...]  # keys and list indices from spec down


@dataclass(frozen=True)
class Refusal:
    """One rule that does not hold: declared on the node at `where`, naming the field `field`."""

    where: Path
    rule: dict
    error: str = ""  # the evaluation error, when the rule could not be evaluated

    @property
    def field(self) -> Path:
        return self.where + tuple(self.rule["fieldPath"].strip(".").split("."))

    def __str__(self) -> str:
        return f"spec{dotted(self.field)}: {self.rule['message']}" + (f" ({self.error})" if self.error else "")


def dotted(path: Path) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def defaulted(value: Any, schema: dict) -> Any:
    """`value` with the schema's defaults applied, as the API server does (apiextensions' structural
    defaulting: an absent property takes its default, then defaulting goes on inside every value)."""
    value = copy.deepcopy(value)
    _default(value, schema)
    return value


def _default(value: Any, schema: dict) -> None:
    if isinstance(value, dict):
        for name, prop in schema.get("properties", {}).items():
            if name not in value and "default" in prop:
                value[name] = copy.deepcopy(prop["default"])
        for name, child in value.items():
            if name in schema.get("properties", {}):
                _default(child, schema["properties"][name])
            elif isinstance(schema.get("additionalProperties"), dict):
                _default(child, schema["additionalProperties"])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _default(item, schema["items"])


def refusals(spec: dict) -> list[Refusal]:
    """Every CEL rule of the InferenceModel CRD that `spec`, defaulted, breaks."""
    return _refusals(defaulted(spec, SPEC_SCHEMA), SPEC_SCHEMA, ())


def _refusals(value: Any, schema: dict, where: Path) -> list[Refusal]:
    found = []
    rules = schema.get("x-kubernetes-validations", [])
    activation = {"self": celpy.json_to_cel(value)} if rules else {}
    for rule in rules:
        try:
            holds = bool(_program(rule["rule"]).evaluate(activation))
        except celpy.CELEvalError as error:
            found.append(Refusal(where, rule, str(error)))
            continue
        if not holds:
            found.append(Refusal(where, rule))
    if isinstance(value, dict):
        for name, child in value.items():
            child_schema = schema.get("properties", {}).get(name, schema.get("additionalProperties"))
            if isinstance(child_schema, dict):
                found += _refusals(child, child_schema, (*where, name))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            found += _refusals(item, schema["items"], (*where, i))
    return found


def fields_read(rule: dict) -> list[Path]:
    """The fields a rule reads, relative to the node that declares it: self.a.b, less a method called
    on it (self.a.all(...), self.key.matches(...))."""
    found = []
    for chain, call in re.findall(r"\bself((?:\.[A-Za-z_]\w*)+)(\(?)", rule["rule"]):
        parts = chain.strip(".").split(".")
        found.append(tuple(parts[:-1] if call else parts))
    return found


# Kubernetes' quantity library (k8s.io/apiserver/pkg/cel/library), on the project's own parser.
class _Quantity:
    def __init__(self, value: Decimal):
        self.value = value


def _quantity(text: str) -> _Quantity | celpy.CELEvalError:
    try:
        return _Quantity(quantity_value(str(text)))
    except (AttributeError, ArithmeticError):  # no quantity: an evaluation error, as the API server's
        return celpy.CELEvalError(f"invalid quantity {text!r}")


def _compare(a: _Quantity, b: _Quantity) -> int:
    return (a.value > b.value) - (a.value < b.value)


_QUANTITY_LIBRARY = {
    "quantity": _quantity,
    "isInteger": lambda q: celtypes.BoolType(q.value == q.value.to_integral_value() and abs(q.value) < 2**63),
    "compareTo": lambda a, b: celtypes.IntType(_compare(a, b)),
    "isGreaterThan": lambda a, b: celtypes.BoolType(_compare(a, b) > 0),
}
_ENVIRONMENT = celpy.Environment()


@functools.cache
def _program(cel: str) -> celpy.Runner:
    return _ENVIRONMENT.program(_ENVIRONMENT.compile(cel), functions=_QUANTITY_LIBRARY)
