"""controllers.workqueue: each key once, one worker per key, delays, and workers."""

import threading
import time

from tensorkiln.controllers.workqueue import WorkQueue


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_a_key_is_queued_once_and_an_earlier_time_wins():
    clock = Clock()
    queue = WorkQueue(clock)
    queue.add("a", after=10)
    queue.add("a", after=30)  # later: no change
    queue.add("b")
    assert len(queue) == 2
    assert queue.get(timeout=0) == "b"
    assert queue.get(timeout=0) is None  # "a" is not due yet
    queue.add("a", after=1)  # earlier: brought forward
    clock.now = 1
    assert queue.get(timeout=0) == "a"
    assert queue.get(timeout=0) is None  # the superseded entry for t=10 is gone with it
    clock.now = 100
    assert queue.get(timeout=0) is None


def test_a_key_added_while_processed_comes_again_after_done():
    queue = WorkQueue(Clock())
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    queue.add("a")
    queue.add("a")
    assert queue.get(timeout=0) is None  # not handed to a second worker meanwhile
    queue.done("a")
    assert queue.get(timeout=0) == "a"
    queue.done("a")
    assert queue.get(timeout=0) is None and len(queue) == 0


def test_a_retry_after_done_keeps_its_delay():
    clock = Clock()
    queue = WorkQueue(clock)
    queue.add("a")
    queue.get(timeout=0)
    queue.add("a", after=5)  # e.g. a backoff scheduled by the worker itself
    queue.done("a")
    assert queue.get(timeout=0) is None
    clock.now = 5
    assert queue.get(timeout=0) == "a"


def test_workers_process_every_key_one_at_a_time_and_survive_exceptions():
    queue = WorkQueue()
    running, seen, overlap = set(), [], []
    guard = threading.Lock()

    def process(key):
        with guard:
            if key in running:
                overlap.append(key)
            running.add(key)
        time.sleep(0.01)
        with guard:
            running.discard(key)
            seen.append(key)
        if key == "boom":
            raise RuntimeError("escapes process")

    threads = queue.run_workers(3, process)
    for _ in range(3):
        for key in ("a", "b", "c", "boom"):
            queue.add(key)
        time.sleep(0.005)
    for _ in range(200):
        if len(queue) == 0 and not running:
            break
        time.sleep(0.01)
    queue.shutdown()
    for thread in threads:
        thread.join(timeout=2)
    assert not overlap and {"a", "b", "c", "boom"} <= set(seen)
    assert not any(t.is_alive() for t in threads)


def test_the_longest_running_key_is_known():
    clock = Clock()
    queue = WorkQueue(clock)
    assert queue.longest_running() == (None, 0.0)
    queue.add("a")
    queue.add("b", after=5)
    queue.get(timeout=0)
    clock.now = 5
    queue.get(timeout=0)
    clock.now = 30
    assert queue.longest_running() == ("a", 30)
    queue.done("a")
    assert queue.longest_running() == ("b", 25)


def test_the_resync_waits_behind_every_key_due_in_the_foreground():
    clock = Clock()
    queue = WorkQueue(clock)
    for key in ("r1", "r2", "r3"):
        queue.add(key, background=True)  # a resync pass
    clock.now = 1
    queue.add("new")  # an event, later than the pass
    queue.add("r3")  # an event about one the pass queued: to the foreground
    queue.add("new", background=True)  # the next pass never demotes it
    assert [queue.get(timeout=0) for _ in range(4)] == ["new", "r3", "r1", "r2"]
    for key in ("new", "r3", "r1", "r2"):
        queue.done(key)
    assert queue.get(timeout=0) is None and len(queue) == 0


def test_a_resync_adds_nothing_to_a_reconcile_under_way():
    queue = WorkQueue(Clock())
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    queue.add("a", background=True)
    queue.done("a")
    assert queue.get(timeout=0) is None
