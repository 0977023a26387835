"""The resync loop outlives an unreachable API server (a regression of the fault suite, e2e/faults).

Before: listing during an API server restart raised urllib3's MaxRetryError, which is no
ApiException, so it escaped resync_all and ended the resync task for good: /healthz failed from
then on and nothing was re-reconciled until the operator was restarted.
"""

import asyncio

import urllib3
from tensorkiln.controllers import handlers


def refused(*_args, **_kwargs):
    raise urllib3.exceptions.MaxRetryError(None, "/apis/tensorkiln.dev/v1alpha1/inferencemodels", "Connection refused")


def test_a_refused_listing_is_a_warning_not_an_exception(monkeypatch, caplog):
    monkeypatch.setattr(handlers, "_list", refused)
    handlers.resync_all()
    assert [r.levelname for r in caplog.records if "cannot list" in r.getMessage()] == ["WARNING", "WARNING"]


def test_the_loop_keeps_going_after_a_failed_pass(monkeypatch):
    passes = []

    def resync_all():
        passes.append(len(passes))
        if len(passes) == 1:
            raise RuntimeError("anything at all")

    monkeypatch.setattr(handlers, "resync_all", resync_all)
    filled = handlers.cache.WatchCache()
    filled.mark_filled()  # kopf's first listing is done
    monkeypatch.setattr(handlers, "CACHE", filled)
    monkeypatch.setattr(handlers, "SETTINGS", handlers.SETTINGS.__class__(resync_seconds=0.01))

    async def run_a_while():
        task = asyncio.create_task(handlers._resync_forever())
        for _ in range(200):
            await asyncio.sleep(0.01)
            if len(passes) >= 3:
                break
        alive = not task.done()
        task.cancel()
        return alive

    assert asyncio.run(run_a_while())
    assert len(passes) >= 3
