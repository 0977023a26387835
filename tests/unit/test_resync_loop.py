"""The resync loop: it queues every object the watch cache holds, and it outlives any failed pass.

A regression of the fault suite (e2e/faults): a listing that raised during an API server restart
(urllib3's MaxRetryError, no ApiException) once escaped the pass and ended the resync task for
good: /healthz failed from then on and nothing was re-reconciled until the operator restarted.
The pass now reads only the cache, and the loop survives whatever a pass raises.
"""

import asyncio
from types import SimpleNamespace

from tensorkiln.controllers import handlers
from tensorkiln.leadership import Leadership
from tensorkiln.settings import Settings

from .test_watch_cache import filled, obj


def controller(cache, **settings) -> handlers.Controller:
    context = SimpleNamespace(
        settings=Settings(**settings), namespaces=[], cache=cache, state=None, leadership=Leadership()
    )
    return handlers.Controller(context)


def test_a_pass_queues_every_model_and_compile_job_in_the_cache_but_those_being_deleted():
    deleting = obj("InferenceModel", "gone", deletionTimestamp="2026-12-01T10:00:00Z")
    deleting["metadata"]["deletionTimestamp"] = deleting.pop("deletionTimestamp")
    resync = controller(filled(obj("InferenceModel", "a"), obj("CompileJob", "a-cpu"), deleting))
    resync.resync_all()
    queued = []
    while (item := resync.queue.get(timeout=0)) is not None:
        queued.append(item)
    assert sorted(queued) == [("CompileJob", "ns", "a-cpu"), ("InferenceModel", "ns", "a")]


def test_the_loop_keeps_going_after_a_failed_pass():
    passes = []
    resync = controller(filled(), resync_seconds=0.01)  # the informers' first listings are in

    def resync_all():
        passes.append(len(passes))
        if len(passes) == 1:
            raise RuntimeError("urllib3: connection refused")

    resync.resync_all = resync_all

    async def run_a_while():
        task = asyncio.create_task(resync.resync_forever())
        for _ in range(200):
            await asyncio.sleep(0.01)
            if len(passes) >= 3:
                break
        alive = not task.done()
        task.cancel()
        return alive

    assert asyncio.run(run_a_while())
    assert len(passes) >= 3
