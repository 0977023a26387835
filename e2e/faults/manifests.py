"""Generated InferenceModel manifests for the admission fuzz (hypothesis).

Valid specs are drawn from the CRD's spec schema, which `tensorkiln_local.crdgen` derives from the
pydantic models (types, enums, bounds, lengths, patterns, list-set and list-map uniqueness), then
repaired for the cross-field rules the models declare as `Rule`s (min <= opt <= max, maxBatchSize
<= shapes.batch.max, ...). Invalid ones are valid ones with one mutation that breaks one field:
a wrong type, a number out of range, min > max, a bad percentile or enum, a bad URI, an unknown
or missing field, a pattern, a duplicate, a cross-field rule. Each invalid manifest records the
field path an error must name.

Nothing here talks to a cluster.
"""

from __future__ import annotations

import copy
import json
import random
import re
from dataclasses import dataclass
from typing import Any

import hypothesis
from hypothesis import strategies as st
from pydantic import ValidationError
from tensorkiln_api import InferenceModelSpec, field_errors
from tensorkiln_api.common import MODEL_URI_PATTERN, prefix_at_most, quantity_value
from tensorkiln_local.crdgen import openapi_schema

SPEC_SCHEMA = openapi_schema(InferenceModelSpec)
LIST_CAP = 3  # items drawn per list beyond its minimum: small objects, many of them

# Printable ASCII without whitespace: what both RE2 (apiserver) and Rust regex (pydantic) call \S.
_NONSPACE_ASCII = st.characters(min_codepoint=0x21, max_codepoint=0x7E)
# With a few characters beyond ASCII, Unicode spaces among them: URI_CHAR admits them in both engines.
_PATH_CHARS = st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~%+=:@,\u00a0\u2003模")
_LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,14}[a-z0-9])?", fullmatch=True)
_DOT_DOT = re.compile(r"(?i)(/|%2f)(\.|%2e)(\.|%2e)(/|%2f|$)")


@dataclass
class Case:
    """One generated manifest: valid, or invalid in `field` because of `mutation`; `valid` None:
    no expectation (an explicit null), only that the API server and pydantic agree."""

    spec: dict
    valid: bool | None
    mutation: str = ""
    field: str = ""  # dotted path (spec.shapes.batch.min) an error message must name
    detail: str = ""

    def manifest(self, name: str, namespace: str) -> dict:
        return {
            "apiVersion": "tensorkiln.dev/v1alpha1",
            "kind": "InferenceModel",
            "metadata": {"name": name, "namespace": namespace},
            "spec": copy.deepcopy(self.spec),
        }


def pydantic_verdict(spec: dict) -> tuple[bool, list[str]]:
    """The pydantic model's verdict on the manifest as it travels (JSON, strictly typed, as the
    apiserver's structural schema types it), and its field errors."""
    try:
        InferenceModelSpec.model_validate_json(json.dumps(spec), strict=True)
    except ValidationError as error:
        return False, field_errors(error)
    return True, []


def lax_verdict(spec: dict) -> bool:
    """What the operator's normalised_spec does with an object (lax: "5" for an int is 5)."""
    try:
        InferenceModelSpec.model_validate(copy.deepcopy(spec))
    except ValidationError:
        return False
    return True


# --- valid values, from the schema ------------------------------------------------------------


def _uri(scheme: str | None = None) -> st.SearchStrategy[str]:
    """A URI MODEL_URI_PATTERN accepts, without a '..' segment."""
    segment = st.text(_PATH_CHARS, min_size=1, max_size=12).filter(lambda s: s not in (".", ".."))
    path = st.lists(segment, min_size=1, max_size=4).map("/".join)
    bucket = st.from_regex(r"[a-z0-9][a-z0-9.-]{1,20}[a-z0-9]", fullmatch=True)
    host = st.from_regex(r"[A-Za-z0-9.-]{1,20}", fullmatch=True)
    port = st.one_of(st.just(""), st.integers(1, 65535).map(lambda p: f":{p}"))
    by_scheme = {
        "file": path.map(lambda p: f"file:///{p}"),
        "s3": st.tuples(bucket, path).map(lambda t: f"s3://{t[0]}/{t[1]}"),
        **{
            scheme: st.tuples(host, port, st.one_of(st.just(""), path)).map(
                lambda t, scheme=scheme: f"{scheme}://{t[0]}{t[1]}/{t[2]}"
            )
            for scheme in ("http", "https")
        },
        "pvc": st.tuples(_LABEL, path).map(lambda t: f"pvc://{t[0]}/{t[1]}"),
    }
    chosen = st.one_of(*by_scheme.values()) if scheme is None else by_scheme[scheme]
    return chosen.filter(lambda u: re.fullmatch(MODEL_URI_PATTERN, u) and not _DOT_DOT.search(u))


