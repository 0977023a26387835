"""Operator logs in kopf's formats, every record about one object carrying its reference.

kopf's per-handler `logger` already carries the object (`k8s_ref`): its JSON lines hold it under
"object" ({"apiVersion", "kind", "namespace", "name", "uid"}), its text lines start with
"[namespace/name]". Our reconcilers log with plain module loggers (logging.getLogger(__name__))
and also run outside kopf's handlers (the resync thread), so instead of threading kopf's logger
through them, `about(body)` puts the object in a context variable for the duration of a reconcile,
and `ObjectReference`, a filter on the output handler, adds it to every record that has none.
"""

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

import kopf

FORMATS = {"json": kopf.LogFormat.JSON, "full": kopf.LogFormat.FULL, "plain": kopf.LogFormat.PLAIN}

_current: ContextVar[dict | None] = ContextVar("tensorkiln_log_object", default=None)


def reference(body: Mapping) -> dict:
    """The object reference kopf's ObjectLogger puts on its records."""
    metadata = body.get("metadata", {})
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "name": metadata.get("name"),
        "uid": metadata.get("uid"),
        "namespace": metadata.get("namespace"),
    }


@contextmanager
def about(body: Mapping) -> Iterator[None]:
    """Records logged in this block, in this thread or task, are about `body`."""
    token = _current.set(reference(body))
    try:
        yield
    finally:
        _current.reset(token)


class ObjectReference(logging.Filter):
    """Adds the current object (see `about`) and the logger's name to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "k8s_ref"):
            ref = _current.get()
            if ref is not None:
                record.k8s_ref = ref
        if not hasattr(record, "logger"):
            record.logger = record.name  # a JSON field; text formats ignore it
        return True


def configure(log_format: str, debug: bool = False) -> None:
    """kopf's handler on the root logger, in `log_format` (json, full, plain), with ObjectReference."""
    if log_format not in FORMATS:
        raise ValueError(f"log format {log_format!r}: expected one of {', '.join(FORMATS)}")
    # log_prefix=None: "[namespace/name] " before text messages, none in JSON (the "object" field).
    kopf.configure(debug=debug, log_format=FORMATS[log_format], log_prefix=None)
    # One line per /healthz request (every probe period) says nothing a failing probe would not.
    logging.getLogger("aiohttp.access").setLevel(logging.DEBUG if debug else logging.WARNING)
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, ObjectReference) for f in handler.filters):
            handler.addFilter(ObjectReference())
