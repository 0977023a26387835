"""Models, waits and end checks shared by the fault cases.

Two kinds of model, both on the real CPU node local-0 (never a kwok GPU pool):
- `real_model`: the rapidocr text-direction classifier staged under /var/lib/tensorkiln/models,
  compiled for real (OpenVINO FP32 only: a short compile), then served by real Triton;
- `simulated_model`: the same interface with a SIMULATED fixed-service-time engine published to
  the registry beforehand (engine_seeds.publish_simulation), so its CompileJob is a cache hit and
  only the rollout runs (real Triton, an engine that computes nothing).
"""

import copy
import json
import time
import urllib.request
from pathlib import Path

import yaml
from kubernetes import client
from tensorkiln.builders.job import job_name
from tensorkiln.builders.labels import COMPILE_JOB, MODEL
from tensorkiln.builders.serving import ENGINE_DIGEST
from tensorkiln.controllers.inferencemodel import normalised_spec
from tensorkiln.hardware.classes import discover
from tensorkiln.hardware.selection import select_targets
from tensorkiln_api import GROUP, VERSION
from tensorkiln_local.cluster.engine_seeds import publish_simulation
from tensorkiln_local.cluster.slo_workloads import SIMULATED

REPO = Path(__file__).resolve().parents[2]
SAMPLE = yaml.safe_load((REPO / "manifests/samples/ocr-cls-cpu.yaml").read_text())
SMALL = {"requests": {"cpu": "100m", "memory": "256Mi"}}  # room on local-0's 2 CPUs beside a compile
# Two compiles at once fit local-0 beside the Triton pods (the default requests a whole CPU each);
# each may still use both CPUs.
COMPILE = {"requests": {"cpu": "250m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "6Gi"}}
SERVICE_MS = 20


def _manifest(namespace: str, name: str, spec: dict) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceModel",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def real_model(namespace: str, name: str, variant: int = 0, retries: int = 2, int8: bool = False) -> dict:
    """The cls model compiled on local-0: OpenVINO FP32 only (about 10 s), or FP32 and INT8 with
    calibration (`int8`: a longer compile). `variant` changes the accuracy gate a little, so each
    variant has its own registry key (its own compile)."""
    spec = copy.deepcopy(SAMPLE["spec"])
    spec.pop("slo")  # one replica, never scaled: convergence is about the compile and the rollout
    calibration = spec["compile"]["calibration"]
    spec["compile"] = {
        "precisions": ["FP32", "INT8"] if int8 else ["FP32"],
        "compilers": {"cpu": ["OpenVINO"]},
        "accuracy": {"minTop1Agreement": 1.0, "maxAbsError": round(0.05 + variant / 1000, 4)},
        "objective": {"metric": "LatencyP95", "batchSize": 8},
        "retries": retries,
        "deadlineSeconds": 900,
        "resources": COMPILE,
    }
    if int8:
        spec["compile"]["calibration"] = calibration
    spec["serving"] = {"resources": SMALL}
    return _manifest(namespace, name, spec)


def simulated_model(namespace: str, name: str, variant: int = 0) -> dict:
    """The cls interface served by a SIMULATED engine (publish it first: `publish_simulated`)."""
    spec = copy.deepcopy(SIMULATED.spec)
    spec.pop("slo")
    spec["compile"]["accuracy"] = {"maxAbsError": round(0.05 + variant / 1000, 4)}
    spec["serving"]["resources"] = SMALL
    return _manifest(namespace, name, spec)


def cpu_target(api, model: dict):
    nodes = [api.sanitize_for_serialization(n) for n in client.CoreV1Api(api).list_node().items]
    (target,) = select_targets(normalised_spec(model)["hardware"], discover(nodes), nodes)
    return target


def publish_simulated(api, registry_uri: str, model: dict, work_dir: Path) -> str:
    """Publish the simulated engine of `model` under the key the operator looks up; its digest."""
    inputs, outputs = SIMULATED.tensors()
    return publish_simulation(registry_uri, model, cpu_target(api, model), work_dir, SERVICE_MS, inputs, outputs)


def create(api, model: dict) -> dict:
    meta = model["metadata"]
    return client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, meta["namespace"], "inferencemodels", model
    )


def models(api, namespace: str) -> list[dict]:
    return client.CustomObjectsApi(api).list_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels")[
        "items"
    ]


def compile_jobs(api, namespace: str, model: str | None = None) -> list[dict]:
    selector = f"{MODEL}={model}" if model else None
    return client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, "compilejobs", label_selector=selector
    )["items"]


def get_model(api, namespace: str, name: str) -> dict:
    return client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", name)


def condition(obj: dict, type_: str) -> dict:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == type_), {})


def ready(model: dict) -> bool:
    status = model.get("status", {})
    return (
        status.get("observedGeneration") == model["metadata"]["generation"]
        and status.get("phase") == "Ready"
        and condition(model, "Ready").get("status") == "True"
        and condition(model, "Deployed").get("status") == "True"
    )