def _integer(node: dict) -> st.SearchStrategy[int]:
    low, high = node.get("minimum"), node.get("maximum")
    if node.get("exclusiveMinimum") and low is not None:
        low += 1
    if node.get("exclusiveMaximum") and high is not None:
        high -= 1
    near = st.integers(low if low is not None else -5, high if high is not None else (low or 0) + 40)
    edges = [v for v in (low, high) if v is not None]
    if high is None:  # unbounded above: the limits of what consumers store it in (int32, uint32, int64)
        edges += [2**31 - 1, 2**31, 2**32, 2**53, 2**63 - 1]
    return st.one_of(near, near, st.sampled_from(edges) if edges else near)


def _number(node: dict) -> st.SearchStrategy[float]:
    low, high = node.get("minimum"), node.get("maximum")
    return st.floats(
        min_value=low,
        max_value=high,
        exclude_min=bool(node.get("exclusiveMinimum")) and low is not None,
        exclude_max=bool(node.get("exclusiveMaximum")) and high is not None,
        allow_nan=False,
        allow_infinity=False,
    )


_QUANTITY = st.one_of(
    st.integers(0, 10**6),
    st.tuples(st.integers(0, 4096), st.sampled_from(["", "m", "k", "M", "G", "Ki", "Mi", "Gi"])).map(
        lambda t: f"{t[0]}{t[1]}"
    ),
    st.from_regex(r"[0-9]{1,4}(\.[0-9]{1,3})?(Mi|Gi|m)?", fullmatch=True),
)
_SURGE = st.one_of(st.integers(1, 100), st.integers(1, 100).map(lambda n: f"{n}%"))  # 0 with maxUnavailable 0
_RESOURCE_NAME = st.sampled_from(["cpu", "memory", "ephemeral-storage", "nvidia.com/gpu", "example.com/foo"])


def valid(node: dict, path: str = "spec") -> st.SearchStrategy[Any]:
    """A value `node` (a structural schema) accepts, field by field."""
    if "enum" in node:
        return st.sampled_from(node["enum"])
    if node.get("x-kubernetes-int-or-string"):
        return _QUANTITY if "pattern" in node else _SURGE
    kind = node.get("type")
    if kind == "object":
        if "additionalProperties" in node:
            values = valid(node["additionalProperties"], f"{path}.*")
            keys = _RESOURCE_NAME if path.endswith((".requests", ".limits")) else _label_key()
            return st.dictionaries(keys, values, min_size=node.get("minProperties", 0), max_size=3)
        required = set(node.get("required", []))
        props = {k: valid(v, f"{path}.{k}") for k, v in node.get("properties", {}).items()}
        some = st.fixed_dictionaries(
            {k: v for k, v in props.items() if k in required},
            optional={k: v for k, v in props.items() if k not in required},
        )
        return st.one_of(some, st.fixed_dictionaries(props))  # every field set, as often as some
    if kind == "array":
        items = valid(node["items"], f"{path}[]")
        low = node.get("minItems", 0)
        high = min(node.get("maxItems", low + LIST_CAP), low + LIST_CAP)
        if node.get("x-kubernetes-list-type") == "set":
            return st.lists(items, min_size=low, max_size=high, unique=True)
        if node.get("x-kubernetes-list-type") == "map":
            keys = node["x-kubernetes-list-map-keys"]
            return st.lists(items, min_size=low, max_size=high, unique_by=lambda i: tuple(i.get(k) for k in keys))
        return st.lists(items, min_size=low, max_size=high)
    if kind == "string":
        return _string(node, path)
    if kind == "integer":
        return _integer(node)
    if kind == "number":
        return _number(node)
    if kind == "boolean":
        return st.booleans()
    raise ValueError(f"{path}: no strategy for {node}")


