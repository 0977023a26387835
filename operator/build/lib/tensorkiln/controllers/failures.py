"""Every failure of a reconcile reaches the object's status, once in the log, and backs off.

An exception or API error inside a reconcile sets `Ready=False`, reason `ReconcileError`, with the
API's own message and the object that failed (an apply names it with a note on the exception);
posts one Warning Event per distinct message; and delays the object's next resync try, doubling up
to a cap, as controller-runtime's rate-limited queue does. The log gets one line per failure per
backoff step, and a traceback only the first time a kind of failure is seen in this process, so
a thousand models failing alike cost a thousand short lines per cap, not a thousand tracebacks.
"""

import logging
import re
import threading
from dataclasses import dataclass
from datetime import datetime

from tensorkiln.apierrors import describe
from tensorkiln.controllers.backoff import Backoff
from tensorkiln.status.conditions import condition, merge_conditions

log = logging.getLogger(__name__)

REASON = "ReconcileError"


def failed_status(obj: dict, condition_type: str, message: str, now: datetime) -> dict:
    """The object's status with `condition_type`=False ReconcileError (an InferenceModel's Ready, a
    CompileJob's Reconciled); every other field as it was (pure)."""
    status = dict(obj.get("status") or {})
    existing = status.get("conditions") or []
    (failed,) = merge_conditions(
        existing, [condition(condition_type, False, REASON, message)], obj["metadata"].get("generation", 1), now
    )
    others = [c for c in existing if c.get("type") != condition_type]
    return {**status, "phase": status.get("phase") or "Pending", "conditions": [failed, *others]}


_VARYING = re.compile(r"\"[^\"]*\"|[0-9a-f]{6,}|\d+")  # quoted names, hashes, uids, counts


def cleared(status: dict, condition_type: str) -> dict:
    """`status` without a failure's condition, once a reconcile succeeded (pure)."""
    conditions = status.get("conditions") or []
    if not any(c.get("type") == condition_type for c in conditions):
        return status
    return {**status, "conditions": [c for c in conditions if c.get("type") != condition_type]}


def _signature(error: BaseException) -> str:
    """What makes two failures 'the same kind': type and message, numbers and names of objects aside."""
    text = describe(error).split(": ", 1)[-1] if getattr(error, "__notes__", None) else describe(error)
    return f"{type(error).__name__}:{_VARYING.sub('#', text)[:200]}"


@dataclass(frozen=True)
class Recorded:
    attempts: int  # consecutive failures of this object
    retry_in: float  # seconds until the resync tries it again
    traceback: bool  # the first of its kind in this process: log the traceback
    new_message: bool  # differs from the last one posted for this object: post an Event


class FailureTracker:
    """Backoff, log and Event deduplication for failing reconciles, per object key."""

    SIGNATURES_KEPT = 1000

    def __init__(self, first: float = 5.0, cap: float = 300.0):
        self.backoff = Backoff(first, cap)
        self._lock = threading.Lock()
        self._seen: set[str] = set()
        self._posted: dict[str, str] = {}  # key -> the message last posted as an Event

    def wait_left(self, key: str, now: float) -> float:
        return self.backoff.wait_left(key, now)

    def failed(self, key: str, error: BaseException, now: float) -> Recorded:
        attempts, delay = self.backoff.failed(key, now)
        signature, message = _signature(error), describe(error)
        with self._lock:
            first = signature not in self._seen and len(self._seen) < self.SIGNATURES_KEPT
            self._seen.add(signature)
            new_message = self._posted.get(key) != message
            self._posted[key] = message
        return Recorded(attempts, delay, first, new_message)

    def succeeded(self, key: str) -> None:
        self.backoff.succeeded(key)
        with self._lock:
            self._posted.pop(key, None)
