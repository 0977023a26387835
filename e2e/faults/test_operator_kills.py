"""The installed operator SIGKILLed at random points during compiles and rollouts (its pod
force-deleted; the Deployment starts another): every InferenceModel converges to Ready with nothing
duplicated, orphaned or lost.

Models: real compiles on local-0 (the rapidocr classifier, OpenVINO FP32: about 10 s each) and
SIMULATED engines (cache hits: rollout only, real Triton). So that the kills keep meeting work,
it comes in waves between them: a new real model every 5 kills, and twice a new spec for the
simulated models whose engine is already published (a rollout each), patched while the operator's
replacement starts. The kill times come from the suite's seed (printed; TENSORKILN_FAULTS_SEED reruns them).
"""

import os
import time
from collections import Counter

from kubernetes import client
from tensorkiln.builders.serving import target_name
from tensorkiln_api import GROUP, VERSION
from tensorkiln_api.registry import open_registry

from .support import (
    compile_jobs,
    cpu_target,
    create,
    expected_job_name,
    get_model,
    jobs_of,
    log_exceptions,
    models,
    orphans,
    pods_of_job,
    publish_simulated,
    ready,
    real_model,
    served_engine,
    simulated_model,
    status_problems,
    wait_until,
)

KILLS = int(os.environ.get("TENSORKILN_FAULTS_KILLS", "20"))
REAL, SIMULATED = 4, 3
NEW_REAL_AT = {5: 1, 10: 2, 15: 3}  # kill number -> real model created right after that restart
NEW_SPEC_AT = {7: "v2", 14: "v3"}  # kill number -> engine the simulated models are patched to


def applied(log: str, namespace: str) -> int:
    """How many objects of `namespace` the operator's log says it applied (it watches every namespace)."""
    return sum(1 for line in log.splitlines() if '"message": "applying ' in line and f" {namespace}/" in line)


def in_progress(api, namespace: str) -> tuple[int, int]:
    """What was under way when the operator was killed: (compiles not finished, rollouts)."""
    phases = Counter(cj.get("status", {}).get("phase", "None") for cj in compile_jobs(api, namespace))
    rolling = 0
    for d in client.AppsV1Api(api).list_namespaced_deployment(namespace).items:
        s, want = d.status, d.spec.replicas
        if (s.updated_replicas or 0) < want or (s.available_replicas or 0) < want or (s.replicas or 0) > want:
            rolling += 1
    return phases.get("Running", 0) + phases.get("Pending", 0) + phases.get("None", 0), rolling


