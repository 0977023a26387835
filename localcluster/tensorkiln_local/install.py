"""`tensorkiln-local install` (`make demo`): TensorKiln installed on the local cluster the way a
user installs it: its images and its chart (an OCI artifact, chart_oci.py) pushed to a registry, the
chart installed from there with `helm upgrade --install oci://localhost:5000/charts/tensorkiln@sha256:...
--version <chart version>`, values pinning each image by digest.

What a user's cluster provides and the local cluster lacks is set up here, as its administrator
would, each named for what it stands in for:

- the engine registry (KINDS of cluster/engine_registry.py): by default (`oci`, `make demo`) an OCI registry, the
  cluster's own distribution registry at local-0's gateway (cluster/engine_registry.py; a real
  cluster: ECR, GHCR, Harbor), which no model namespace needs anything for; or (`pvc`, the
  integration tests, which also reach into the engines' files) a ReadWriteMany claim
  `tensorkiln-registry` in the release's namespace and in every namespace with InferenceModels, each
  bound to a hostPath PersistentVolume on one directory of this machine (a real cluster: NFS, a CSI
  file share). hostPath volumes get no fsGroup ownership from the kubelet, so the directory is made
  the compiler's (uid and gid 65532, group-writable), as an NFS export would be for the pods that
  write it;
- a model store: a Deployment serving the staged sample models over HTTP inside the cluster (a
  real cluster: an object store or a web server), so samples name an http:// source, never a
  host path;
- Prometheus: Debian's, a process of this machine (prometheus.py), named in the cluster by the
  Service `prometheus` (an EndpointSlice on the node address it listens on);
- cert-manager, which issues the chart's webhook certificate (certmanager.py).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import tempfile
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID
from kubernetes import client
from kubernetes.dynamic import DynamicClient
from tensorkiln import kube
from tensorkiln.builders.job import COMPILER_UID
from tensorkiln_api import __version__
from tensorkiln_api.registry.locations import PVC_ROOT_ENV

from tensorkiln_local import chart_oci, installmanifests
from tensorkiln_local.cluster import (
    certmanager,
    cluster,
    connection,
    nodes,
    paths,
    processes,
    profiles,
    prometheus,
    registry,
    workloads,
)
from tensorkiln_local.cluster import (
    engine_registry as engine_registries,
)
from tensorkiln_local.images import build as images
from tensorkiln_local.images.catalog import LOCAL_PRODUCT, SERVING_TARGET

RELEASE = installmanifests.RELEASE
NAMESPACE = installmanifests.NAMESPACE
LOCAL_NAMESPACE = "tensorkiln-local"  # what stands in for a user's cluster services
CLAIM = "tensorkiln-registry"
REGISTRY_VOLUME = paths.LOCAL_DATA / "registry-volume"
# What a process of this machine (root) makes in the registry volume stays writable for the compiler's group.
REGISTRY_UMASK = 0o002
MODEL_STORE = "model-store"
MODEL_STORE_PORT = 8080
MODEL_STORE_URL = f"http://{MODEL_STORE}.{LOCAL_NAMESPACE}.svc.cluster.local"
PROMETHEUS_SERVICE_URL = f"http://prometheus.{LOCAL_NAMESPACE}.svc.cluster.local:{prometheus.PORT}"
# The images' tag: the chart's appVersion, as a release tags them (the values pin them by digest all the same).
APP_VERSION = chart_oci.chart(paths.CHART_DIR).app_version
SAMPLE_NAMESPACES = ("default",)


def compiler_version(pushed: dict[str, images.Pushed]) -> str:
    """The compiler build engines' cache keys name here: the release and the compiler image's ID, so that a
    changed compiler (the tree's, rebuilt) compiles again instead of reusing the engines of another build."""
    return f"{__version__}+{pushed['compiler'].image_id[:12]}"


def registry_values(engine_registry: str) -> dict:
    """The chart's `registry` for one of ENGINE_REGISTRIES (pure)."""
    if engine_registry == "oci":
        return {"kind": "oci", "oci": {"repository": engine_registries.uri().removeprefix("oci://"), "insecure": True}}
    return {"kind": "filesystem", "filesystem": {"existingClaim": CLAIM, "path": "engines"}}


def chart_values(pushed: dict[str, images.Pushed], engine_registry: str = engine_registries.KINDS[0]) -> dict:
    """The chart's values for the local cluster (pure): images by digest (the serving image's Triton has
    the native backends, as NGC's has), the engine registry, Prometheus by its Service, the real nodes."""
    operator = pushed["operator"]
    return {
        "image": {"repository": operator.repository, "tag": operator.tag, "digest": operator.digest},
        "compilerImage": pushed["compiler"].pinned,
        "compilerVersion": compiler_version(pushed),
        # Triton pods' init container: by the digest of its own image, which changes only with its code.
        "engineFetchImage": pushed["engine-fetch"].pinned,
        "servingImage": pushed["serving"].pinned,
        "servingTarget": SERVING_TARGET,  # the serving image's Triton release, the compiler image's
        "registry": registry_values(engine_registry),
        "prometheusUrl": PROMETHEUS_SERVICE_URL,
        "nodeSelector": {nodes.LOCAL_NODE_LABEL: "true"},
        # The admission webhook behind its Service, its certificate from cert-manager (certmanager.py).
        "webhook": {"enabled": True, "certManager": True},
        # The staged models may also be named by file:// (tests do; the samples use the model store).
        "modelFileRoots": [str(paths.SAMPLE_MODELS)],
    }


# The integration tests' cluster (`make test`: TENSORKILN_CLUSTER=tensorkiln-test), whose install admits
# more CompileJob writers (below).
TEST_CLUSTER = "tensorkiln-test"
# The namespaces of the integration tests' `namespace` fixture (tests/integration/conftest.py): t-<8 hex>.
TEST_NAMESPACE_PREFIX = "t-"


def kubeconfig_username(kubeconfig: Path | None = None) -> str:
    """The username the API server gives this machine's kubeconfig (paths.KUBECONFIG): the common name
    of its current user's client certificate (kwokctl's admin: `kwok-admin`, in system:masters)."""
    config = yaml.safe_load((kubeconfig or paths.KUBECONFIG).read_text())
    context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
    user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
    if "client-certificate-data" in user:
        pem = base64.b64decode(user["client-certificate-data"])
    else:
        pem = Path(user["client-certificate"]).read_bytes()
    (common_name,) = x509.load_pem_x509_certificate(pem).subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(common_name.value)


def compile_job_writers(admin: str, test_cluster: bool) -> dict:
    """The CompileJob writers a local install adds to the operator's ServiceAccount (pure; `admin`:
    kubeconfig_username()).

    The chart's ValidatingAdmissionPolicy admits CompileJobs written by the release's operator
    ServiceAccount alone, in every namespace (the release watches them all). Operators of this
    machine's own also write CompileJobs, and the policy would refuse them:
    - operators run as processes of this machine, logged in with its kubeconfig, `admin` (the
      cluster's administrator anyway): conftest.Operator in the integration tests (test_webhook,
      test_operator_metrics, ...) and the e2e benchmarks' operators (bench_slo, bench_scale);
    - on the tests' cluster, the releases of the chart that tests/integration/helm_release.py installs
      into a test namespace (test_helm_install, test_rbac_audit, test_leader_election, ...), whose
      operators are the ServiceAccounts `system:serviceaccount:t-<8 hex>:tk-t-<8 hex>-tensorkiln`:
      every ServiceAccount of a test namespace is admitted (their own release's policy, bound to that
      namespace, admits theirs alone).
    Everyone else is still refused (tests/integration/test_compilejob_admission.py: a tenant user)."""
    writers = [admin, *([f"system:serviceaccount:{TEST_NAMESPACE_PREFIX}*"] if test_cluster else [])]
    return {"compileJobAdmission": {"extraWriters": writers}}


def registry_claim(namespace: str) -> list[dict]:
    """The PersistentVolume (hostPath, REGISTRY_VOLUME) and the claim `tensorkiln-registry` bound to it."""
    volume = f"{CLAIM}-{namespace}"
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume, "labels": {"tensorkiln.dev/local": "registry-volume"}},
            "spec": {
                "capacity": {"storage": "50Gi"},
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {"path": str(REGISTRY_VOLUME), "type": "Directory"},
                "claimRef": {"namespace": namespace, "name": CLAIM},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": CLAIM, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": volume,
                "resources": {"requests": {"storage": "50Gi"}},
            },
        },
    ]


