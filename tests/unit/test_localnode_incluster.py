"""The local node runs the chart's operator pod: the operator image rule, persistentVolumeClaim
volumes, the mount view, the in-cluster environment (API server, ServiceAccount token) and token
renewal; the operator's side: kube.load_incluster and the kopf login read that token; and
CompileJobs take the chart's pvc:// registry."""

import datetime
import json
import re
import shutil
import sys
from pathlib import Path

import kopf
import pytest
import yaml
from dockerfile_parse import DockerfileParser
from pydantic import ValidationError
from tensorkiln import incluster, kube
from tensorkiln.api.compilejob import RegistryDestination
from tensorkiln.registry import locations as registry_locations
from tensorkiln_local import installmanifests
from tensorkiln_local.cluster import binaries
from tensorkiln_local.node import images, podspec
from tensorkiln_local.node.images import Launch, operator_launch, rule_for
from tensorkiln_local.node.ipam import IpAllocator
from tensorkiln_local.node.podspec import PlanError, PodContext, plan_pod, token_refresh_seconds, token_volumes
from tensorkiln_local.node.worker import NodeEnv, PodWorker

ROOT = Path(__file__).resolve().parents[2]
POD_DIR = Path("/state/pods/uid-1")
APISERVER = "https://127.0.0.1:32764"
CTX = PodContext(POD_DIR, "127.0.0.12", "127.0.0.1", "local-0", "/venv/bin:/usr/bin", apiserver=APISERVER)
SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
# What ServiceAccount admission adds (kube-apiserver v1.37, as seen on the local cluster).
KUBE_API_ACCESS = {
    "name": "kube-api-access-x7k2p",
    "projected": {
        "defaultMode": 420,
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
        ],
    },
}
SA_MOUNT = {"name": "kube-api-access-x7k2p", "mountPath": SA_PATH, "readOnly": True}


class Resolver:
    def __init__(self, objects=None):
        self.objects = {("configmaps", "ns", "kube-root-ca.crt"): {"data": {"ca.crt": "CA"}}, **(objects or {})}
        self.tokens = 0

    def lookup(self, kind, namespace, name):
        return self.objects.get((kind, namespace, name))

    def service_account_token(self, pod, audience, expiration_seconds):
        self.tokens += 1
        return f"token-{self.tokens}"


def claim(name="engines", pv="pv-engines", phase="Bound"):
    return {("persistentvolumeclaims", "ns", name): {"spec": {"volumeName": pv}, "status": {"phase": phase}}}


