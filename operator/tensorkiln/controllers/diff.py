"""Deciding whether an apply would change anything, so steady state costs no writes."""


def contains(observed, desired) -> bool:
    """True when every field of desired is in observed with the same value.

    Observed objects carry API-server defaults and other managers' fields; those do not count.
    """
    if isinstance(desired, dict):
        return isinstance(observed, dict) and all(
            k in observed and contains(observed[k], v) for k, v in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(observed, list)
            and len(observed) == len(desired)
            and all(contains(o, d) for o, d in zip(observed, desired))
        )
    return observed == desired