def model_store(image: str) -> list[dict]:
    """The staged models (SAMPLE_MODELS) over HTTP at MODEL_STORE_URL, read-only, as uid 1000."""
    labels = {"app.kubernetes.io/name": MODEL_STORE}
    return [
        workloads.deployment(
            MODEL_STORE,
            LOCAL_NAMESPACE,
            labels,
            {
                "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000},
                "containers": [
                    {
                        "name": "http",
                        "image": image,
                        "command": ["python3", "-m", "http.server", str(MODEL_STORE_PORT)],
                        "args": ["--directory", "/models"],
                        "ports": [{"name": "http", "containerPort": MODEL_STORE_PORT}],
                        "readinessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 2},
                        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "256Mi"}},
                        "volumeMounts": [{"name": "models", "mountPath": "/models", "readOnly": True}],
                    }
                ],
                "volumes": [{"name": "models", "hostPath": {"path": str(paths.SAMPLE_MODELS)}}],
            },
        ),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": MODEL_STORE, "namespace": LOCAL_NAMESPACE, "labels": labels},
            "spec": {"selector": labels, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
        },
    ]


def prometheus_service(address: str, port: int) -> list[dict]:
    """A Service without a selector and its EndpointSlice naming Prometheus on this machine."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "prometheus", "namespace": LOCAL_NAMESPACE},
            "spec": {"ports": [{"name": "web", "port": port, "targetPort": port, "protocol": "TCP"}]},
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": "prometheus-host",
                "namespace": LOCAL_NAMESPACE,
                "labels": {"kubernetes.io/service-name": "prometheus"},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
            "ports": [{"name": "web", "port": port, "protocol": "TCP"}],
        },
    ]


def _namespace(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def prepare_registry_volume() -> None:
    """The hostPath behind every registry claim, owned by the compiler's uid and gid (group-writable,
    setgid): what the kubelet's fsGroup does to volumes that support it."""
    REGISTRY_VOLUME.mkdir(parents=True, exist_ok=True)
    os.chown(REGISTRY_VOLUME, COMPILER_UID, COMPILER_UID)
    REGISTRY_VOLUME.chmod(0o2775)