def _label_key() -> st.SearchStrategy[str]:
    prefix = st.one_of(st.just(""), st.tuples(_LABEL, _LABEL).map(lambda t: f"{t[0]}.{t[1]}/"))
    return st.tuples(prefix, _LABEL).map("".join)


def _string(node: dict, path: str) -> st.SearchStrategy[str]:
    low, high = node.get("minLength", 0), node.get("maxLength", 64)
    pattern = node.get("pattern")
    if pattern == f"^{MODEL_URI_PATTERN.strip('^$')}$" or pattern == MODEL_URI_PATTERN:
        return _uri()
    if pattern:
        body = st.from_regex(pattern, fullmatch=True, alphabet=_NONSPACE_ASCII)
        return body.filter(lambda s: low <= len(s) <= high)
    # Free text: mostly printable, some non-ASCII letters and inner spaces.
    alphabet = st.one_of(
        st.characters(min_codepoint=0x20, max_codepoint=0x7E), st.characters(min_codepoint=0xC0, max_codepoint=0x17F)
    )
    return st.text(alphabet, min_size=max(low, 1) if low else 0, max_size=min(high, 24)).filter(
        lambda s: low <= len(s) <= high
    )


# --- cross-field rules (the models' Rules), with the schema's defaults ----------------------------


def repair(spec: dict) -> dict:
    """Make a schema-valid spec satisfy every cross-field Rule, keeping its values where it can. The
    rules compare only fields the spec sets: what it leaves unset is derived to fit them."""
    spec = copy.deepcopy(spec)
    shapes = spec.get("shapes") or {}
    batch = shapes.get("batch") or {}
    present = [key for key in ("min", "opt", "max") if key in batch]
    for key, size in zip(present, sorted(batch[key] for key in present)):
        batch[key] = size
    for dim in shapes.get("dynamicDims", []):
        dim["min"], dim["opt"], dim["max"] = sorted((dim["min"], dim["opt"], dim["max"]))
    low, high = batch.get("min", 1), batch.get("max")

    serving = spec.get("serving") or {}
    if high is not None and serving.get("maxBatchSize", 0) > high:
        serving["maxBatchSize"] = high
    batching = serving.get("dynamicBatching") or {}
    limit = serving.get("maxBatchSize", high)  # maxBatchSize, unset, follows shapes.batch.max
    if batching.get("enabled", True) and "preferredBatchSizes" in batching and limit is not None:
        batching["preferredBatchSizes"] = [s for s in batching["preferredBatchSizes"] if s <= limit]

    if "sequenceBatching" in serving and batching.get("enabled"):
        batching["enabled"] = False  # one batcher per model

    compile_options = spec.get("compile") or {}
    objective = compile_options.get("objective") or {}
    if serving.get("maxBatchSize") == 0:
        objective.pop("batchSize", None)  # unbatched: derived (1), as shapes.batch may exclude 1
    elif "batchSize" in objective:
        objective["batchSize"] = max(objective["batchSize"], low)
        if high is not None:
            objective["batchSize"] = min(objective["batchSize"], high)
    if objective.get("metric") == "Throughput":
        objective.setdefault("latencyBudgetMilliseconds", 50.0)

    if "calibration" in compile_options:
        compile_options.pop("syntheticInputs", None)  # the dataset gives every input
    for entry in (compile_options.get("syntheticInputs") or {}).values():
        if "value" in entry or not ("min" in entry and "max" in entry):  # a constant, or a whole range
            entry.pop("min", None), entry.pop("max", None)
        else:
            entry["min"], entry["max"] = sorted((entry["min"], entry["max"]))

    hardware = spec.get("hardware")
    if hardware and hardware.get("mode") == "Explicit" and not hardware.get("pools"):
        hardware["pools"] = [{"name": "pool", "nodeSelector": {"example.com/pool": "a"}}]
    for pool in (hardware or {}).get("pools", []):
        for toleration in pool.get("tolerations", []):
            _repair_toleration(toleration)
    for resources in (serving.get("resources"), compile_options.get("resources")):
        if resources:
            _repair_resources(resources)

    slo = spec.get("slo")
    if slo and slo.get("placement") == "LeastCost":
        slo["mode"] = "Operator"  # one scaler places replicas across classes
    if slo and "maxReplicas" in slo and slo.get("minReplicas", 1) > slo["maxReplicas"]:
        slo["minReplicas"], slo["maxReplicas"] = slo["maxReplicas"], max(slo.get("minReplicas", 1), 1)
    return spec


