"""Real Triton on local-0 serving an engine compiled there, through the operator, end to end."""

import copy
import re
import threading
import urllib.request
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import yaml
from kubernetes import client
from tensorkiln.builders.compilejob import build_compile_job
from tensorkiln.builders.serving import COMPONENT, ENGINE_DIGEST
from tensorkiln.builders.tritonconfig import config_dict, parse, render
from tensorkiln.controllers.inferencemodel import normalised_spec
from tensorkiln.hardware.classes import discover
from tensorkiln.hardware.selection import select_targets
from tensorkiln.settings import Settings
from tensorkiln_api import GROUP, VERSION
from tensorkiln_api.registry import open_registry
from tensorkiln_client import infer as tensorkiln_infer
from tensorkiln_client.triton import infer_on, new_connection, ready_endpoints, service_address, until_routed
from tensorkiln_local.cluster.ocr_models import CLS
from tensorkiln_local.images.catalog import SERVING_TARGET
from tensorkiln_local.install import give_to_compiler

from .helpers import wait_for

pytestmark = pytest.mark.cluster
SAMPLE = yaml.safe_load((Path(__file__).resolve().parents[2] / "manifests/samples/ocr-cls-cpu.yaml").read_text())
NAME = "ocr-cls"
SERVING = ",".join(f"{key}={value}" for key, value in COMPONENT.items())  # its Triton objects


def model_object(api, namespace) -> dict:
    return client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", NAME)


def condition(model: dict, type_: str) -> dict:
    return next((c for c in model.get("status", {}).get("conditions", []) if c["type"] == type_), {})


def served_engine(api, namespace) -> str:
    deployments = client.AppsV1Api(api).list_namespaced_deployment(namespace).items
    return deployments[0].spec.template.metadata.annotations[ENGINE_DIGEST]


def rolled_out(api, namespace):
    model = model_object(api, namespace)
    return model if condition(model, "Deployed").get("status") == "True" else None


def counter(metrics: str, name: str) -> float:
    return sum(float(v) for v in re.findall(rf'^{name}{{model="{NAME}".*}} ([0-9.e+]+)$', metrics, re.M))


class Load:
    """Requests from several threads, each over a connection of its own to the model's Service, for
    as long as it runs. A failed request is retried once over a new connection (kube-proxy may
    route it to another pod), as a client would; a request that fails twice counts as failed."""

    def __init__(self, api, namespace, threads=4):
        self.address = service_address(api, namespace, NAME)
        self.ok = self.failed = 0
        self.errors: list[str] = []
        self.answering: set[int] = set()  # the threads that had an answer: the load is whole once all did
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(i,)) for i in range(threads)]

    def _run(self, seed) -> None:
        batch = CLS.samples(1, seed=seed)
        connection = new_connection(self.address)
        while not self._stop.is_set():
            try:
                try:
                    infer_on(connection, NAME, {"x": batch}, timeout_s=10)
                except Exception:  # the retry goes over a new connection
                    connection = new_connection(self.address)
                    infer_on(connection, NAME, {"x": batch}, timeout_s=10)
                with self._lock:
                    self.ok += 1
                    self.answering.add(seed)
            except Exception as error:
                with self._lock:
                    self.failed += 1
                    self.errors.append(
                        f"{type(error).__name__}: {error}"[:200]
                    )  # tritonclient's repr drops the message

    @property
    def whole(self) -> bool:
        """Every thread has had an answer: from now on the full concurrency is offered."""
        return len(self.answering) == len(self._threads)

    def __enter__(self):
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_):
        self._stop.set()
        for thread in self._threads:
            thread.join()


