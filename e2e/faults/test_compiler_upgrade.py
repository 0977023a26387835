"""`helm upgrade` to a build with a new compiler version, under load on a served model (issue 46):
every served model compiles again, at most maxConcurrentRecompiles at once (1 here), each keeps
serving its engine until the new one passed, and the model under load answers every request.

Three real models (the cls classifier, each with an accuracy gate of its own, so each compiles) are
served on local-0. Then the installed chart is upgraded with a new compilerVersion (same images: the
release's version plus a build suffix) and maxConcurrentRecompiles 1, as a user upgrades. The test
watches, every half second: the unfinished recompile Jobs (at most 1), each model's Triton pods (none
of the old ones goes before that model's CompileJob succeeded with the new version), and the load's
answers (open loop on the first model, retried as a client would over kube-proxy's endpoint sync:
none may fail). The chart's operator pods roll too (a leader and a standby). Afterwards the install
is put back as the session had it (its engines are cache hits: no compile).
"""

import threading
import time

import numpy as np
from kubernetes import client
from tensorkiln.builders.labels import RECOMPILE
from tensorkiln_local import install
from tensorkiln_local.cluster import registry
from tensorkiln_local.images import build as images
from tensorkiln_local.load.loadgen import OpenLoopLoad, Phase

from tests.integration.conftest import session_values

from .support import compile_jobs, create, get_model, ready, real_model, wait_until

MODELS = 3
BOUND = 1
RATE = 20.0  # requests/s on the first model, through its Service


def serving_pods(api, namespace: str, model: str) -> dict[str, bool]:
    """The model's Triton pods (its Deployment's selector): uid -> being deleted."""
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    (deployment,) = [
        d for d in apps.list_namespaced_deployment(namespace).items if d.metadata.name.startswith(f"{model}--")
    ]
    selector = ",".join(f"{k}={v}" for k, v in deployment.spec.selector.match_labels.items())
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    return {p.metadata.uid: p.metadata.deletion_timestamp is not None for p in pods}


def recompiles_running(api, namespace: str) -> int:
    jobs = client.BatchV1Api(api).list_namespaced_job(namespace, label_selector=f"{RECOMPILE}=true").items
    return sum(1 for j in jobs if not any(c.status == "True" and c.type in ("Complete", "Failed")
                                          for c in (j.status.conditions or [])))  # fmt: skip


def test_a_new_compiler_version_recompiles_within_the_bound_and_drops_no_request(api, namespace, operator):
    names = [f"cls-{i}" for i in range(MODELS)]
    for i, name in enumerate(names):
        create(api, real_model(namespace, name, variant=10 + i))
    wait_until(lambda: all(ready(get_model(api, namespace, n)) for n in names), 900, "the models Ready", 3)
    old_pods = {n: set(serving_pods(api, namespace, n)) for n in names}

    current = install.compiler_version(images.pushed(registry.HOST))
    upgraded = f"{current}.upgrade"
    run = operator.registry_uri.rsplit("/", 1)[1].removeprefix("engines-")
    values = {**session_values(run), "compilerVersion": upgraded, "maxConcurrentRecompiles": BOUND}
    load = OpenLoopLoad(api, namespace, names[0], names[0], {"x": np.zeros((1, 3, 48, 192), np.float32)},
                        timeout_s=5)  # fmt: skip
    started = time.monotonic()
    thread = threading.Thread(target=load.run, args=([Phase("upgrade", RATE, 1800)],), daemon=True)
    thread.start()
    try:
        install.install(namespaces=(), overrides=values, engine_registry="pvc")  # helm upgrade, as a user does
        most, compiled_at, first_gone_at = 0, {}, {}
        deadline = time.monotonic() + 1200
        while time.monotonic() < deadline:
            most = max(most, recompiles_running(api, namespace))
            now = time.monotonic() - started
            for name in names:
                jobs = compile_jobs(api, namespace, name)
                if name not in compiled_at and any(
                    j["spec"].get("compilerVersion") == upgraded
                    and (j.get("status") or {}).get("phase") == "Succeeded"
                    and j["status"].get("observedGeneration") == j["metadata"]["generation"]
                    for j in jobs
                ):
                    compiled_at[name] = now
                pods = serving_pods(api, namespace, name)
                if name not in first_gone_at and any(uid not in pods or pods[uid] for uid in old_pods[name]):
                    first_gone_at[name] = now
            rolled = all(not (old_pods[n] & set(serving_pods(api, namespace, n))) for n in names)
            if len(compiled_at) == MODELS and rolled and all(ready(get_model(api, namespace, n)) for n in names):
                break
            time.sleep(0.5)
        load.stop()
        thread.join(timeout=60)
    finally:
        load.stop()
        install.install(namespaces=(), overrides=session_values(run), engine_registry="pvc")  # as the session had it

    results = load.results
    failed = [r for r in results if not r.ok]
    print(f"\nrecompiled {len(compiled_at)}/{MODELS} (at s: {compiled_at}); old pods first went at {first_gone_at}; "
          f"at most {most} recompile(s) at once; {len(results)} requests, {len(failed)} failed")  # fmt: skip
    assert len(compiled_at) == MODELS, f"not every model recompiled with {upgraded}: {compiled_at}"
    assert most <= BOUND, f"{most} recompiles ran at once, over maxConcurrentRecompiles {BOUND}"
    early = {n: (first_gone_at[n], compiled_at[n]) for n in first_gone_at if first_gone_at[n] < compiled_at[n]}
    assert not early, f"Triton pods went before their new engine passed (gone at, compiled at): {early}"
    assert results and not failed, f"{len(failed)} of {len(results)} requests failed during the upgrade"
