"""How many recompiles run at once: compile Jobs for targets that already serve an engine.

A new compiler version (the chart's compilerVersion follows the release) changes every CompileJob's
spec, so every served model would compile again at once, each holding a node of its class (a GPU)
for minutes, and roll onto its new engine at once after. Settings.max_concurrent_recompiles bounds
them; a CompileJob over the bound waits (RecompileQueued), and the engine it replaces serves
meanwhile (status.serving.desired_engine keeps what serves until a compile succeeds). A target's
first compile never waits.

The ones running are the unfinished Jobs labelled RECOMPILE that the watch cache holds, and those
this operator created in the last seconds that its cache has not shown yet; a lock makes counting
and taking a slot one step across the reconcile workers.
"""

import threading
from collections.abc import Iterable

from tensorkiln.builders.labels import COMPILE_JOB, RECOMPILE
from tensorkiln.status.compilejob import job_condition

SEEN_WITHIN_SECONDS = 30.0  # a Job this operator created shows in its cache well within this
WAIT_SECONDS = 10.0  # a queued recompile asks for a slot again this soon


def running(jobs: Iterable[dict]) -> frozenset[tuple[str, str]]:
    """(namespace, CompileJob) of the recompile Jobs among `jobs` that have not finished (pure)."""
    found = set()
    for job in jobs:
        labels = job["metadata"].get("labels") or {}
        finished = job_condition(job, "Complete") or job_condition(job, "Failed")
        if labels.get(RECOMPILE) == "true" and not finished:
            found.add((job["metadata"]["namespace"], labels[COMPILE_JOB]))
    return frozenset(found)


class RecompileSlots:
    def __init__(self):
        self._lock = threading.Lock()
        self._taken: dict[tuple[str, str], float] = {}  # created by this operator, at (time.monotonic())

    def take(
        self, key: tuple[str, str], running_now: frozenset[tuple[str, str]], limit: int, now: float
    ) -> tuple[bool, int]:
        """Whether the recompile of CompileJob `key` may start now, and how many run (or are about to)."""
        with self._lock:
            self._taken = {
                k: at for k, at in self._taken.items() if k not in running_now and now - at < SEEN_WITHIN_SECONDS
            }
            in_flight = running_now | self._taken.keys()
            if key in in_flight:
                return True, len(in_flight)
            if limit and len(in_flight) >= limit:
                return False, len(in_flight)
            self._taken[key] = now
            return True, len(in_flight) + 1
