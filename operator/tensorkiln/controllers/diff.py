"""Deciding whether an apply would change anything, so steady state costs no writes."""


def contains(observed, desired) -> bool:
    """True when every field of desired is in observed with the same value.

    Observed objects carry API-server defaults and other managers' fields; those do not count.
    An empty list or map in desired matches an absent field: the API server omits empty ones
    (a CPU target's `tolerations: []`), which would otherwise rewrite the object every reconcile.
    """
    if isinstance(desired, dict):
        return isinstance(observed, dict) and all(
            contains(observed[k], v) if k in observed else v in ([], {}) for k, v in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(observed, list)
            and len(observed) == len(desired)
            and all(contains(o, d) for o, d in zip(observed, desired))
        )
    return observed == desired
