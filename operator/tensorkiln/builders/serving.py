"""Serving objects per (InferenceModel, hardware target): Triton Deployment, its config, Services, PDB (pure)."""

import hashlib

from tensorkiln_api import Percentile
from tensorkiln_api.registry.manifest import EngineManifest

from tensorkiln.builders import labels, naming, resources, storage
from tensorkiln.builders.job import RESTRICTED_CONTAINER
from tensorkiln.builders.naming import bounded_name
from tensorkiln.builders.resources import GPU_RESOURCE
from tensorkiln.builders.tritonconfig import config_dict, parse, render
from tensorkiln.hardware.classes import HardwareClass
from tensorkiln.settings import Settings

ENGINE_DIGEST = "tensorkiln.dev/engine-digest"
CONFIG_DIGEST = "tensorkiln.dev/config-digest"
COMPONENT = {"app.kubernetes.io/component": "serving", "app.kubernetes.io/name": "triton"}
MODEL_REPOSITORY = "/models"
CONFIG_DIR = "/etc/tensorkiln/triton"
PORTS = (("http", 8000), ("grpc", 8001), ("metrics", 8002))
# How long a deleted Triton pod keeps serving before SIGTERM: kube-proxy syncs within a second or two.
ENDPOINT_REMOVAL_SECONDS = 5
# spec.serving.resources unset. Memory limited at the request (a replica never takes more of its node than
# the scheduler counted on; Triton with the serving image's backends peaked at 368 MB RSS serving the OCR
# detector with onnxruntime at up to 960x960 and with OpenVINO beside it); no CPU limit: a CFS quota throttles
# Triton's threads into latency spikes.
DEFAULT_RESOURCES = {
    "GPU": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"memory": "8Gi", GPU_RESOURCE: "1"}},
    "CPU": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
}
# engine-fetch streams each artifact to disk in 1 MiB chunks and hashes it from there (tensorkiln_api.registry
# base.Registry.fetch), so its memory does not grow with the engine: 38 MB peak RSS fetching a 600 MiB engine
# from a file:// registry, 52 MB with the S3 and OCI clients imported. The limit leaves room for the page cache
# its writes are charged with; no CPU limit, as Triton's (hashing a large engine may use a whole core).
ENGINE_FETCH_RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}
# The model repository holds the engine twice while a restarted pod's engine-fetch stages a new copy beside
# the old one (enginefetch.lay_out), plus config.pbtxt and the python backend's runner.
MODEL_REPOSITORY_HEADROOM_BYTES = 256 << 20
MODEL_REPOSITORY_MIN_BYTES = 1 << 30
# Triton's /tmp: the python backend's (empty) python_env_* directories; nothing else writes there.
TMP_SIZE_LIMIT = "256Mi"


def triton_resources(requested: dict | None, target: HardwareClass) -> dict:
    """spec.serving.resources, else the class kind's defaults, with the GPU of a GPU class, and the cpu and
    memory requests and memory limit every container gets (resources.bounded)."""
    return resources.bounded(resources.for_class(requested, DEFAULT_RESOURCES, target), DEFAULT_RESOURCES[target.kind])


def engine_size(manifest: EngineManifest) -> int:
    """Bytes the engine's artifacts take on disk."""
    return sum(artifact.size for artifact in manifest.artifacts)


def model_repository_size_limit(engine_bytes: int | None, settings: Settings) -> str:
    """The sizeLimit of the Triton pod's model repository emptyDir: twice the engine with some headroom, at
    least 1 GiB; settings.model_repository_size_limit where the engine's size is not known."""
    if engine_bytes is None:
        return resources.mebibytes(settings.model_repository_size_limit)
    return resources.mebibytes(max(2 * engine_bytes + MODEL_REPOSITORY_HEADROOM_BYTES, MODEL_REPOSITORY_MIN_BYTES))


def target_name(model_name: str, target: HardwareClass) -> str:
    """Deployment, per-target Service, ConfigMap, PDB and HPA name (builders.naming's scheme)."""
    return naming.target_name(model_name, target.name)


def selector(model: dict, target: HardwareClass | None = None) -> dict[str, str]:
    chosen = {labels.MODEL: bounded_name(model["metadata"]["name"], max_length=63), **COMPONENT}
    if target is not None:
        chosen[labels.HARDWARE_CLASS] = target.name
    return chosen


def _meta(model: dict, name: str, extra_labels: dict) -> dict:
    return {
        "name": name,
        "namespace": model["metadata"]["namespace"],
        "labels": {**extra_labels, **labels.MANAGED_BY},
        "ownerReferences": [labels.owner_reference(model, "InferenceModel")],
    }