def push_images() -> dict[str, images.Pushed]:
    """Build (or reuse) the product images and push them to the local registry."""
    built = images.build_all([image.name for image in LOCAL_PRODUCT])
    return {
        b.name: images.push(b, registry.HOST, APP_VERSION, tls_verify=False, compression=registry.COMPRESSION)
        for b in built
    }


def chart_crds() -> list[dict]:
    """The chart's crds/. Helm installs them on the first install only, so every install here applies
    them (server-side), as the chart's notes tell users to after an upgrade: a new field reaches the
    cluster's schema before the operator that writes it."""
    return [yaml.safe_load(path.read_text()) for path in sorted((paths.CHART_DIR / "crds").glob("*.yaml"))]


def apply_prerequisites(
    dynamic: DynamicClient, pushed: dict[str, images.Pushed], namespaces: tuple[str, ...], claims: bool
) -> None:
    """Namespaces, cert-manager, the model store, Prometheus' Service; with `claims`, the registry claims."""
    if claims:
        prepare_registry_volume()
    cluster.apply_crds(dynamic, [*certmanager.crds(), *chart_crds()])
    for obj in [
        _namespace(NAMESPACE),
        _namespace(LOCAL_NAMESPACE),
        *(_namespace(ns) for ns in namespaces),
        *certmanager.build_objects(cluster.cluster_image("cert-manager"), NAMESPACE),
        *(obj for ns in ((NAMESPACE, *namespaces) if claims else ()) for obj in registry_claim(ns)),
        *model_store(pushed["serving"].pinned),
        *prometheus_service(prometheus.ADDRESS, prometheus.PORT),
    ]:
        kube.apply(dynamic, obj)


