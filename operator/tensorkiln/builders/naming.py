"""Deterministic, length-bounded object names."""

import hashlib
import json


def digest(value, length: int = 10) -> str:
    """Short stable hash of JSON-serialisable data."""
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:length]


def bounded_name(*parts: str, max_length: int) -> str:
    """parts joined by '-'; if too long, truncated with a hash of the full name appended."""
    name = "-".join(parts)
    if len(name) <= max_length:
        return name
    suffix = digest(name, 6)
    return f"{name[: max_length - len(suffix) - 1].rstrip('-')}-{suffix}"
