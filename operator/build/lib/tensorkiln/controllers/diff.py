"""Deciding whether an apply would change anything, so steady state costs no writes."""


def contains(observed, desired) -> bool:
    """True when every field of desired is in observed with the same value.

    Observed objects carry API-server defaults and other managers' fields; those do not count.
    An empty list or map or a `false` in desired matches an absent field: the API server omits
    empty ones (a CPU target's `tolerations: []`) and false booleans that are no pointers (a
    claim's `readOnly: false`); either would otherwise rewrite the object every reconcile. (A
    boolean that defaults to true is a pointer, stored even when false.)
    """
    return first_difference(observed, desired) is None


def first_difference(observed, desired, path: str = "") -> str | None:
    """The path of the first field of desired that observed lacks or holds otherwise (None: none),
    for the log line that says why an object is applied again."""
    if isinstance(desired, dict):
        if not isinstance(observed, dict):
            return path or "."
        for key, value in desired.items():
            where = f"{path}.{key}" if path else key
            if key not in observed:
                if value not in ([], {}) and value is not False:
                    return where
            elif (found := first_difference(observed[key], value, where)) is not None:
                return found
        return None
    if isinstance(desired, list):
        if not isinstance(observed, list) or len(observed) != len(desired):
            return path
        for i, (o, d) in enumerate(zip(observed, desired)):
            if (found := first_difference(o, d, f"{path}[{i}]")) is not None:
                return found
        return None
    return None if observed == desired else path
