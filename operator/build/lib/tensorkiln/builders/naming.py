"""Deterministic, length-bounded object names; the scheme is tensorkiln_api.names'."""

import hashlib
import json

from tensorkiln_api.names import HASH_SUFFIX, SEPARATOR, TARGET_NAME_MAX


def digest(value, length: int = 10) -> str:
    """Short stable hash of JSON-serialisable data."""
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:length]


def bounded_name(*parts: str, max_length: int) -> str:
    """parts joined by '-'; if too long, truncated with a hash of the full name appended."""
    return _bounded("-".join(parts), max_length)


def _bounded(name: str, max_length: int) -> str:
    if len(name) <= max_length:
        return name
    suffix = digest(name, HASH_SUFFIX - 1)
    return f"{name[: max_length - len(suffix) - 1].rstrip('-')}-{suffix}"


def target_name(model_name: str, hardware_class: str) -> str:
    """The name of every per-hardware object of a model: `<model>--<class>`, bounded."""
    return _bounded(f"{model_name}{SEPARATOR}{hardware_class}", TARGET_NAME_MAX)