def volume_of(pv_spec, pv="pv-engines"):
    common = {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": ""}
    return {("persistentvolumes", None, pv): {"spec": {**common, **pv_spec}}}


def pod(*containers, volumes=(), namespace="ns"):
    return {
        "metadata": {"name": "p", "namespace": namespace, "uid": "uid-1"},
        "spec": {"containers": list(containers), "volumes": list(volumes)},
    }


def container(**fields):
    return {"name": "main", "image": "example.com/tool:1", "command": ["run"], **fields}


# -- persistentVolumeClaim volumes ------------------------------------------------------------


def test_claim_bound_to_a_host_path_volume_mounts_that_directory():
    resolver = Resolver({**claim(), **volume_of({"hostPath": {"path": "/srv/engines", "type": "Directory"}})})
    c = container(
        args=["--registry", "file:///var/lib/registry/engines"],
        volumeMounts=[{"name": "registry", "mountPath": "/var/lib/registry"}],
    )
    plan = plan_pod(
        pod(c, volumes=[{"name": "registry", "persistentVolumeClaim": {"claimName": "engines"}}]), CTX, resolver
    )
    (volume,) = plan.volumes
    assert volume.path == Path("/srv/engines") and not volume.create and volume.files == {}
    assert plan.containers[0].argv == ["run", "--registry", "file:///srv/engines/engines"]


def test_claim_bound_to_a_local_volume_mounts_its_path():
    resolver = Resolver({**claim(), **volume_of({"local": {"path": "/mnt/disks/a"}, "nodeAffinity": {}})})
    plan = plan_pod(
        pod(container(), volumes=[{"name": "v", "persistentVolumeClaim": {"claimName": "engines"}}]), CTX, resolver
    )
    assert plan.volumes[0].path == Path("/mnt/disks/a")


@pytest.mark.parametrize(
    "objects, message",
    [
        ({}, 'persistentvolumeclaim "engines" not found'),
        (claim(phase="Pending"), 'persistentvolumeclaim "engines" is not bound'),
        (claim(), 'persistentvolume "pv-engines" not found'),
    ],
)
def test_missing_or_unbound_claim_is_retried(objects, message):
    volumes = [{"name": "v", "persistentVolumeClaim": {"claimName": "engines"}}]
    with pytest.raises(PlanError) as err:
        plan_pod(pod(container(), volumes=volumes), CTX, Resolver(objects))
    assert err.value.message == message
    assert err.value.reason == "ContainerCreating" and not err.value.permanent


def test_claim_on_a_network_volume_fails_the_pod_clearly():
    resolver = Resolver({**claim(), **volume_of({"nfs": {"server": "nas", "path": "/x"}})})
    volumes = [{"name": "v", "persistentVolumeClaim": {"claimName": "engines"}}]
    with pytest.raises(PlanError, match='persistentvolume "pv-engines" is a nfs volume') as err:
        plan_pod(pod(container(), volumes=volumes), CTX, resolver)
    assert err.value.reason == "VolumeNotSupported" and err.value.permanent


# -- the mount view -----------------------------------------------------------------------------


def test_mount_view_links_every_mount_path_but_nested_ones():
    c = container(
        volumeMounts=[
            {"name": "data", "mountPath": "/data"},
            {"name": "cache", "mountPath": "/data/cache"},  # inside /data: left out
            {"name": "cfg", "mountPath": "/etc/app/", "subPath": "conf"},
        ]
    )
    volumes = [{"name": n, "emptyDir": {}} for n in ("data", "cache", "cfg")]
    links = plan_pod(pod(c, volumes=volumes), CTX, Resolver()).containers[0].links
    root = POD_DIR / "main" / "root"
    assert links == {root / "data": POD_DIR / "volumes/data", root / "etc/app": POD_DIR / "volumes/cfg/conf"}


# -- the in-cluster environment -----------------------------------------------------------------


def test_container_mounting_the_token_gets_the_api_server_and_the_token_directory():
    c = container(volumeMounts=[SA_MOUNT])
    plan = plan_pod(pod(c, volumes=[KUBE_API_ACCESS]), CTX, Resolver())
    env = plan.containers[0].env
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
    assert env["KUBERNETES_SERVICE_PORT"] == env["KUBERNETES_SERVICE_PORT_HTTPS"] == "32764"
    token_dir = POD_DIR / "volumes" / "kube-api-access-x7k2p"
    assert env[podspec.SERVICE_ACCOUNT_DIR_ENV] == str(token_dir)
    assert podspec.SERVICE_ACCOUNT_DIR_ENV == kube.SERVICE_ACCOUNT_DIR_ENV  # the operator reads this name
    assert podspec.SERVICE_ACCOUNT_MOUNT == kube.SERVICE_ACCOUNT_DIR
    (volume,) = plan.volumes
    assert volume.files == {"token": (b"token-1", 420), "ca.crt": (b"CA", 420), "namespace": (b"ns", 420)}


def test_no_token_mount_no_in_cluster_environment():
    plan = plan_pod(pod(container(), volumes=[KUBE_API_ACCESS]), CTX, Resolver())
    assert not {"KUBERNETES_SERVICE_HOST", podspec.SERVICE_ACCOUNT_DIR_ENV} & set(plan.containers[0].env)
    ctx = PodContext(POD_DIR, "127.0.0.12", "127.0.0.1", "local-0", "/usr/bin")  # an agent without the URL
    plan = plan_pod(pod(container(volumeMounts=[SA_MOUNT]), volumes=[KUBE_API_ACCESS]), ctx, Resolver())
    assert "KUBERNETES_SERVICE_HOST" not in plan.containers[0].env


def test_pod_env_wins_and_host_values_are_not_rewritten_by_mounts():
    c = container(
        env=[{"name": "KUBERNETES_SERVICE_HOST", "value": "10.96.0.1"}],
        volumeMounts=[SA_MOUNT, {"name": "state", "mountPath": "/state"}],  # prefixes the token's local dir
    )
    plan = plan_pod(pod(c, volumes=[KUBE_API_ACCESS, {"name": "state", "emptyDir": {}}]), CTX, Resolver())
    env = plan.containers[0].env
    assert env["KUBERNETES_SERVICE_HOST"] == "10.96.0.1"
    assert env[podspec.SERVICE_ACCOUNT_DIR_ENV] == str(POD_DIR / "volumes" / "kube-api-access-x7k2p")


def test_token_refresh_follows_the_kubelet():
    assert token_refresh_seconds(pod(container(), volumes=[KUBE_API_ACCESS])) == pytest.approx(0.8 * 3607)
    long_lived = json.loads(json.dumps(KUBE_API_ACCESS))
    long_lived["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"] = 7 * 24 * 3600
    assert token_refresh_seconds(pod(container(), volumes=[long_lived])) == 24 * 3600
    assert token_refresh_seconds(pod(container(), volumes=[{"name": "e", "emptyDir": {}}])) is None
    resolver = Resolver()
    volumes = [KUBE_API_ACCESS, {"name": "e", "emptyDir": {}}]
    (renewed,) = token_volumes(pod(container(), volumes=volumes), CTX, resolver)
    assert renewed.files["token"] == (b"token-1", 420)
    (renewed,) = token_volumes(pod(container(), volumes=volumes), CTX, resolver)
    assert renewed.files["token"] == (b"token-2", 420)


# -- the operator image -----------------------------------------------------------------------


def test_operator_rule_runs_the_entrypoint_with_this_python():
    launch = operator_launch(Launch([], ["--namespace=a", "--peering=tk"], {"PATH": "/usr/bin"}, root="/pods/u/c/root"))
    assert launch.command == [sys.executable, "-m", "tensorkiln", "operator", "run"]
    assert launch.args == ["--namespace=a", "--peering=tk"]
    assert launch.env["PYTHONUNBUFFERED"] == "1"
    assert launch.env["TENSORKILN_PVC_ROOT"] == "/pods/u/c/root/mnt/pvc"
    own = operator_launch(Launch(["tensorkiln", "crds"], [], {"TENSORKILN_PVC_ROOT": "/claims"}, root="/r"))
    assert own.command == [sys.executable, "-m", "tensorkiln", "crds"]
    assert own.env["TENSORKILN_PVC_ROOT"] == "/claims"
    shell = operator_launch(Launch(["sh", "-c", "env"], [], {}))
    assert shell.command == ["sh", "-c", "env"] and "TENSORKILN_PVC_ROOT" not in shell.env


def test_operator_rule_matches_the_chart_image_and_the_dockerfile():
    values = yaml.safe_load((ROOT / "charts/tensorkiln/values.yaml").read_text())
    repository = values["image"]["repository"]
    assert rule_for(f"{repository}:0.1.0").rewrite is operator_launch
    assert rule_for(f"{repository}:0.1.0@sha256:{'a' * 64}").rewrite is operator_launch
    dockerfile = DockerfileParser(path=str(ROOT / "operator/Dockerfile"))
    (entrypoint,) = [i["value"] for i in dockerfile.structure if i["instruction"] == "ENTRYPOINT"]
    assert tuple(json.loads(entrypoint)) == images.OPERATOR_ENTRYPOINT
    for name, value in images.OPERATOR_IMAGE_ENV.items():
        assert dockerfile.envs[name] == value
    assert (images.PVC_ROOT_ENV, images.DEFAULT_PVC_ROOT) == (
        registry_locations.PVC_ROOT_ENV,
        registry_locations.DEFAULT_PVC_ROOT,
    )


@pytest.fixture(scope="module")
def chart_pod():
    """The chart's operator pod, as the API server stores it: rendered by helm, plus the token volume."""
    if not binaries.cached_path(binaries.BINARIES["helm"]).exists() and shutil.which("go") is None:
        pytest.skip("helm is not built and there is no Go toolchain to build it (tensorkiln-local cluster build helm)")
    values = {"watchNamespaces": ["ns"], "registry": {"filesystem": {"existingClaim": "engines", "path": "reg"}}}
    rendered = installmanifests.documents(installmanifests.template(values, release="tk", namespace="ns"))
    (deployment,) = [d for d in rendered if d["kind"] == "Deployment"]
    spec = deployment["spec"]["template"]["spec"]
    spec["volumes"].append(KUBE_API_ACCESS)
    spec["containers"][0]["volumeMounts"].append(SA_MOUNT)
    return {"metadata": {"name": "tk-tensorkiln-0", "namespace": "ns", "uid": "uid-1"}, "spec": spec}


def test_the_chart_operator_pod_plans_as_the_service_account_with_its_registry(chart_pod):
    resolver = Resolver({**claim(), **volume_of({"hostPath": {"path": "/srv/claim"}})})
    plan = plan_pod(chart_pod, CTX, resolver)
    (operator,) = plan.containers
    root = POD_DIR / "operator" / "root"
    assert operator.argv == [
        sys.executable,
        "-m",
        "tensorkiln",
        "operator",
        "run",
        "--namespace=ns",
        "--peering=tensorkiln",
    ]
    env = operator.env
    assert env["TENSORKILN_REGISTRY_URI"] == "pvc://engines/reg"
    assert env["TENSORKILN_PVC_ROOT"] == f"{root}/mnt/pvc"
    assert operator.links[root / "mnt/pvc/engines"] == Path("/srv/claim")  # pvc://engines/reg -> /srv/claim/reg
    assert env[podspec.SERVICE_ACCOUNT_DIR_ENV] == str(POD_DIR / "volumes" / "kube-api-access-x7k2p")
    assert (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]) == ("127.0.0.1", "32764")
    assert env["TMPDIR"] == str(POD_DIR / "volumes" / "tmp")
    assert "KUBECONFIG" not in env
    assert (operator.probes["readiness"].host, operator.probes["readiness"].port) == ("127.0.0.12", 8080)


