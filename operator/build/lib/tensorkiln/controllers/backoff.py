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

    def failed(self, key: str, now: float) -> tuple[int, float]:
        """Record a failure; returns (consecutive failures, seconds until the next try)."""
        with self._lock:
            failures = self._entries.get(key, (0, now))[0] + 1
            delay = min(self.first * 2 ** (failures - 1), self.cap)
            self._entries[key] = (failures, now + delay)
        return failures, delay

    def succeeded(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)
