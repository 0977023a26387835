"""The operator in a pod: kube.load_incluster and the kopf login read the ServiceAccount token the
kubelet mounts, and CompileJobs take the chart's pvc:// registry."""

import datetime
import re
from pathlib import Path

import kopf
import pytest
import yaml
from pydantic import ValidationError
from tensorkiln import incluster, kube
from tensorkiln_api.compilejob import RegistryDestination

ROOT = Path(__file__).resolve().parents[2]


# -- the operator's side ------------------------------------------------------------------------


@pytest.fixture
def token_dir(tmp_path, monkeypatch):
    directory = tmp_path / "sa"
    directory.mkdir()
    (directory / "token").write_text("abc.def")
    (directory / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    (directory / "namespace").write_text("team-a")
    monkeypatch.setattr(kube, "SERVICE_ACCOUNT_DIR", directory)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "32764")
    return directory


def test_load_incluster_reads_the_pods_token(token_dir):
    configuration = kube.client.Configuration()
    kube.load_incluster(configuration)
    assert configuration.host == "https://127.0.0.1:32764"
    assert configuration.api_key["BearerToken"] == "bearer abc.def"
    assert configuration.ssl_ca_cert == str(token_dir / "ca.crt")


def test_load_incluster_without_a_token_is_not_in_cluster(tmp_path, monkeypatch):
    monkeypatch.setattr(kube, "SERVICE_ACCOUNT_DIR", tmp_path)
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


def crd_registry_uri_pattern() -> str:
    """The CompileJob CRD's pattern for spec.registry.uri, as the API server enforces it."""
    crd = yaml.safe_load((ROOT / "crds/compilejobs.tensorkiln.dev.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema["properties"]["spec"]["properties"]["registry"]["properties"]["uri"]["pattern"]


@pytest.mark.parametrize("uri", ["pvc://tensorkiln-registry/engines", "pvc://engines", "pvc://engines/"])
def test_compile_jobs_accept_the_charts_pvc_registry(uri):
    """The chart's default TENSORKILN_REGISTRY_URI is pvc://<claim>/<path>: the operator puts it in
    every CompileJob, so the CRD's pattern (the same regex) must admit it."""
    RegistryDestination.model_validate({"uri": uri})
    assert re.match(crd_registry_uri_pattern(), uri)


@pytest.mark.parametrize(
    "uri",
    [
        "oci://ghcr.io/acme/engines",
        "oci://registry.example.test:5000/tensorkiln/engines",
        "oci://10.0.0.7:5000/engines",
        "oci://[::1]:5000/engines",
        "oci://harbor.example.test/team-a/tensor_kiln__engines",
    ],
)
def test_compile_jobs_accept_oci_registries(uri):
    """oci://host[:port]/repository (tensorkiln_api.registry.oci): the CRD's pattern and the model agree."""
    RegistryDestination.model_validate({"uri": uri})
    assert re.match(crd_registry_uri_pattern(), uri)


@pytest.mark.parametrize(
    "uri",
    [
        "pvc://Bad_Claim/x",
        "pvc:///engines",
        "http://host/engines",
        "oci://ghcr.io",  # no repository
        "oci://ghcr.io/Acme/engines",  # repository names are lowercase
        "oci://user:secret@ghcr.io/engines",  # credentials never travel in the URI
        "oci://ghcr.io/engines:latest",  # the root of the registry, not one tag
        "oci:///engines",
    ],
)
def test_compile_jobs_refuse_other_registry_uris(uri):
    with pytest.raises(ValidationError):
        RegistryDestination.model_validate({"uri": uri})
