"""Per-object exponential backoff, as controller-runtime's rate-limited queue keeps it.

A key waits `first` seconds after its first consecutive failure, doubling up to `cap`; a success
resets it. In memory: a restarted operator tries at once. Thread-safe (kopf's handler threads and
the resync loop reconcile concurrently).
"""

import threading


class Backoff:
    def __init__(self, first: float = 5.0, cap: float = 80.0):
        self.first, self.cap = first, cap
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[int, float]] = {}  # key -> (failures so far, monotonic time of the next try)

    def wait_left(self, key: str, now: float) -> float:
        with self._lock:
            entry = self._entries.get(key)
        return max(entry[1] - now, 0.0) if entry else 0.0

    def if_failing(self, key: str) -> tuple[int, float]:
        """(consecutive failures, seconds until the next try) that one more failure would give; reads only."""
        with self._lock:
            failures = self._entries.get(key, (0, 0.0))[0] + 1
        return failures, min(self.first * 2 ** (failures - 1), self.cap)

    def failed(self, key: str, now: float) -> tuple[int, float]:
        """Record a failure; returns (consecutive failures, seconds until the next try)."""
        failures, delay = self.if_failing(key)
        with self._lock:
            self._entries[key] = (failures, now + delay)
        return failures, delay

    def succeeded(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)