# -- the worker: views, renewed tokens ------------------------------------------------------------


class FakeKube:
    def __init__(self):
        self.calls = []

    def call(self, method, path, *, query=None, body=None, patch=None, timeout_s=30):
        self.calls.append((method, path, body))
        return {}


def test_worker_links_the_view_and_renews_the_token_while_the_pod_runs(tmp_path):
    env = NodeEnv(
        kube=FakeKube(),
        resolver=Resolver(),
        ipam=IpAllocator(tmp_path / "ipam.json"),
        node_name="local-0",
        state_dir=tmp_path,
        search_path="/usr/bin:/bin",
        apiserver=APISERVER,
    )
    short = json.loads(json.dumps(KUBE_API_ACCESS))
    short["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"] = 1  # renewed after 0.8 s
    view = f"$HOME/main/root{SA_PATH}"
    script = (
        f'test "$(cat {view}/ca.crt)" = CA || exit 3; '
        f'until [ "$(cat "${podspec.SERVICE_ACCOUNT_DIR_ENV}/token")" = token-3 ]; do sleep 0.1; done'
    )
    c = {"name": "main", "image": "busybox", "command": ["sh", "-c", script], "volumeMounts": [SA_MOUNT]}
    never = pod(c, volumes=[short])
    never["spec"]["restartPolicy"] = "Never"
    worker = PodWorker(never, env)
    worker.start()
    assert worker.finished.wait(15), "the token was not renewed"
    status = [body["status"] for _, path, body in env.kube.calls if path.endswith("/status")][-1]
    assert status["phase"] == "Succeeded", status


