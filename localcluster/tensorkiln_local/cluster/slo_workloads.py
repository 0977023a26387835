"""The two step-load workloads that show SLO scaling on the local node (tests/integration/
test_slo_scaling.py, e2e/bench_slo.py).

local-0 has 2 CPUs, so the cluster's real capacity is small; each workload makes the capacity of
one replica the bottleneck:
- `SIMULATED`: a SIMULATION of a GPU-bound engine: the rapidocr classifier's interface served by
  a fixed-service-time engine (origin "simulation", see engine_seeds) that computes nothing, so
  2 CPUs can hold 8 replicas and the scaler can be seen going to 6 and more;
- `DETECTOR`: a real model, PP-OCR's text detector at 480x480, compiled on local-0 (OpenVINO FP32
  only, for a short compile), one instance per pod. Its speed is the machine's, so its load and
  its target are not constants: `prepare` first measures what one replica sustains at the SLO
  target, raised to twice the latency of its lightest load where that is higher
  (serving.capacity), then runs the low phases at 0.5x and the step at 1.6x of that rate, so one
  replica must miss and two could meet it, on a quiet machine or a busy one.
"""

import copy
import dataclasses
import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from kubernetes import client
from tensorkiln.builders.labels import HARDWARE_CLASS
from tensorkiln.builders.serving import target_name
from tensorkiln.hardware.classes import HardwareClass, discover
from tensorkiln.hardware.selection import select_targets
from tensorkiln.scaling.metrics import connect, observe
from tensorkiln_api import GROUP, VERSION
from tensorkiln_api.registry.manifest import TensorInfo

from tensorkiln_local.cluster import paths, prometheus
from tensorkiln_local.cluster.engine_seeds import publish_simulation
from tensorkiln_local.cluster.ocr_models import CLS, DET, OcrModel
from tensorkiln_local.load import capacity
from tensorkiln_local.load.loadgen import Phase

STAGED = paths.SAMPLE_MODELS / "rapidocr"  # where `tensorkiln-local cluster up` stages the models


@dataclass(frozen=True)
class Workload:
    name: str  # the InferenceModel's name
    model: OcrModel
    spec: dict
    # low, high, low: requests per second, or, with `calibrated`, multiples of the rate one
    # replica was measured to sustain at the SLO target (as calibrated: Prepared.workload)
    phases: tuple[Phase, ...]
    simulated_service_ms: float | None = None  # a simulation: publish its engine before applying
    calibrated: bool = False

    @property
    def slo(self) -> dict:
        return self.spec["slo"]

    def manifest(self, namespace: str, mode: str = "Operator") -> dict:
        spec = copy.deepcopy(self.spec)
        spec["slo"]["mode"] = mode
        return {
            "apiVersion": "tensorkiln.dev/v1alpha1",
            "kind": "InferenceModel",
            "metadata": {"name": self.name, "namespace": namespace},
            "spec": spec,
        }

    def inputs(self) -> dict[str, np.ndarray]:
        return {"x": self.model.samples(1)}

    def tensors(self) -> tuple[list[TensorInfo], list[TensorInfo]]:
        """The classifier's input and output, for the simulated engine's manifest."""
        x = TensorInfo(name="x", data_type="FP32", dims=[-1, 3, self.model.height, self.model.width])
        return [x], [TensorInfo(name="save_infer_model/scale_0.tmp_1", data_type="FP32", dims=[-1, 2])]


def _source(model: OcrModel) -> dict:
    path = STAGED / model.path.name
    return {"uri": f"file://{path}", "sha256": hashlib.sha256(model.path.read_bytes()).hexdigest()}


CPU_ONLY = {"mode": "Auto", "includeCPU": True, "exclude": ["*"]}  # local-0's CPU pool, no simulated GPUs

SIMULATED = Workload(
    name="simulated-gpu-engine",
    model=CLS,
    spec={
        "source": _source(CLS),
        "shapes": CLS.shapes(8),
        "hardware": CPU_ONLY,
        "compile": {"precisions": ["FP32"]},
        "serving": {
            "maxBatchSize": 8,
            "dynamicBatching": {"enabled": False},  # one request per execution: 20 requests/s per replica
            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},  # it sleeps: room for 8 on local-0
        },
        "slo": {
            "percentile": "p95",
            "targetMilliseconds": 200,
            "minReplicas": 2,
            "maxReplicas": 8,
            "scaleDownStabilizationSeconds": 20,
        },
    },
    phases=(Phase("low", 15, 60), Phase("high", 60, 150), Phase("low-again", 15, 150)),
    simulated_service_ms=50,
)

_DET_480 = dataclasses.replace(DET, height=480, width=480)  # about 43 ms per image on one thread here

