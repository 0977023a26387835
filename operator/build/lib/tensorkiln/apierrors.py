"""Errors from the Kubernetes API in one line that names the object and keeps the server's words."""

import json

from kubernetes import client

MESSAGE_LIMIT = 1024


def about(error: BaseException, kind: str, namespace: str, name: str) -> BaseException:
    """Name the object an API call failed on, for `describe` (e.g. `Service ns/x--l4`)."""
    error.add_note(f"{kind} {namespace}/{name}")
    return error


def api_message(error: client.ApiException) -> str:
    """The API server's own message (the Status body's), else the HTTP reason."""
    try:
        message = json.loads(error.body).get("message")
    except (TypeError, ValueError, AttributeError):
        message = None
    return f"{error.status} {error.reason}: {message}" if message else f"{error.status} {error.reason}"


def describe(error: BaseException) -> str:
    """One line: which object failed (if known) and why, in the API's words where there are some."""
    if isinstance(error, client.ApiException):
        why = api_message(error)
    else:
        why = f"{type(error).__name__}: {error}"
    notes = getattr(error, "__notes__", None)
    return (f"{notes[-1]}: {why}" if notes else why)[:MESSAGE_LIMIT]
