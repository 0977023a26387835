"""A work queue of object keys, in the style of controller-runtime's rate-limited queue.

- A key waits in the queue at most once: adding it again only brings its time forward.
- One worker at a time has a key: a key added while being processed is processed again after.
- `add(key, after=...)` delays it: a failure's backoff, the SLO scaler's next evaluation.
- `add(key, background=True)` (the periodic resync) queues it behind every key that is due in the
  foreground (an event, a spec change): a pass over a thousand unchanged objects must not make a
  new model wait for all of them. A foreground add moves a background key to the foreground.
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


FOREGROUND, BACKGROUND = 0, 1


class WorkQueue:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._heaps: tuple[list, list] = ([], [])  # per lane: (due, order, key)
        self._due: dict[Hashable, tuple[int, float]] = {}  # queued keys: (lane, when they fall due)
        self._processing: dict[Hashable, float] = {}  # keys a worker has, since when
        self._again: dict[Hashable, float] = {}  # added while processing: queued when done
        self._order = itertools.count()
        self._changed = threading.Condition()
        self._closed = False

    def __len__(self) -> int:
        with self._changed:
            return len(self._due) + len(self._again)

    def add(self, key: Hashable, after: float = 0.0, background: bool = False) -> None:
        due = self._clock() + max(after, 0.0)
        lane = BACKGROUND if background else FOREGROUND
        with self._changed:
            if key in self._processing:
                if not background:  # a resync adds nothing to the reconcile under way
                    self._again[key] = min(self._again.get(key, due), due)
                return
            queued = self._due.get(key)
            if queued is not None and queued <= (lane, due):
                return  # queued in a more urgent lane, or in this one as soon
            self._push(key, lane, due)

    def _push(self, key: Hashable, lane: int, due: float) -> None:
        self._due[key] = (lane, due)
        heapq.heappush(self._heaps[lane], (due, next(self._order), key))
        self._changed.notify()

    def _head(self, lane: int) -> tuple[float, int, Hashable] | None:
        heap = self._heaps[lane]
        while heap and self._due.get(heap[0][2]) != (lane, heap[0][0]):
            heapq.heappop(heap)  # superseded: queued again sooner, or in the other lane
        return heap[0] if heap else None

    def get(self, timeout: float | None = None) -> Hashable | None:
        """The next key due (the foreground's first), now marked as being processed; None once
        shut down (or after `timeout`)."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._changed:
            while not self._closed:
                now = self._clock()
                heads = [(lane, head) for lane in (FOREGROUND, BACKGROUND) if (head := self._head(lane))]
                ready = next(((lane, head) for lane, head in heads if head[0] <= now), None)
                if ready is not None:
                    lane, (_, _, key) = ready
                    heapq.heappop(self._heaps[lane])
                    del self._due[key]
                    self._processing[key] = now
                    return key
                wait = min((head[0] for _, head in heads), default=None)
                wait = None if wait is None else wait - now
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
                if key not in self._due or (FOREGROUND, due) < self._due[key]:
                    self._push(key, FOREGROUND, due)

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