def wait_until(predicate, timeout: float, what: str, interval: float = 2.0):
    """Poll until predicate() is truthy; raise AssertionError naming `what` (and the last value)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def status_problems(obj: dict, wanted_conditions: tuple[str, ...]) -> list[str]:
    """What is missing from a status that should be complete and current."""
    name = f"{obj['kind']} {obj['metadata']['name']}"
    status = obj.get("status") or {}
    problems = []
    if status.get("observedGeneration") != obj["metadata"]["generation"]:
        problems.append(
            f"{name}: observedGeneration {status.get('observedGeneration')} != {obj['metadata']['generation']}"
        )
    types = {c["type"] for c in status.get("conditions", [])}
    if missing := set(wanted_conditions) - types:
        problems.append(f"{name}: conditions {sorted(missing)} missing (has {sorted(types)})")
    for c in status.get("conditions", []):
        if c.get("observedGeneration") not in (None, obj["metadata"]["generation"]):
            problems.append(f"{name}: condition {c['type']} from generation {c['observedGeneration']}")
    return problems


def jobs_of(api, namespace: str, compile_job: str) -> list:
    return client.BatchV1Api(api).list_namespaced_job(namespace, label_selector=f"{COMPILE_JOB}={compile_job}").items


def pods_of_job(api, namespace: str, job: str) -> list:
    return client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"job-name={job}").items


def served_engine(api, namespace: str, deployment: str) -> str | None:
    found = client.AppsV1Api(api).read_namespaced_deployment(deployment, namespace)
    return (found.spec.template.metadata.annotations or {}).get(ENGINE_DIGEST)


def owned_objects(api, namespace: str) -> dict[str, list[dict]]:
    """Everything in the namespace that should have an owner, by kind, as plain dicts."""
    core, apps, batch = client.CoreV1Api(api), client.AppsV1Api(api), client.BatchV1Api(api)
    policy, autoscaling = client.PolicyV1Api(api), client.AutoscalingV2Api(api)
    plain = api.sanitize_for_serialization
    listed = {
        "Job": batch.list_namespaced_job(namespace).items,
        "Pod": core.list_namespaced_pod(namespace).items,
        "Deployment": apps.list_namespaced_deployment(namespace).items,
        "ReplicaSet": apps.list_namespaced_replica_set(namespace).items,
        "Service": core.list_namespaced_service(namespace).items,
        "ConfigMap": [
            c for c in core.list_namespaced_config_map(namespace).items if c.metadata.name != "kube-root-ca.crt"
        ],
        "PodDisruptionBudget": policy.list_namespaced_pod_disruption_budget(namespace).items,
        "HorizontalPodAutoscaler": autoscaling.list_namespaced_horizontal_pod_autoscaler(namespace).items,
    }
    found = {kind: [plain(o) for o in items] for kind, items in listed.items()}
    found["CompileJob"] = compile_jobs(api, namespace)
    return found


def orphans(api, namespace: str) -> tuple[int, list[str]]:
    """(objects checked, those without an owner reference to an existing object of that uid)."""
    objects = owned_objects(api, namespace)
    uids = {(kind, o["metadata"]["name"]): o["metadata"]["uid"] for kind, items in objects.items() for o in items}
    for model in models(api, namespace):
        uids[("InferenceModel", model["metadata"]["name"])] = model["metadata"]["uid"]
    problems, checked = [], 0
    for kind, items in objects.items():
        for obj in items:
            checked += 1
            refs = obj["metadata"].get("ownerReferences") or []
            name = f"{kind} {obj['metadata']['name']}"
            if not refs:
                problems.append(f"{name}: no owner reference")
            for ref in refs:
                if uids.get((ref["kind"], ref["name"])) != ref["uid"]:
                    problems.append(f"{name}: owner {ref['kind']} {ref['name']} ({ref['uid']}) does not exist")
    return checked, problems


def log_exceptions(text: str) -> list[str]:
    """Lines of an operator log (JSON or text) that report an exception or an error."""
    found = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            if "Traceback (most recent call last)" in line or line.startswith(("ERROR", "CRITICAL")):
                found.append(line[:300])
            continue
        if not isinstance(record, dict):
            continue
        if record.get("exc_info") or str(record.get("severity", "")).lower() in ("error", "critical"):
            exc = (record.get("exc_info") or "").strip().splitlines()
            found.append(f"{record.get('message', '')[:200]} | {exc[-1][:200] if exc else ''}")
    return found


def expected_job_name(compile_job: dict) -> str:
    return job_name(compile_job)


def healthz(op, url: str | None = None) -> dict | None:
    """The operator's /healthz answer (JSON), or None while it does not answer 200. `url`: its health
    port's, looked up before (op.url asks the API server, which may be down)."""
    try:
        with urllib.request.urlopen(f"{url or op.url('health')}/healthz", timeout=3) as response:
            return json.loads(response.read()) if response.status == 200 else None
    except (OSError, ValueError):
        return None


def wait_healthy(op, timeout: float = 60) -> dict:
    """Until the operator's startup handlers are done (its /healthz answers)."""
    return wait_until(lambda: healthz(op), timeout, "the operator's /healthz", interval=0.5)


def metric(op, name: str, **labels) -> float:
    """One sample of the operator's /metrics (0 when absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(f"{op.url('metrics')}/metrics", timeout=3) as response:
            text = response.read().decode()
    except OSError:
        return 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0
