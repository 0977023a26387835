"""Operator settings, read once from the environment (the Helm chart sets them)."""

import os
import re
from dataclasses import dataclass, field

from tensorkiln_api import __version__ as COMPILER_VERSION
from tensorkiln_api.common import QUANTITY_PATTERN, quantity_value


@dataclass(frozen=True)
class Settings:
    # Where compile jobs publish engines; a PVC-backed path in a real cluster.
    registry_uri: str = "file:///var/lib/tensorkiln/registry"
    # The image of compile Jobs on CPU classes (compiler-jobs/Dockerfile).
    compiler_image: str = f"ghcr.io/tensorkiln/compiler:{COMPILER_VERSION}"
    # The image of Triton pods' engine-fetch init container (serving/engine-fetch.Dockerfile): its own, whose tag
    # changes only with its code, so a new compiler image or version leaves every Triton pod template as it was.
    engine_fetch_image: str = f"ghcr.io/tensorkiln/engine-fetch:{COMPILER_VERSION}"
    # The image of compile Jobs on GPU classes: the compiler with TensorRT (compiler-jobs/Dockerfile, VARIANT=gpu).
    compiler_gpu_image: str = f"ghcr.io/tensorkiln/compiler-gpu:{COMPILER_VERSION}"
    # The build of the compiler images, part of the registry cache key (CompileJob spec.compilerVersion): a new
    # version rebuilds every engine. The release's, or `<release>+<build>` for a development build.
    compiler_version: str = COMPILER_VERSION
    # Secret (in each model's namespace) whose keys compile pods get as env: S3 credentials.
    registry_secret: str | None = None
    # An oci:// registry's credentials: kubernetes.io/dockerconfigjson Secrets in each model's namespace,
    # mounted read-only as $DOCKER_CONFIG/config.json (builders.storage.registry_credentials). The push
    # Secret goes to compile pods (they publish), the pull Secret to Triton pods' engine-fetch (they read).
    registry_push_secret: str | None = None
    registry_pull_secret: str | None = None
    # A cached engine that another namespace's compile published is reused at once only with this: without
    # it, the CompileJob runs its compile pod, which fetches the source with this namespace's credentials,
    # checks its digest and then finds the engine (a few seconds, no compile). Otherwise a namespace that
    # names another team's source URI and digest would get that team's engine without reading the model.
    share_engines: bool = False
    # Plain HTTP to an oci:// registry not on loopback (TENSORKILN_OCI_INSECURE, which the operator's own
    # registry client reads too): compile and engine-fetch containers get it as well.
    oci_insecure: bool = False
    # Secrets (in each model's namespace) the kubelet pulls the compiler, engine-fetch and serving images with,
    # when their registry is private: the compile and Triton pods' imagePullSecrets.
    image_pull_secrets: tuple[str, ...] = ()
    # The Triton image of models whose spec.serving.image is unset (the chart's servingImage).
    serving_image: str = "nvcr.io/nvidia/tritonserver:25.10-py3"
    # The Triton release of serving_image (api.serving_targets): compiles use only its runtime versions.
    # None: unchecked.
    serving_target: str | None = None
    # sizeLimits of the emptyDirs of the pods the operator runs (quantities: 16Gi; the kubelet evicts a pod
    # whose volume outgrows its limit). The Triton pod's model repository, where the engine's size is not
    # known (builders.serving sizes it from the engine where it is): an engine up to about 8 GiB, held twice
    # while a restarted pod's engine-fetch stages a new copy.
    model_repository_size_limit: str = "16Gi"
    # A compile pod's work dir: the model, its calibration data, one candidate per compiler and precision and
    # the staged engine, about ten times the model: room for a 3 GiB one (a single-file ONNX model is under
    # 2 GiB). Nothing tells the operator the model's size before the compile fetches it, so this is fixed.
    compile_work_size_limit: str = "32Gi"
    # A compile pod's /tmp ($HOME, Python's tempdir): OpenVINO's and NNCF's caches, and onnxruntime's INT8
    # calibration (quant_pre_process, quantize_static), which writes copies of the model there.
    compile_tmp_size_limit: str = "8Gi"
    # Prometheus scraping the Triton pods; without it the SLO scaler holds replicas and says why.
    prometheus_url: str | None = None
    # How often every InferenceModel and CompileJob is reconciled again whatever the watches said:
    # new node pools are picked up then. Every change to an owned object already queues its model
    # (controllers.handlers.cached_event), so this is a safety net, and each pass costs a reconcile
    # per object (about 0.6 of a core for 10 s at 1000 models).
    resync_seconds: float = 60.0
    # How often the SLO scaler evaluates each model with spec.slo.mode Operator (its own schedule,
    # whatever else makes the model reconcile).
    slo_period_seconds: float = 10.0
    # The short rate window the SLO scaler also reads the request rate over (the larger of it and the
    # 30 s one counts, as Knative's panic window does), so a load step is sized for, and under LeastCost
    # placed, within seconds; at least two Prometheus scrape intervals, or it reads nothing and the
    # 30 s window alone counts.
    slo_recent_rate_window: str = "10s"
    # Compile Jobs for targets that already serve an engine (a new compiler version or a spec change recompiles
    # every served model) running at once; the others wait, their engines serving meanwhile. 0: no bound.
    max_concurrent_recompiles: int = 2
    # Reconciles running at once (threads taking objects from the work queue).
    reconcile_workers: int = 4
    # Port of the operator's Prometheus /metrics (0: not served).
    metrics_port: int = 9090
    # Port of kopf's health endpoint /healthz, for liveness and readiness probes (0: not served).
    health_port: int = 8080
    # Where /metrics and /healthz listen: every interface in a pod (behind its Service and probes),
    # loopback when run as a process of a developer's machine.
    listen_address: str = "0.0.0.0"
    # json: one JSON object per line with the object's namespace and name (in-cluster default);
    # full: kopf's human-readable lines ([namespace/name] prefixed); plain: the message only.
    log_format: str = "json"
    # Directories file:// model sources may name (the compile pod mounts the file's directory from
    # the node): TENSORKILN_MODEL_FILE_ROOTS, colon-separated; set and empty refuses file://. Unset:
    # none in a pod (a real cluster: the chart sets it empty), the local cluster's staging
    # directory (/var/lib/tensorkiln/models) when run outside one, as the tests and the demo do.
    model_file_roots: tuple[str, ...] = field(default_factory=tuple)
    # Admission webhook (tensorkiln.admission): HTTPS port, 0 = not served.
    webhook_port: int = 0
    # Where the webhook listens (the chart: every interface, behind its Service).
    webhook_address: str = "0.0.0.0"
    # tls.crt and tls.key from cert-manager or the operator-filled Secret, mounted by the chart.
    webhook_cert_dir: str = "/etc/tensorkiln/webhook"
    # No cert-manager: the operator keeps a self-signed certificate in this Secret (namespace
    # POD_NAMESPACE), for the DNS name of this Service, and writes its CA into the caBundle of this
    # ValidatingWebhookConfiguration (the chart's).
    webhook_cert_secret: str | None = None
    webhook_service: str | None = None
    webhook_configuration: str | None = None
    pod_namespace: str | None = None
    # Lifetime of that certificate, and how long before its expiry the running operator renews it
    # (durations as cert-manager writes them: 8760h, 90s).
    webhook_cert_duration: str = "8760h"
    webhook_cert_renew_before: str = "720h"
    # The local cluster: the operator itself creates this ValidatingWebhookConfiguration, pointed at
    # https://127.0.0.1:<port> with a self-signed CA, failurePolicy Ignore, and deletes it on exit.
    webhook_managed: str | None = None

    @classmethod
    def from_env(cls) -> "Settings":
        return cls(
            registry_uri=os.environ.get("TENSORKILN_REGISTRY_URI", cls.registry_uri),
            compiler_image=os.environ.get("TENSORKILN_COMPILER_IMAGE", cls.compiler_image),
            engine_fetch_image=os.environ.get("TENSORKILN_ENGINE_FETCH_IMAGE") or cls.engine_fetch_image,
            compiler_gpu_image=os.environ.get("TENSORKILN_COMPILER_GPU_IMAGE") or cls.compiler_gpu_image,
            compiler_version=os.environ.get("TENSORKILN_COMPILER_VERSION") or cls.compiler_version,
            registry_secret=os.environ.get("TENSORKILN_REGISTRY_SECRET") or None,
            registry_push_secret=os.environ.get("TENSORKILN_REGISTRY_PUSH_SECRET") or None,
            registry_pull_secret=os.environ.get("TENSORKILN_REGISTRY_PULL_SECRET") or None,
            oci_insecure=os.environ.get("TENSORKILN_OCI_INSECURE", "").lower() in ("1", "true", "yes"),
            share_engines=os.environ.get("TENSORKILN_SHARE_ENGINES", "").lower() in ("1", "true", "yes"),
            image_pull_secrets=tuple(
                name for name in os.environ.get("TENSORKILN_IMAGE_PULL_SECRETS", "").split(",") if name.strip()
            ),
            serving_image=os.environ.get("TENSORKILN_SERVING_IMAGE") or cls.serving_image,
            serving_target=os.environ.get("TENSORKILN_SERVING_TARGET") or None,
            model_repository_size_limit=_size(
                "TENSORKILN_MODEL_REPOSITORY_SIZE_LIMIT", cls.model_repository_size_limit
            ),
            compile_work_size_limit=_size("TENSORKILN_COMPILE_WORK_SIZE_LIMIT", cls.compile_work_size_limit),
            compile_tmp_size_limit=_size("TENSORKILN_COMPILE_TMP_SIZE_LIMIT", cls.compile_tmp_size_limit),
            prometheus_url=os.environ.get("TENSORKILN_PROMETHEUS_URL") or None,
            resync_seconds=float(os.environ.get("TENSORKILN_RESYNC_SECONDS") or cls.resync_seconds),
            slo_period_seconds=float(os.environ.get("TENSORKILN_SLO_PERIOD_SECONDS") or cls.slo_period_seconds),
            slo_recent_rate_window=os.environ.get("TENSORKILN_SLO_RECENT_RATE_WINDOW") or cls.slo_recent_rate_window,
            reconcile_workers=int(os.environ.get("TENSORKILN_RECONCILE_WORKERS") or cls.reconcile_workers),
            max_concurrent_recompiles=int(
                os.environ.get("TENSORKILN_MAX_CONCURRENT_RECOMPILES") or cls.max_concurrent_recompiles
            ),
            metrics_port=int(os.environ.get("TENSORKILN_METRICS_PORT", cls.metrics_port)),
            health_port=int(os.environ.get("TENSORKILN_HEALTH_PORT", cls.health_port)),
            listen_address=os.environ.get("TENSORKILN_LISTEN_ADDRESS") or cls.listen_address,
            log_format=os.environ.get("TENSORKILN_LOG_FORMAT", cls.log_format).lower(),
            model_file_roots=_model_file_roots(),
            webhook_port=int(os.environ.get("TENSORKILN_WEBHOOK_PORT") or 0),
            webhook_address=os.environ.get("TENSORKILN_WEBHOOK_ADDRESS") or cls.webhook_address,
            webhook_cert_dir=os.environ.get("TENSORKILN_WEBHOOK_CERT_DIR") or cls.webhook_cert_dir,
            webhook_cert_secret=os.environ.get("TENSORKILN_WEBHOOK_CERT_SECRET") or None,
            webhook_service=os.environ.get("TENSORKILN_WEBHOOK_SERVICE") or None,
            webhook_configuration=os.environ.get("TENSORKILN_WEBHOOK_CONFIGURATION") or None,
            pod_namespace=os.environ.get("POD_NAMESPACE") or None,
            webhook_cert_duration=os.environ.get("TENSORKILN_WEBHOOK_CERT_DURATION") or cls.webhook_cert_duration,
            webhook_cert_renew_before=os.environ.get("TENSORKILN_WEBHOOK_CERT_RENEW_BEFORE")
            or cls.webhook_cert_renew_before,
            webhook_managed=os.environ.get("TENSORKILN_WEBHOOK_MANAGED") or None,
        )


# The local cluster's staging directory (tensorkiln_local.cluster.paths.SAMPLE_MODELS), without importing it.
LOCAL_MODEL_ROOT = os.path.join(os.environ.get("TENSORKILN_LOCAL_DATA", "/var/lib/tensorkiln"), "models")


def _size(name: str, default: str) -> str:
    """A size setting: a positive Kubernetes quantity (20Gi), refused at start rather than by the API server
    at each pod the operator makes with it."""
    value = os.environ.get(name) or default
    if not re.fullmatch(QUANTITY_PATTERN, value) or quantity_value(value) <= 0:
        raise ValueError(f"{name}={value!r} is not a size such as 20Gi")
    return value


def _model_file_roots() -> tuple[str, ...]:
    value = os.environ.get("TENSORKILN_MODEL_FILE_ROOTS")
    if value is None:
        return () if os.environ.get("KUBERNETES_SERVICE_HOST") else (LOCAL_MODEL_ROOT,)
    return tuple(root for root in value.split(":") if root)