def push_chart() -> chart_oci.PushedChart:
    """Package the working tree's chart and push it to the local registry (plain HTTP), as a release
    pushes its chart to the user's registry."""
    return chart_oci.package_and_push(registry.HOST, paths.CHART_DIR, plain_http=True)


def helm_install_command(helm: Path, chart: chart_oci.PushedChart, values_file: str, timeout: str) -> list[str]:
    """`helm upgrade --install` from the registry (pure). The chart is named by the digest its push
    printed and by its version: the local registry moves the version's tag on every push (each `helm
    package` differs: its tar headers carry the time of packaging), so the digest is what makes this
    push's content the one installed, and helm refuses the install ("chart reference digest mismatch")
    should the tag name another push by then. The description records the reference in the release
    (`helm history`)."""
    return [str(helm), "--kubeconfig", str(paths.KUBECONFIG), "upgrade", "--install", RELEASE, chart.pinned,
            "--version", chart.chart.version, "--plain-http", "--namespace", NAMESPACE, "-f", values_file,
            "--wait", "--timeout", timeout, "--description", f"installed from {chart.pinned}"]  # fmt: skip


def helm_install(values: dict, chart: chart_oci.PushedChart, timeout: str = "5m") -> None:
    """`helm upgrade --install` of the pushed chart with `values`, waiting for the operator."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(values, f)
    try:
        subprocess.run(helm_install_command(installmanifests.helm(), chart, f.name, timeout), check=True)
    finally:
        Path(f.name).unlink()


def wait_ready(core: client.CoreV1Api, namespace: str, selector: str, timeout: float = 180) -> None:
    def ready() -> bool:
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
        return bool(pods) and all(
            any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or []) for p in pods
        )

    processes.wait_until(ready, f"pods {selector} in {namespace} to be Ready", timeout)


def merged(base: dict, overrides: dict) -> dict:
    """`base` with `overrides` applied, nested mappings merged key by key (as helm merges values)."""
    result = dict(base)
    for key, value in overrides.items():
        result[key] = (
            merged(result[key], value) if isinstance(value, dict) and isinstance(result.get(key), dict) else value
        )
    return result


def claims_view() -> Path:
    """A directory on this machine where each claim's name leads to its volume, as
    `/mnt/pvc/<claim>` does in the operator's pod: point TENSORKILN_PVC_ROOT at it to open the
    registry `pvc://tensorkiln-registry/...` from here."""
    view = paths.LOCAL_DATA / "claims"
    view.mkdir(parents=True, exist_ok=True)
    link = view / CLAIM
    if not link.is_symlink():
        link.symlink_to(REGISTRY_VOLUME)
    return view


def give_to_compiler(root: Path) -> None:
    """What this machine wrote into the registry volume (as root) handed to the compiler's uid, as
    if a compile pod had published it: later compile pods add to the same directories."""
    for path in [root, *root.rglob("*")]:
        os.chown(path, COMPILER_UID, COMPILER_UID, follow_symlinks=False)


def create_namespace(core: client.CoreV1Api, name: str, labels: dict[str, str] | None = None) -> None:
    """A namespace for InferenceModels: with the registry claim its compile and Triton pods mount."""
    core.create_namespace({"metadata": {"name": name, "labels": labels or {}}})
    volume, claim = registry_claim(name)
    core.create_persistent_volume(volume)
    core.create_namespaced_persistent_volume_claim(name, claim)


def delete_namespace(core: client.CoreV1Api, name: str, timeout: float = 180, until_gone: bool = False) -> None:
    """Delete a namespace of create_namespace and its registry volume; wait until its pods are gone
    (they hold what the next user needs: simulated GPUs, 8 L4s in all, and local-0's CPU), or with
    `until_gone` until the namespace is (its name can be created again).

    Its pods go at once (grace 0), once the namespace is terminating (nothing makes new ones then):
    the namespace controller otherwise waits out their grace period (30 s) even when they end sooner,
    and these namespaces hold tests and benchmarks, nothing that needs a graceful end. The rest of
    the namespace takes the controller 5-10 s more (a claim's protection finalizer), which nothing
    waits for but `until_gone`; the volume goes once its claim has."""
    try:
        core.delete_namespace(name)
        core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    except client.ApiException as error:
        if error.status != 404:
            raise
    try:
        core.delete_persistent_volume(registry_claim(name)[0]["metadata"]["name"])
    except client.ApiException as error:
        if error.status != 404:
            raise
    if until_gone:
        gone, what = lambda: all(ns.metadata.name != name for ns in core.list_namespace().items), "deleted"
    else:
        gone, what = lambda: not core.list_namespaced_pod(name).items, "without pods"
    processes.wait_until(gone, f"namespace {name} {what}", timeout, interval=0.5)


def process_environment(registry_uri: str) -> dict[str, str]:
    """Settings with which `tensorkiln-operator run`, as a process of this machine, acts as the
    installed operator does (its images, runtime, Prometheus and model roots), with its own registry
    (a pvc:// one read through claims_view, as the pod reads its mount)."""
    pushed = images.pushed(registry.HOST)
    return {
        "TENSORKILN_REGISTRY_URI": registry_uri,
        "TENSORKILN_COMPILER_IMAGE": pushed["compiler"].pinned,
        "TENSORKILN_COMPILER_VERSION": compiler_version(pushed),
        "TENSORKILN_ENGINE_FETCH_IMAGE": pushed["engine-fetch"].pinned,
        "TENSORKILN_SERVING_IMAGE": pushed["serving"].pinned,
        "TENSORKILN_SERVING_TARGET": SERVING_TARGET,
        "TENSORKILN_PROMETHEUS_URL": prometheus.url(),
        "TENSORKILN_MODEL_FILE_ROOTS": str(paths.SAMPLE_MODELS),
        PVC_ROOT_ENV: str(claims_view()),
    }


def scale_operator(api_client: client.ApiClient, replicas: int) -> None:
    """The installed operator's Deployment scaled (0: none acts until it is scaled back to 1)."""
    apps = client.AppsV1Api(api_client)
    apps.patch_namespaced_deployment_scale(RELEASE, NAMESPACE, {"spec": {"replicas": replicas}})
    core = client.CoreV1Api(api_client)
    selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=operator"
    if replicas == 0:
        gone = lambda: not core.list_namespaced_pod(NAMESPACE, label_selector=selector).items  # noqa: E731
        processes.wait_until(gone, "the installed operator's pod to stop", 90)
    else:
        wait_ready(core, NAMESPACE, selector)


def install(
    namespaces: tuple[str, ...] = SAMPLE_NAMESPACES,
    overrides: dict | None = None,
    engine_registry: str = engine_registries.KINDS[0],
) -> dict:
    """Push the images and the chart, set up what the cluster lacks, install the chart from the registry
    (its values for the local cluster with `engine_registry`, `overrides` over them); print the chart
    installed; return the values used."""
    if engine_registry == "pvc" and not profiles.current().claims:
        raise SystemExit(
            f"the local cluster {paths.CLUSTER_NAME!r} has the kind-like profile: only ReadWriteOnce storage, as kind "
            "has, so no registry claim; install with --engine-registry oci"
        )
    pushed = push_images()
    chart = push_chart()
    writers = compile_job_writers(kubeconfig_username(), test_cluster=paths.CLUSTER_NAME == TEST_CLUSTER)
    values = merged(merged(chart_values(pushed, engine_registry), writers), overrides or {})
    with connection.api_client() as api:
        apply_prerequisites(DynamicClient(api), pushed, namespaces, claims=engine_registry == "pvc")
        core = client.CoreV1Api(api)
        wait_ready(core, NAMESPACE, f"app.kubernetes.io/name={certmanager.NAME}")  # it issues the webhook's certificate
        helm_install(values, chart)
        wait_ready(core, LOCAL_NAMESPACE, f"app.kubernetes.io/name={MODEL_STORE}")
    print(f"installed chart {chart.pinned} (version {chart.chart.version}, appVersion {chart.chart.app_version})")
    return values