def _repair_toleration(toleration: dict) -> None:
    """What a Pod admits: a key (qualified, prefix <= 253) unless Exists, no value with Exists,
    tolerationSeconds only with NoExecute."""
    if "key" in toleration and not re.match(prefix_at_most(253), toleration["key"]):
        toleration["key"] = "example.com/taint"
    if "key" not in toleration:
        toleration["operator"] = "Exists"
    if toleration.get("operator") == "Exists":
        toleration.pop("value", None)
    if "tolerationSeconds" in toleration:
        toleration["effect"] = "NoExecute"


def _repair_resources(resources: dict) -> None:
    """What a Pod admits: extended resources (example.com/foo) whole, requested only with an equal
    limit; other requests at most their limit."""
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    for amounts in (requests, limits):
        for name, amount in amounts.items():
            if "/" in name:
                amounts[name] = int(quantity_value(amount))
    for name, amount in requests.items():
        if "/" in name:
            resources.setdefault("limits", limits)[name] = amount
        elif name in limits and quantity_value(amount) > quantity_value(limits[name]):
            requests[name] = limits[name]


def valid_specs() -> st.SearchStrategy[dict]:
    return valid(SPEC_SCHEMA).map(repair)


# --- mutations: one broken field each ---------------------------------------------------------


def _schema_at(path: list) -> dict | None:
    node = SPEC_SCHEMA
    for part in path:
        if isinstance(part, int):
            node = node.get("items")
        elif "properties" in node and part in node["properties"]:
            node = node["properties"][part]
        elif "additionalProperties" in node:
            node = node["additionalProperties"]
        else:
            return None
        if node is None:
            return None
    return node


def _dotted(path: list) -> str:
    text = "spec"
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def _paths(value: Any, prefix: list) -> list[list]:
    """Every path to a value present in the spec."""
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            found += _paths(v, [*prefix, k])
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += _paths(v, [*prefix, i])
    return found


def _get(spec: dict, path: list) -> Any:
    for part in path:
        spec = spec[part]
    return spec


def _set(spec: dict, path: list, value: Any) -> None:
    _get(spec, path[:-1])[path[-1]] = value


def _wrong_type_values(node: dict) -> list:
    if node.get("x-kubernetes-int-or-string"):
        return [True, 1.5, ["1"], {"a": 1}]
    kind = node.get("type")
    return {
        "object": ["text", 7, True, ["a"]],
        "array": ["text", 7, True, {"a": 1}],
        "string": [7, 2.5, True, ["a"], {"a": "b"}],
        "integer": ["7", 2.5, True, ["1"], {"a": 1}],
        "number": ["7.5", True, ["1"], {"a": 1}],
        "boolean": ["yes", "true", 1, ["x"]],
    }.get(kind, [])


BAD_URIS = [
    "model.onnx",
    "/abs/model.onnx",
    "file://relative/model.onnx",
    "file:///",
    "ftp://models.example/m.onnx",
    "s3://UPPER/m.onnx",
    "s3://b/m.onnx",
    "s3://bucket",
    "https://models.example",
    "https://host with space/m.onnx",
    "pvc://Claim/m.onnx",
    "pvc://claim/",
    "file:///models/m odel.onnx",
    "file:///models/../etc/passwd",
    "pvc://claim/a/%2e%2e/b",
    "file:///models/m.onnx\n",
    "",
    "file:///" + "a" * 2048,
    # Control characters: the vertical tab (outside RE2's \s) and NEL (inside Rust's only), C1, DEL.
    "file:///models/m\u000bodel.onnx",
    "file:///models/m\u0085odel.onnx",
    "file:///m\u009f.onnx",
    "pvc://claim/m\u007f.onnx",
]