def test_triton_serves_accurately_batches_upgrades_without_failures_and_refuses_tampered_engines(
    api, operator, namespace, tmp_path
):
    model = copy.deepcopy(SAMPLE)
    model["metadata"] = {"name": NAME, "namespace": namespace}
    # One replica: local-0 has 2 CPUs, and a scaled-out Triton would leave no room for the upgrade's compile pod.
    model["spec"]["slo"] |= {"minReplicas": 1, "maxReplicas": 1}
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", model)
    wait_for(lambda: rolled_out(api, namespace), timeout=600, interval=3, what="compile, rollout and readiness")
    assert model_object(api, namespace)["status"]["phase"] == "Ready"

    # 1. Real requests, through the model's Service (its ClusterIP: kube-proxy routes it to the pod),
    # match the fp32 reference on the original ONNX.
    address = service_address(api, namespace, NAME)
    cluster_ip = client.CoreV1Api(api).read_namespaced_service(NAME, namespace).spec.cluster_ip
    assert address == f"{cluster_ip}:8001"
    (pod_ip,) = ready_endpoints(api, namespace, NAME)
    images = CLS.samples(8, seed=11)
    outputs = until_routed(lambda: infer_on(new_connection(address), NAME, {"x": images}))
    served = next(iter(outputs.values()))
    reference = ort.InferenceSession(str(CLS.path)).run(None, {"x": images})[0]
    assert np.max(np.abs(served - reference)) < 0.05
    assert (served.argmax(1) == reference.argmax(1)).all()
    # The same through `tensorkiln infer`, which sends it to the model's Service.
    np.save(tmp_path / "line.npy", images[0])
    lines = tensorkiln_infer.run(NAME, namespace, tmp_path / "line.npy", None, 2)
    best = int(reference[0].argmax())
    assert lines[0].startswith(f"{namespace}/{NAME} at {address}: ")
    assert lines[2].startswith(f"  class {best}: ")

    # 2. Under concurrent load the dynamic batcher forms batches.
    with Load(api, namespace, threads=8) as load:
        wait_for(lambda: load.ok >= 200, timeout=120, interval=0.5, what="200 requests")
    assert load.failed == 0, load.errors[:3]

    def slo_reported():
        model = model_object(api, namespace)
        flowing = condition(model, "SLOMetricsAvailable").get("status") == "True"
        return model if flowing and model["status"].get("sloSummary") else None

    reported = wait_for(slo_reported, timeout=60, interval=2, what="the SLO scaler's view from Prometheus")
    assert reported["status"]["targets"][0]["slo"]["latencySource"] in ("summary-p95", "mean", "idle")
    # The status says what the applied config.pbtxt sets, and who chose it (the compile tunes the batcher).
    (config_map,) = client.CoreV1Api(api).list_namespaced_config_map(namespace, label_selector=SERVING).items
    config = parse(config_map.data["config.pbtxt"])
    # Natively served, with the config production gets: the one renderer, given this engine and spec, on a
    # cluster with NGC's image (the chart's defaults) renders the text the local operator applied.
    assert config.platform == "onnxruntime_onnx" or config.backend == "openvino", config
    manifest = open_registry(operator.registry_uri).manifest(served_engine(api, namespace))
    production = render(config_dict(NAME, manifest, normalised_spec(model_object(api, namespace))["serving"]))
    assert config_map.data["config.pbtxt"] == production
    shown = reported["status"]["targets"][0]["serving"]
    assert shown["scheduler"] == "Dynamic" and shown["instances"] == config.instance_group[0].count
    assert shown["preferredBatchSizes"] == list(config.dynamic_batching.preferred_batch_size)
    assert shown["maxQueueDelayMicroseconds"] == config.dynamic_batching.max_queue_delay_microseconds
    assert shown["chosenBy"].startswith("compile: ")
    metrics = urllib.request.urlopen(f"http://{pod_ip}:8002/metrics", timeout=5).read().decode()
    assert counter(metrics, "nv_inference_exec_count") < counter(metrics, "nv_inference_count")

    # A deleted Triton pod is replaced by its Deployment, and the model is served through its Service again.
    core = client.CoreV1Api(api)
    (deleted,) = core.list_namespaced_pod(namespace, label_selector=SERVING).items
    core.delete_namespaced_pod(deleted.metadata.name, namespace)

    def replaced():
        pods = core.list_namespaced_pod(namespace, label_selector=SERVING).items
        fresh = [p for p in pods if p.metadata.name != deleted.metadata.name and p.status.pod_ip]
        return fresh and fresh[0].status.pod_ip in ready_endpoints(api, namespace, NAME)

    wait_for(replaced, timeout=180, interval=1, what="a replacement Triton pod ready behind the Service")
    outputs = until_routed(lambda: infer_on(new_connection(address), NAME, {"x": images}))
    served = next(iter(outputs.values()))
    assert (served.argmax(1) == reference.argmax(1)).all()

    # 3. A new engine (other precisions: another compile) rolls out under load with no failed request.
    before = served_engine(api, namespace)
    with Load(api, namespace) as load:
        patch = {"spec": {"compile": {"precisions": ["FP32"]}}}
        client.CustomObjectsApi(api).patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "inferencemodels", NAME, patch
        )
        wait_for(lambda: served_engine(api, namespace) != before, timeout=600, interval=2, what="the new engine")
        wait_for(lambda: rolled_out(api, namespace), timeout=300, interval=2, what="the upgrade to finish")
    assert load.ok > 0 and load.failed == 0, f"{load.failed} failed of {load.ok + load.failed}: {load.errors[:3]}"

    # 4. A tampered engine is refused by the init container; the running pod keeps serving.
    serving_digest = served_engine(api, namespace)
    registry = open_registry(operator.registry_uri)
    tampered = _publish_tampered_copy(api, registry, namespace, serving_digest, tmp_path)
    patch = {"spec": {"compile": {"precisions": ["FP32", "INT8"], "accuracy": {"maxAbsError": 0.049}}}}
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "inferencemodels", NAME, patch
    )

    def blocked():
        deployed = condition(model_object(api, namespace), "Deployed")
        return deployed if deployed.get("reason") == "RolloutBlocked" else None

    deployed = wait_for(blocked, timeout=180, interval=2, what="the rollout to be blocked")
    assert tampered["path"] in deployed["message"]
    assert condition(model_object(api, namespace), "Ready")["status"] == "True"
    infer_on(new_connection(address), NAME, {"x": images})  # still served by the old pod