def triton_model_name(model: dict) -> str:
    return model["metadata"]["name"]


def build_config_map(model: dict, spec: dict, target: HardwareClass, manifest: EngineManifest) -> dict:
    return config_map_of(model, target, config_dict(triton_model_name(model), manifest, spec["serving"]))


def config_map_of(model: dict, target: HardwareClass, config: dict) -> dict:
    """The ConfigMap holding `config` (tritonconfig.config_dict) as config.pbtxt."""
    text = render(config)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(model, target_name(model["metadata"]["name"], target), selector(model, target)),
        "data": {"config.pbtxt": text},
    }


def _probe(path: str, period: int, failures: int) -> dict:
    return {"httpGet": {"path": path, "port": "http"}, "periodSeconds": period, "failureThreshold": failures}


def build_deployment(
    model: dict,
    spec: dict,
    target: HardwareClass,
    engine_digest: str,
    config_map: dict,
    replicas: int | None,
    settings: Settings,
    *,
    engine_bytes: int | None = None,
) -> dict:
    """Triton for one target. The engine digest and config digest annotate the pod template, so a
    new engine or config rolls the pods (maxUnavailable 0: capacity never drops) and nothing else does.
    `engine_bytes` (engine_size of its manifest) sizes the model repository; None: the settings' size."""
    name = target_name(model["metadata"]["name"], target)
    pod_labels = selector(model, target)
    registry = storage.registry(settings.registry_uri)
    # engine-fetch only reads: the pull Secret, never the push one.
    credentials = storage.registry_credentials(
        settings.registry_uri, settings.registry_pull_secret, insecure=settings.oci_insecure
    )
    config_digest = hashlib.sha256(config_map["data"]["config.pbtxt"].encode()).hexdigest()[:16]
    fetch_args = [
        "--registry", registry.uri,
        "--digest", engine_digest,
        "--model-name", triton_model_name(model),
        "--config", f"{CONFIG_DIR}/config.pbtxt",
        "--repository", MODEL_REPOSITORY,
        "--termination-log", "/dev/termination-log",
    ]  # fmt: skip
    if parse(config_map["data"]["config.pbtxt"]).backend == "python":  # the simulation (tritonconfig.PYTHON_SERVED)
        fetch_args.append("--python-backend")
    engine_fetch = {
        "name": "engine-fetch",
        "image": settings.engine_fetch_image,  # its own image: a new compiler rolls no Triton pod
        "command": ["tensorkiln-engine-fetch"],
        "args": fetch_args,
        "resources": ENGINE_FETCH_RESOURCES,
        "securityContext": RESTRICTED_CONTAINER,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": "models", "mountPath": MODEL_REPOSITORY},
            {"name": "triton-config", "mountPath": CONFIG_DIR, "readOnly": True},
            *[{**m, "readOnly": True} for m in registry.mounts],
            *credentials.mounts,
        ],
    }
    if credentials.env:
        engine_fetch["env"] = credentials.env
    if settings.registry_secret:
        engine_fetch["envFrom"] = [{"secretRef": {"name": settings.registry_secret}}]
    triton = {
        "name": "triton",
        "image": spec["serving"].get("image") or settings.serving_image,
        "command": ["tritonserver"],
        "args": [
            f"--model-repository={MODEL_REPOSITORY}",
            "--model-control-mode=none",
            "--strict-readiness=true",
            "--allow-metrics=true",
            "--metrics-config=summary_latencies=true",
            "--http-port=8000",
            "--grpc-port=8001",
            "--metrics-port=8002",
        ],
        "ports": [{"name": port_name, "containerPort": port} for port_name, port in PORTS],
        # Triton writes no termination message: its log's tail says why it exited (status.pods.why).
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "readinessProbe": _probe("/v2/health/ready", 5, 3),
        "livenessProbe": _probe("/v2/health/live", 10, 3),
        # Loading a large engine can take minutes (10 at most); liveness waits for this to pass first. Probed
        # each second, as Knative probes new pods eagerly: a scale-up's pods take load within a second of being
        # ready (bench_cost's step: 2-3 s from asked to ready on the local node, 6 s with a 5 s period).
        "startupProbe": _probe("/v2/health/ready", 1, 600),
        # A deleted pod keeps serving until kube-proxies and clients have seen it leave the Service's
        # endpoints (they learn it asynchronously); only then does Triton get SIGTERM and drain.
        "lifecycle": {"preStop": {"sleep": {"seconds": ENDPOINT_REMOVAL_SECONDS}}},
        "resources": triton_resources(spec["serving"].get("resources"), target),
        "securityContext": RESTRICTED_CONTAINER,
        # The root filesystem is read-only; Triton's python backend makes its stubs' directories in /tmp.
        "volumeMounts": [
            {"name": "models", "mountPath": MODEL_REPOSITORY, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    pod_spec = {
        "nodeSelector": dict(target.node_selector),
        "tolerations": list(target.tolerations),
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "initContainers": [engine_fetch],
        "containers": [triton],
        **(
            {"imagePullSecrets": [{"name": name} for name in settings.image_pull_secrets]}
            if settings.image_pull_secrets
            else {}
        ),
        # The target's replicas spread over its pool's nodes, each rollout's ReplicaSet on its own
        # (pod-template-hash): a preference, as a hard constraint would leave replicas Pending on a one-node pool.
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": pod_labels},
                "matchLabelKeys": ["pod-template-hash"],
            }
        ],
        "volumes": [
            {"name": "models", "emptyDir": {"sizeLimit": model_repository_size_limit(engine_bytes, settings)}},
            {"name": "tmp", "emptyDir": {"sizeLimit": TMP_SIZE_LIMIT}},
            {"name": "triton-config", "configMap": {"name": config_map["metadata"]["name"]}},
            *registry.volumes,
            *credentials.volumes,
        ],
    }
    if target.node_affinity():
        pod_spec["affinity"] = {"nodeAffinity": target.node_affinity()}
    deployment_spec = {} if replicas is None else {"replicas": replicas}  # None: an autoscaler owns them
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(model, name, pod_labels),
        "spec": {
            **deployment_spec,
            "selector": {"matchLabels": pod_labels},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 0, "maxSurge": spec["rollout"]["maxSurge"]},
            },
            "template": {
                "metadata": {
                    "labels": pod_labels,
                    "annotations": {
                        ENGINE_DIGEST: engine_digest,
                        CONFIG_DIGEST: config_digest,
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": "8002",
                        "prometheus.io/path": "/metrics",
                    },
                },
                "spec": pod_spec,
            },
        },
    }


