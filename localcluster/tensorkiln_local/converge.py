"""`tensorkiln-local wait`: block until every InferenceModel has been handled and its compile pods placed
(or its CompileJobs ended without one: an engine reused from the registry needs no compile pod)."""

import time

from kubernetes import client
from tensorkiln.controllers.compilejob import TERMINAL
from tensorkiln.status.conditions import find
from tensorkiln_api import GROUP, VERSION

from tensorkiln_local.cluster import connection


def pending(models: list[dict], compile_jobs: list[dict]) -> list[str]:
    """What is still unconverged, one line each (pure)."""
    by_name = {(cj["metadata"]["namespace"], cj["metadata"]["name"]): cj for cj in compile_jobs}
    waiting = []
    for model in models:
        meta, status = model["metadata"], model.get("status", {})
        ref = f"inferencemodel {meta['namespace']}/{meta['name']}"
        if status.get("observedGeneration") != meta.get("generation"):
            waiting.append(f"{ref}: generation {meta.get('generation')} not yet observed")
            continue
        for target in status.get("targets", []):
            if not target.get("nodeCount"):
                continue
            cj_status = (by_name.get((meta["namespace"], target.get("compileJob", ""))) or {}).get("status", {})
            scheduled = find(cj_status.get("conditions"), "Scheduled")
            ended = cj_status.get("phase") in TERMINAL
            if not ended and (not scheduled or scheduled.get("status") != "True"):
                waiting.append(f"{ref}: compile pod for {target['hardwareClass']} not scheduled yet")
    return waiting


def wait(timeout: float) -> int:
    with connection.api_client() as api:
        custom = client.CustomObjectsApi(api)
        deadline = time.monotonic() + timeout
        while True:
            models = custom.list_cluster_custom_object(GROUP, VERSION, "inferencemodels")["items"]
            jobs = custom.list_cluster_custom_object(GROUP, VERSION, "compilejobs")["items"]
            waiting = pending(models, jobs)
            if not waiting:
                print(f"converged: {len(models)} InferenceModels, {len(jobs)} CompileJobs")
                return 0
            if time.monotonic() > deadline:
                print("not converged:\n  " + "\n  ".join(waiting))
                return 1
            time.sleep(2)