def _publish_tampered_copy(api, registry, namespace, digest, tmp_path) -> dict:
    """Publish the serving engine again under the cache key of the spec patched in step 4, then
    flip a byte of one of its files in the registry: what the init container will fetch."""
    model = model_object(api, namespace)
    spec = copy.deepcopy(model["spec"])
    spec["compile"]["precisions"] = ["FP32", "INT8"]
    spec["compile"]["accuracy"]["maxAbsError"] = 0.049
    patched = {**model, "spec": spec}
    nodes = [api.sanitize_for_serialization(n) for n in client.CoreV1Api(api).list_node().items]
    (target,) = select_targets(normalised_spec(patched)["hardware"], discover(nodes), nodes)
    settings = Settings(registry_uri=registry.uri, serving_target=SERVING_TARGET)  # the installed operator's
    key_spec = build_compile_job(patched, normalised_spec(patched), target, settings)["spec"]
    files = tmp_path / "engine"
    manifest = registry.fetch(digest, files)
    manifest = manifest.model_copy(
        update={"key": manifest.key.model_copy(update={"options_hash": key_spec["optionsHash"]})}
    )
    new_digest = registry.publish(manifest, files)
    give_to_compiler(registry.root)  # written as root; compile pods publish beside it
    artifact = manifest.artifacts[0]
    stored = registry.root / "engines" / new_digest / "files" / artifact.path
    data = bytearray(stored.read_bytes())
    data[len(data) // 2] ^= 0xFF
    stored.write_bytes(bytes(data))
    return {"digest": new_digest, "path": artifact.path}