# -- the operator's side ------------------------------------------------------------------------


@pytest.fixture
def token_dir(tmp_path, monkeypatch):
    directory = tmp_path / "sa"
    directory.mkdir()
    (directory / "token").write_text("abc.def")
    (directory / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    (directory / "namespace").write_text("team-a")
    monkeypatch.setenv(kube.SERVICE_ACCOUNT_DIR_ENV, str(directory))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "32764")
    return directory


def test_load_incluster_reads_the_token_where_the_agent_put_it(token_dir):
    configuration = kube.client.Configuration()
    kube.load_incluster(configuration)
    assert configuration.host == "https://127.0.0.1:32764"
    assert configuration.api_key["BearerToken"] == "bearer abc.def"
    assert configuration.ssl_ca_cert == str(token_dir / "ca.crt")


def test_load_incluster_without_a_token_is_not_in_cluster(tmp_path, monkeypatch):
    monkeypatch.setenv(kube.SERVICE_ACCOUNT_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "32764")
    with pytest.raises(kube.config.ConfigException):
        kube.load_incluster(kube.client.Configuration())


def test_kopf_logs_in_as_the_service_account(token_dir):
    info = incluster.login(logger=_Logger(), settings=kopf.OperatorSettings())
    assert (info.server, info.scheme, info.token) == ("https://127.0.0.1:32764", "bearer", "abc.def")
    assert info.ca_path == str(token_dir / "ca.crt") and info.default_namespace == "team-a"