def _mutations(spec: dict) -> list[tuple[str, list, Any]]:
    """(mutation, path, how) triples applicable to this spec; `how` is used by `mutate`."""
    options: list[tuple[str, list, Any]] = []
    for path in _paths(spec, []):
        node = _schema_at(path)
        if node is None:
            continue
        for bad in _wrong_type_values(node):
            options.append(("wrong-type", path, bad))
        kind = node.get("type")
        if kind in ("integer", "number"):
            if "minimum" in node:
                below = node["minimum"] - (1 if kind == "integer" else 0.5)
                options.append(("out-of-range", path, node["minimum"] if node.get("exclusiveMinimum") else below))
            if "maximum" in node:
                options.append(("out-of-range", path, node["maximum"] + (1 if kind == "integer" else 0.5)))
        if kind == "string" and "enum" not in node and "maxLength" in node:
            options.append(("too-long", path, "x" * (node["maxLength"] + 1)))
        if kind == "string" and node.get("minLength", 0) >= 1:
            options.append(("too-short", path, ""))
        if "enum" in node:
            for bad in ("", "unknown", str(node["enum"][0]).lower() + "x", str(node["enum"][0]).upper() + "1"):
                if bad not in node["enum"]:
                    options.append(("bad-enum", path, bad))
        if kind == "string" and node.get("pattern") and node["pattern"] != MODEL_URI_PATTERN:
            for bad in ("UPPER CASE", "-x-", "a/b", "1.2.3"):
                if not re.fullmatch(node["pattern"].strip("^$"), bad):
                    options.append(("pattern", path, bad))
        if kind == "object" and "properties" in node:
            options.append(("unknown-field", [*path, "bogusField"], "x"))
            for key in node.get("required", []):
                options.append(("missing-required", [*path, key], None))
        if kind == "array" and node.get("x-kubernetes-list-type") in ("set", "map") and _get(spec, path):
            options.append(("duplicate", path, None))
        if node.get("x-kubernetes-int-or-string") and "pattern" in node:
            for bad in ("1.2.3", "abc", "1Kb", "--1", "1e"):
                options.append(("pattern", path, bad))
    for uri_path in (["source", "uri"], ["compile", "calibration", "datasetUri"]):
        if _present(spec, uri_path):
            for bad in BAD_URIS:
                options.append(("bad-uri", uri_path, bad))
    options.append(("unknown-field", ["bogusField"], "x"))
    options.append(("missing-required", ["source"], None))
    for path in _paths(spec, []):
        if not isinstance(path[-1], int) and _schema_at(path) is not None:
            options.append(("null", path, None))  # YAML `field:` with nothing after it
    if _present(spec, ["slo"]):
        for bad in ("p100", "P95", "95", "p95 ", "p9", "percentile"):
            options.append(("bad-percentile", ["slo", "percentile"], bad))
        options.append(("min-gt-max", ["slo", "minReplicas"], "slo"))
    options.append(("min-gt-max", ["shapes", "batch", "min"], "batch-min"))
    options.append(("min-gt-max", ["shapes", "batch", "opt"], "batch-max"))
    for i, _ in enumerate(spec.get("shapes", {}).get("dynamicDims", [])):
        options.append(("min-gt-max", ["shapes", "dynamicDims", i, "min"], "dim"))
    options += [
        ("cel", ["serving", "maxBatchSize"], "max-batch-over-profile"),
        ("cel", ["compile", "objective", "batchSize"], "objective-outside-profile"),
        ("cel", ["compile", "objective", "latencyBudgetMilliseconds"], "throughput-without-budget"),
        ("cel", ["hardware", "pools"], "explicit-without-pools"),
        ("cel", ["rollout", "maxSurge"], "bad-surge"),
        ("cel", ["rollout", "maxSurge"], "zero-surge"),
        ("cel", ["serving", "resources", "limits"], "extended-fraction"),
        ("cel", ["serving", "resources", "limits"], "extended-request-without-limit"),
        ("cel", ["serving", "resources", "requests"], "extended-request-not-limit"),
        ("cel", ["serving", "resources", "requests"], "request-over-limit"),
        ("cel", ["compile", "syntheticInputs"], "synthetic-with-calibration"),
        ("cel", ["hardware", "pools", 0, "tolerations", 0, "value"], "exists-with-value"),
        ("cel", ["hardware", "pools", 0, "tolerations", 0, "effect"], "seconds-without-no-execute"),
        ("cel", ["hardware", "pools", 0, "tolerations", 0, "key"], "equal-without-key"),
        ("cel", ["serving", "dynamicBatching", "preferredBatchSizes"], "preferred-over-max"),
    ]
    return options