DETECTOR = Workload(
    name="ocr-det",
    model=_DET_480,
    spec={
        "source": _source(DET),
        "shapes": _DET_480.shapes(1),
        "hardware": CPU_ONLY,
        "compile": {
            "precisions": ["FP32"],
            "compilers": {"cpu": ["OpenVINO"]},
            "objective": {"metric": "LatencyP95", "batchSize": 1},
        },
        "serving": {"maxBatchSize": 1, "dynamicBatching": {"enabled": False}},
        "slo": {
            "percentile": "p95",
            "targetMilliseconds": 200,
            "minReplicas": 1,
            "maxReplicas": 2,  # local-0's 2 CPUs
            "scaleDownStabilizationSeconds": 20,
        },
    },
    # Multiples of one replica's measured capacity at 200 ms: at 1.6x one replica must miss,
    # while two, at 0.8x each, could meet it if the clients and the cluster leave them the CPUs.
    phases=(Phase("low", 0.5, 45), Phase("high", 1.6, 180), Phase("low-again", 0.5, 120)),
    calibrated=True,
)


@dataclass(frozen=True)
class Prepared:
    workload: Workload  # as served: a calibrated workload with the SLO target its capacity was measured at
    deployment: str  # the target's Deployment
    phases: list[Phase]  # in requests per second
    capacity: capacity.Capacity | None  # measured in this run, for a calibrated workload


def start(
    api: client.ApiClient, registry_uri: str, namespace: str, workload: Workload, work_dir: Path, mode: str = "Operator"
) -> HardwareClass:
    """Apply the workload's InferenceModel, publishing its simulated engine first (if it is one) to
    the registry the operator uses; returns its one target."""
    model = workload.manifest(namespace, mode)
    nodes = [api.sanitize_for_serialization(n) for n in client.CoreV1Api(api).list_node().items]
    (target,) = select_targets(model["spec"]["hardware"], discover(nodes), nodes)
    if workload.simulated_service_ms is not None:
        inputs, outputs = workload.tensors()
        publish_simulation(registry_uri, model, target, work_dir, workload.simulated_service_ms, inputs, outputs)
    client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", model)
    return target


def deploy(
    api: client.ApiClient,
    registry_uri: str,
    namespace: str,
    workload: Workload,
    work_dir: Path,
    ready_within: float,
    mode: str = "Operator",
) -> str:
    """Apply the workload's InferenceModel (`start`) and wait until it serves; returns its Deployment's name."""
    target = start(api, registry_uri, namespace, workload, work_dir, mode)
    custom = client.CustomObjectsApi(api)
    deadline = time.monotonic() + ready_within
    while time.monotonic() < deadline:
        found = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", workload.name)
        if found.get("status", {}).get("phase") == "Ready":
            return target_name(workload.name, target)
        time.sleep(2)
    raise TimeoutError(f"{namespace}/{workload.name} not Ready within {ready_within:g} s")


def prepare(
    api: client.ApiClient,
    registry_uri: str,
    namespace: str,
    workload: Workload,
    work_dir: Path,
    ready_within: float,
    mode: str = "Operator",
    measured: capacity.Capacity | None = None,
) -> Prepared:
    """Deploy the workload and size its load. A calibrated workload is first served with its
    maximum held at one replica while `capacity.measure` ramps a load on it (or takes `measured`,
    to give a second run the same load); then, once Triton's latency window has forgotten the
    ramp, the maximum is set back, so the scaler never acts on the ramp, and the target is the one
    the capacity was measured at."""
    if not workload.calibrated:
        deployment = deploy(api, registry_uri, namespace, workload, work_dir, ready_within, mode)
        return Prepared(workload, deployment, [*workload.phases], None)
    slo = workload.slo
    held = dataclasses.replace(workload, spec={**workload.spec, "slo": {**slo, "maxReplicas": slo["minReplicas"]}})
    deployment = deploy(api, registry_uri, namespace, held, work_dir, ready_within, mode)
    if measured is None:
        latency = triton_latency(api, namespace, deployment, workload)
        measured = capacity.measure(
            api, namespace, workload.name, workload.name, workload.inputs(), slo["targetMilliseconds"], latency
        )
        _wait_until_forgotten(latency, 240)
    patch = {"spec": {"slo": {"maxReplicas": slo["maxReplicas"], "targetMilliseconds": measured.target_ms}}}
    custom = client.CustomObjectsApi(api)
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", workload.name, patch)
    phases = [dataclasses.replace(p, rate=p.rate * measured.rate) for p in workload.phases]
    served = dataclasses.replace(workload, spec={**workload.spec, "slo": {**slo, **patch["spec"]["slo"]}})
    return Prepared(served, deployment, phases, measured)


def _wait_until_forgotten(latency, within: float) -> None:
    """Until Triton's summary holds no request (about a minute after the last one)."""
    deadline = time.monotonic() + within
    while latency() is not None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"Triton's latency window still held requests {within:g} s after the ramp")
        time.sleep(2)


def triton_latency(api: client.ApiClient, namespace: str, deployment: str, workload: Workload):
    """A reader of what the scaler reads for the Deployment's target: its latency at the SLO's
    percentile, from Triton's metrics in the local Prometheus (None: no request in the window)."""
    labels = client.AppsV1Api(api).read_namespaced_deployment(deployment, namespace).spec.template.metadata.labels
    prom, hardware_class = connect(prometheus.url()), labels[HARDWARE_CLASS]

    def read() -> float | None:
        seen = observe(prom, namespace, workload.name, hardware_class, workload.slo["percentile"])
        return None if seen is None else seen.latency_ms

    return read