def test_kopf_login_outside_a_pod_is_kopfs_own(monkeypatch, tmp_path):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    sentinel = kopf.ConnectionInfo(server="https://from-kubeconfig")
    monkeypatch.setattr(kopf, "login_via_client", lambda **kwargs: sentinel)
    assert incluster.login(logger=_Logger(), settings=kopf.OperatorSettings()) is sentinel


def test_login_is_the_only_login_of_the_runs_registry():
    registry = kopf.OperatorRegistry()
    incluster.register_login(registry)
    (handler,) = registry._activities.get_all_handlers()  # kopf has no public accessor
    assert handler.activity.value == "authentication" and handler.fn is incluster.login


class _Logger:
    def debug(self, *args):
        pass


def test_token_file_renewal_is_read_again(token_dir, monkeypatch):
    """The client re-reads the token file (every minute): a renewed token is used."""
    configuration = kube.client.Configuration()
    kube.load_incluster(configuration)
    (token_dir / "token").write_text("renewed")
    hook = configuration.refresh_api_key_hook
    real = datetime.datetime

    class Later(real):
        @classmethod
        def now(cls, tz=None):
            return real.now(tz) + datetime.timedelta(minutes=2)

    monkeypatch.setattr("kubernetes.config.incluster_config.datetime.datetime", Later)
    hook(configuration)
    assert configuration.api_key["BearerToken"] == "bearer renewed"


# -- the chart's registry in CompileJobs ----------------------------------------------------------


@pytest.mark.parametrize("uri", ["pvc://tensorkiln-registry/engines", "pvc://engines", "pvc://engines/"])
def test_compile_jobs_accept_the_charts_pvc_registry(uri):
    """The chart's default TENSORKILN_REGISTRY_URI is pvc://<claim>/<path>: the operator puts it in
    every CompileJob, so the CRD's pattern (the same regex) must admit it."""
    RegistryDestination.model_validate({"uri": uri})
    crd = yaml.safe_load((ROOT / "crds/compilejobs.tensorkiln.dev.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    pattern = schema["properties"]["spec"]["properties"]["registry"]["properties"]["uri"]["pattern"]
    assert re.match(pattern, uri)


@pytest.mark.parametrize("uri", ["pvc://Bad_Claim/x", "pvc:///engines", "http://host/engines"])
def test_compile_jobs_refuse_other_registry_uris(uri):
    with pytest.raises(ValidationError):
        RegistryDestination.model_validate({"uri": uri})