def _present(spec: dict, path: list) -> bool:
    try:
        _get(spec, path)
    except (KeyError, IndexError, TypeError):
        return False
    return True


def mutate(spec: dict, mutation: str, path: list, how: Any) -> Case:
    """`spec` (valid) broken by one mutation; returns the invalid Case, naming the field."""
    spec = copy.deepcopy(spec)
    field_path = path
    if mutation in ("wrong-type", "out-of-range", "too-long", "too-short", "bad-enum", "pattern", "bad-percentile"):
        _ensure_parent(spec, path)
        _set(spec, path, how)
    elif mutation == "bad-uri":
        _set(spec, path, how)
    elif mutation == "unknown-field":
        _get(spec, path[:-1])[path[-1]] = how
    elif mutation == "missing-required":
        del _get(spec, path[:-1])[path[-1]]
    elif mutation == "duplicate":
        items = _get(spec, path)
        items.append(copy.deepcopy(items[0]))
    elif mutation == "min-gt-max":
        field_path = _min_gt_max(spec, path, how)
    elif mutation == "cel":
        field_path = _break_rule(spec, how)
    elif mutation == "null":
        _set(spec, path, None)
        # A null defaulted field takes its default, which a cross-field rule anywhere in the spec may
        # refuse (dynamicBatching.enabled back to true, with preferred sizes above maxBatchSize): that
        # error names its own field.
        defaulted = "default" in (_schema_at(path) or {})
        return Case(spec, None, mutation, "spec" if defaulted else _dotted(path), detail="null")
    else:
        raise ValueError(mutation)
    return Case(spec, False, mutation, _dotted(field_path), detail=repr(how)[:80])


def _ensure_parent(spec: dict, path: list) -> None:
    node = spec
    for part in path[:-1]:
        node = node.setdefault(part, {}) if isinstance(node, dict) else node[part]


def _min_gt_max(spec: dict, path: list, how: str) -> list:
    if how == "slo":
        slo = spec["slo"]
        slo["maxReplicas"] = max(slo.get("maxReplicas", 10), 1)
        slo["minReplicas"] = slo["maxReplicas"] + 1
        return ["slo", "minReplicas"]
    if how in ("batch-min", "batch-max"):
        batch = _batch_sizes_set(spec)
        if how == "batch-min":
            batch["min"] = batch["opt"] + 1
            return ["shapes", "batch", "min"]
        if batch["opt"] == 1:
            batch["opt"] = batch["min"] = 2
        batch["max"] = batch["opt"] - 1
        batch["min"] = min(batch["min"], batch["max"])  # only opt > max is broken, so the error names opt
        return ["shapes", "batch", "opt"]
    dim = _get(spec, path[:-1])
    dim["min"] = dim["opt"] + 1
    return path


def _batch_sizes_set(spec: dict) -> dict:
    """spec.shapes.batch with the sizes the (valid) spec leaves unset set as the model derives them
    (api.common.derive_unset_batch_sizes): a constant could break a second rule (shapes.batch.max below
    serving.maxBatchSize, a set min above a default opt), and the error would name that rule's field."""
    derived = InferenceModelSpec.model_validate_json(json.dumps(spec), strict=True).shapes.batch
    batch = spec.setdefault("shapes", {}).setdefault("batch", {})
    for key in ("min", "opt", "max"):
        batch.setdefault(key, getattr(derived, key))
    return batch


