"""CompileJob reconciler: one batch/v1 Job per (CompileJob, options), its progress mirrored back."""

import logging
from datetime import datetime, timezone

from tensorkiln.builders.job import build_job, job_name
from tensorkiln.controllers.state import ClusterState
from tensorkiln.status.compilejob import compile_job_status

log = logging.getLogger(__name__)

TERMINAL = ("Succeeded", "Failed")


def reconcile(state: ClusterState, compile_job: dict) -> tuple[dict, dict]:
    """Converge one CompileJob; returns (old status, new status) for the caller's Events."""
    meta = compile_job["metadata"]
    namespace = meta["namespace"]
    wanted = job_name(compile_job)
    old_status = compile_job.get("status", {})
    jobs = {j["metadata"]["name"]: j for j in state.jobs(namespace, meta["name"])}

    for name in jobs.keys() - {wanted}:
        # Built for options the CompileJob no longer has.
        state.delete_job(namespace, name)
        log.info("deleted superseded Job %s/%s", namespace, name)

    job = jobs.get(wanted)
    finished_before = old_status.get("jobName") == wanted and old_status.get("phase") in TERMINAL
    if job is None and finished_before:
        return old_status, old_status  # the Job was cleaned up after finishing; its result stands
    if job is None:
        # A Job's pod template is immutable, so a Job is created once and never re-applied.
        job = state.apply(build_job(compile_job))
        log.info("created Job %s/%s", namespace, wanted)

    pod = state.newest_pod(namespace, wanted)
    status = compile_job_status(compile_job, job, pod, state.simulated_nodes(), datetime.now(timezone.utc))
    if status != old_status:
        state.apply_status(compile_job, status)
    return old_status, status