def test_operator_killed_20_times_converges_without_duplicates_orphans_or_lost_status(
    api, namespace, operator, rng, tmp_path, registry_uri
):
    real = [real_model(namespace, f"real-{i}", variant=i) for i in range(REAL)]
    simulated = [simulated_model(namespace, f"sim-{i}", variant=i) for i in range(SIMULATED)]
    # Every engine of the simulated models is published first: v1 now, v2 and v3 for the patches.
    specs = {
        version: [simulated_model(namespace, f"sim-{i}", variant=offset + i) for i in range(SIMULATED)]
        for version, offset in (("v1", 0), ("v2", 100), ("v3", 200))
    }
    engines = {
        version: {m["metadata"]["name"]: publish_simulated(api, registry_uri, m, tmp_path / version) for m in models_}
        for version, models_ in specs.items()
    }

    op, log_start = operator, len(operator.log())
    first = [real[0], *simulated]
    rng.shuffle(first)
    for model in first:
        create(api, model)

    started, log, hits = time.monotonic(), [], Counter()
    for kill in range(1, KILLS + 1):
        time.sleep(rng.uniform(0.5, 5))
        compiling, rolling = in_progress(api, namespace)
        op.kill()  # SIGKILL
        hits["during compiles" if compiling else "during rollouts" if rolling else "idle"] += 1
        log.append(f"kill {kill:2d} at {time.monotonic() - started:5.1f} s: {compiling} compiles, {rolling} rollouts")
        if kill in NEW_SPEC_AT:  # a new engine for the simulated models, patched while the operator is down
            version = NEW_SPEC_AT[kill]
            for model in specs[version]:
                patch = {"spec": {"compile": model["spec"]["compile"]}}
                client.CustomObjectsApi(api).patch_namespaced_custom_object(
                    GROUP, VERSION, namespace, "inferencemodels", model["metadata"]["name"], patch
                )
            log.append(f"           simulated models patched to their {version} engines")
        time.sleep(rng.uniform(0, 2))
        op.start()
        if kill in NEW_REAL_AT:
            create(api, real[NEW_REAL_AT[kill]])
            log.append(f"           real-{NEW_REAL_AT[kill]} created")
    print("\n" + "\n".join(log))
    print(f"kills: {dict(hits)}")
    final = engines["v3"]

    def converged():
        found = models(api, namespace)
        return (
            len(found) == REAL + SIMULATED
            and all(ready(m) for m in found)
            and all(
                served_engine(api, namespace, target_name(f"sim-{i}", target)) == final[f"sim-{i}"]
                for i in range(SIMULATED)
            )
        )

    target = cpu_target(api, simulated[0])
    wait_until(converged, timeout=900, what="every InferenceModel Ready, the simulated ones on their v3 engines")
    print(f"converged {time.monotonic() - started:.0f} s after the first kill")

    problems = []
    registry = open_registry(registry_uri)
    for model in models(api, namespace):
        name = model["metadata"]["name"]
        problems += status_problems(model, ("Ready", "Compiled", "Deployed"))
        (cj,) = compile_jobs(api, namespace, name)
        problems += status_problems(cj, ("Compiled",))
        digest = cj["status"].get("engine", {}).get("digest")
        if cj["status"].get("phase") != "Succeeded" or not digest:
            problems.append(f"{name}: CompileJob {cj['status'].get('phase')} without an engine")
            continue
        served = served_engine(api, namespace, target_name(name, target))
        if served != digest or model["status"]["targets"][0].get("engine", {}).get("digest") != digest:
            problems.append(f"{name}: serves {served}, CompileJob has {digest}")
        registry.manifest(digest)  # published, and intact
        jobs = jobs_of(api, namespace, cj["metadata"]["name"])
        if name.startswith("real-"):
            if [j.metadata.name for j in jobs] != [expected_job_name(cj)]:
                problems.append(f"{name}: Jobs {[j.metadata.name for j in jobs]}, want exactly one")
            elif len(pods_of_job(api, namespace, jobs[0].metadata.name)) != cj["status"].get("attempts"):
                problems.append(f"{name}: compile pods differ from the {cj['status'].get('attempts')} attempts")
            if cj["status"].get("cacheHit"):
                problems.append(f"{name}: a cache hit, yet nothing else compiled this key")
        else:
            if jobs:
                problems.append(f"{name}: {len(jobs)} Jobs for a cache hit")
            if digest != final[name]:
                problems.append(f"{name}: engine {digest}, want v3 {final[name]}")
    deployments = client.AppsV1Api(api).list_namespaced_deployment(namespace).items
    services = client.CoreV1Api(api).list_namespaced_service(namespace).items
    if len(deployments) != REAL + SIMULATED or len(services) != 2 * (REAL + SIMULATED):
        problems.append(f"{len(deployments)} Deployments and {len(services)} Services for {REAL + SIMULATED} models")
    checked, orphaned = orphans(api, namespace)
    # Converged means quiet: three resync passes over everything, and not one write.
    writes = applied(op.log(), namespace)
    time.sleep(16)
    rewrites = applied(op.log(), namespace) - writes
    if rewrites:
        problems.append(f"{rewrites} objects applied again in steady state")
    exceptions = log_exceptions(op.log()[log_start:])
    print(
        f"kills: {KILLS} {dict(hits)}; models Ready: {len(models(api, namespace))}/{REAL + SIMULATED}; "
        f"objects checked for owners: {checked}, orphans: {len(orphaned)}; "
        f"Jobs: {sum(len(jobs_of(api, namespace, cj['metadata']['name'])) for cj in compile_jobs(api, namespace))} "
        f"for {REAL} compiles; exceptions in the operator log: {len(exceptions)}"
    )
    assert not problems, "\n".join(problems)
    assert not orphaned, "\n".join(orphaned)
    assert not exceptions, "\n".join(exceptions[:20])
    assert all(get_model(api, namespace, m["metadata"]["name"])["status"]["phase"] == "Ready" for m in real + simulated)