def _break_rule(spec: dict, rule: str) -> list:
    batch = _batch_sizes_set(spec)
    if rule == "max-batch-over-profile":
        if batch["max"] >= 4096:
            batch["max"] = batch["opt"] = 64
            batch["min"] = min(batch["min"], 64)
        serving = spec.setdefault("serving", {})
        serving["maxBatchSize"] = batch["max"] + 1
        serving["dynamicBatching"] = {"enabled": False}
        spec.setdefault("compile", {}).setdefault("objective", {})["batchSize"] = batch["min"]
        return ["serving", "maxBatchSize"]
    if rule == "objective-outside-profile":
        spec.setdefault("compile", {}).setdefault("objective", {})["batchSize"] = batch["max"] + 1
        return ["compile", "objective", "batchSize"]
    if rule == "throughput-without-budget":
        objective = spec.setdefault("compile", {}).setdefault("objective", {})
        objective["metric"] = "Throughput"
        objective.pop("latencyBudgetMilliseconds", None)
        return ["compile", "objective", "latencyBudgetMilliseconds"]
    if rule == "explicit-without-pools":
        spec["hardware"] = {"mode": "Explicit"}
        return ["hardware", "pools"]
    if rule == "bad-surge":
        spec["rollout"] = {"maxSurge": "-1"}
        return ["rollout", "maxSurge"]
    if rule == "zero-surge":
        spec["rollout"] = {"maxSurge": 0}
        return ["rollout", "maxSurge"]
    if rule in ("extended-fraction", "extended-request-without-limit", "extended-request-not-limit"):
        spec.setdefault("serving", {})["resources"] = {
            "extended-fraction": {"limits": {"example.com/foo": "1500m"}},
            "extended-request-without-limit": {"requests": {"example.com/foo": 1}},
            "extended-request-not-limit": {"requests": {"example.com/foo": 1}, "limits": {"example.com/foo": 2}},
        }[rule]
        return ["serving", "resources", "requests" if rule == "extended-request-not-limit" else "limits"]
    if rule in ("exists-with-value", "seconds-without-no-execute", "equal-without-key"):
        toleration, field = {
            "exists-with-value": ({"key": "k", "operator": "Exists", "value": "v"}, "value"),
            "seconds-without-no-execute": ({"key": "k", "effect": "NoSchedule", "tolerationSeconds": 60}, "effect"),
            "equal-without-key": ({"operator": "Equal", "value": "v"}, "key"),
        }[rule]
        pool = {"name": "pool", "nodeSelector": {"example.com/pool": "a"}, "tolerations": [toleration]}
        spec["hardware"] = {"mode": "Explicit", "pools": [pool]}
        return ["hardware", "pools", 0, "tolerations", 0, field]
    if rule == "request-over-limit":
        spec.setdefault("serving", {})["resources"] = {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}
        return ["serving", "resources", "requests"]
    if rule == "preferred-over-max":
        serving = spec.setdefault("serving", {})
        max_batch = min(serving.get("maxBatchSize", batch["max"]), batch["max"])
        serving["maxBatchSize"] = max_batch
        serving["dynamicBatching"] = {"enabled": True, "preferredBatchSizes": [max_batch + 1]}
        return ["serving", "dynamicBatching", "preferredBatchSizes"]
    if rule == "synthetic-with-calibration":
        compile_options = spec.setdefault("compile", {})
        compile_options["calibration"] = {"datasetUri": "https://example.com/calibration.npz"}
        compile_options["syntheticInputs"] = {"sr": {"value": 16000}}
        return ["compile", "syntheticInputs"]
    raise ValueError(rule)


KINDS = (
    "wrong-type", "out-of-range", "min-gt-max", "bad-percentile", "bad-uri", "bad-enum",
    "unknown-field", "missing-required", "too-long", "too-short", "pattern", "duplicate", "cel", "null",
)  # fmt: skip


def draw_specs(seed: int, count: int) -> list[dict]:
    """`count` valid specs, reproducibly from `seed` (hypothesis' generation phase only)."""
    found: list[dict] = []

    @hypothesis.seed(seed)
    @hypothesis.settings(
        max_examples=count,
        database=None,
        deadline=None,
        phases=[hypothesis.Phase.generate],
        suppress_health_check=list(hypothesis.HealthCheck),
    )
    @hypothesis.given(valid_specs())
    def collect(spec):
        found.append(spec)

    collect()
    return found


def generate(seed: int, n_valid: int, n_invalid: int) -> list[Case]:
    """n_valid valid cases, then n_invalid mutants, the kinds of mutation taken in turn."""
    specs = draw_specs(seed, n_valid + n_invalid)
    pick = random.Random(seed)
    generated = [Case(spec, True) for spec in specs[:n_valid]]
    for i, spec in enumerate(specs[n_valid:]):
        options = _mutations(spec)
        kinds = {m for m, _, _ in options}
        kind = KINDS[i % len(KINDS)]
        if kind not in kinds:
            kind = pick.choice(sorted(kinds))
        mutation, path, how = pick.choice([o for o in options if o[0] == kind])
        generated.append(mutate(spec, mutation, path, how))
    return generated
