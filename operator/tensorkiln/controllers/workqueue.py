"""A work queue of object keys, in the style of controller-runtime's rate-limited queue.

- A key waits in the queue at most once: adding it again only brings its time forward.
- One worker at a time has a key: a key added while being processed is processed again after.
- `add(key, after=...)` delays it: a failure's backoff, the SLO scaler's next evaluation.
- `workers` threads take keys as they fall due; `shutdown` ends them.
- `longest_running` says which key a worker has had the longest: a reconcile that hangs would
  otherwise stop its object silently (it is never handed to another worker meanwhile).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable, Hashable

log = logging.getLogger(__name__)


class WorkQueue:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._heap: list[tuple[float, int, Hashable]] = []
        self._due: dict[Hashable, float] = {}  # queued keys, by when they fall due
        self._processing: dict[Hashable, float] = {}  # keys a worker has, since when
        self._again: dict[Hashable, float] = {}  # added while processing: queued when done
        self._order = itertools.count()
        self._changed = threading.Condition()
        self._closed = False

    def __len__(self) -> int:
        with self._changed:
            return len(self._due) + len(self._again)

    def add(self, key: Hashable, after: float = 0.0) -> None:
        due = self._clock() + max(after, 0.0)
        with self._changed:
            if key in self._processing:
                self._again[key] = min(self._again.get(key, due), due)
                return
            if key in self._due and self._due[key] <= due:
                return
            self._push(key, due)

    def _push(self, key: Hashable, due: float) -> None:
        self._due[key] = due
        heapq.heappush(self._heap, (due, next(self._order), key))
        self._changed.notify()

    def get(self, timeout: float | None = None) -> Hashable | None:
        """The next key due, now marked as being processed; None once shut down (or after `timeout`)."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._changed:
            while not self._closed:
                while self._heap and self._due.get(self._heap[0][2]) != self._heap[0][0]:
                    heapq.heappop(self._heap)  # superseded by an earlier time
                now = self._clock()
                if self._heap and self._heap[0][0] <= now:
                    _, _, key = heapq.heappop(self._heap)
                    del self._due[key]
                    self._processing[key] = now
                    return key
                wait = self._heap[0][0] - now if self._heap else None
                if deadline is not None:
                    left = deadline - now
                    if left <= 0:
                        return None
                    wait = left if wait is None else min(wait, left)
                self._changed.wait(wait)
            return None

    def done(self, key: Hashable) -> None:
        with self._changed:
            self._processing.pop(key, None)
            if key in self._again:
                due = self._again.pop(key)
                if key not in self._due or due < self._due[key]:
                    self._push(key, due)

    def longest_running(self) -> tuple[Hashable | None, float]:
        """The key a worker has had the longest, and for how many seconds (None, 0.0: none)."""
        with self._changed:
            if not self._processing:
                return None, 0.0
            key, since = min(self._processing.items(), key=lambda item: item[1])
            return key, self._clock() - since

    def shutdown(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def run_workers(self, count: int, process: Callable[[Hashable], None]) -> list[threading.Thread]:
        """`count` daemon threads, each taking keys and calling `process(key)`; an exception
        escaping `process` is logged and the key is done (its retry is process's to schedule)."""

        def work() -> None:
            while (key := self.get()) is not None:
                try:
                    process(key)
                except Exception:
                    log.exception("processing %s failed", key)
                finally:
                    self.done(key)

        threads = [threading.Thread(target=work, name=f"reconcile-{i}", daemon=True) for i in range(count)]
        for thread in threads:
            thread.start()
        return threads