def _service(model: dict, name: str, service_labels: dict, pod_selector: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(model, name, service_labels),
        "spec": {
            "selector": pod_selector,
            "ports": [{"name": n, "port": p, "targetPort": n, "protocol": "TCP"} for n, p in PORTS],
        },
    }


def build_model_service(model: dict) -> dict:
    """One endpoint for the model across every hardware target."""
    return _service(model, model["metadata"]["name"], selector(model), selector(model))


def build_target_service(model: dict, target: HardwareClass) -> dict:
    """Per-hardware access, and what Prometheus scrapes per target."""
    return _service(model, target_name(model["metadata"]["name"], target), selector(model, target),
                    selector(model, target))  # fmt: skip


def build_pdb(model: dict, target: HardwareClass, replicas: int) -> dict | None:
    """Voluntary disruptions take at most one replica, once there are two to spare one."""
    if replicas < 2:
        return None
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(model, target_name(model["metadata"]["name"], target), selector(model, target)),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector(model, target)}},
    }


# The External metric prometheus-adapter serves for HPA mode (docs/scaling.md).
LATENCY_METRIC = "tensorkiln_triton_latency_milliseconds"


def build_hpa(model: dict, spec: dict, target: HardwareClass) -> dict | None:
    """spec.slo.mode HPA: an autoscaling/v2 HPA on the target's latency, for clusters with prometheus-adapter."""
    slo = spec.get("slo")
    if not slo or slo["mode"] != "HPA":
        return None
    name = target_name(model["metadata"]["name"], target)
    # Labels of Triton's own summary series, as prometheus-adapter passes them through (docs/scaling.md).
    metric_labels = {
        "model": model["metadata"]["name"],
        "hardware_class": target.name,
        "quantile": Percentile(slo["percentile"]).quantile,
    }
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _meta(model, name, selector(model, target)),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": max(slo["minReplicas"], 1),
            "maxReplicas": max(slo["maxReplicas"], slo["minReplicas"], 1),
            "metrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {"name": LATENCY_METRIC, "selector": {"matchLabels": metric_labels}},
                        "target": {"type": "Value", "value": f"{slo['targetMilliseconds']:g}"},
                    },
                }
            ],
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": slo["scaleUpStabilizationSeconds"]},
                "scaleDown": {"stabilizationWindowSeconds": slo["scaleDownStabilizationSeconds"]},
            },
        },
    }
