"""Fixtures for tests against the local cluster (`tensorkiln-local cluster up`, run by `make test`)."""

import os
import signal
import socket
import subprocess
import sys
import uuid

import pytest
from kubernetes import client
from tensorkiln import kube
from tensorkiln.api import crdgen
from tensorkiln_local import operator_process
from tensorkiln_local.cluster import paths, prometheus

from .helpers import namespace_exists, wait_for

pytestmark = pytest.mark.cluster
# Figures a test measured on this machine (e.g. one replica's capacity), printed after the run
# even with -q, so that CI's output says what the loads were sized from.
MEASURED: list[str] = []


@pytest.fixture
def measured():
    """Append a line to the run's "measured on this machine" summary."""
    return MEASURED.append


def pytest_terminal_summary(terminalreporter):
    if MEASURED:
        terminalreporter.section("measured on this machine")
        for line in MEASURED:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def api():
    os.environ.setdefault("KUBECONFIG", str(paths.KUBECONFIG))
    with kube.api_client(os.environ["KUBECONFIG"]) as api_client:
        client.VersionApi(api_client).get_code()  # fail loudly: integration tests need the cluster
        yield api_client


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Operator:
    """The operator as its own process, so tests can kill and restart it.

    `args` go to `tensorkiln operator run` (e.g. --namespace), `env` over the defaults. /metrics
    and /healthz get free ports, so operators of several test sessions never collide."""

    def __init__(self, log_path, registry_uri, args=(), env=None):
        self.log_path = log_path
        self.registry_uri = registry_uri
        self.args = list(args)
        self.metrics_port, self.health_port = free_port(), free_port()
        self.env = {
            "TENSORKILN_METRICS_PORT": str(self.metrics_port),
            "TENSORKILN_HEALTH_PORT": str(self.health_port),
            "TENSORKILN_LISTEN_ADDRESS": "127.0.0.1",
        }
        self.env |= env or {}
        self.proc = None

    def start(self):
        env = {
            **os.environ,
            "TENSORKILN_REGISTRY_URI": self.registry_uri,
            "TENSORKILN_SERVING_RUNTIME": "python-backend",
            "TENSORKILN_PROMETHEUS_URL": prometheus.url(),
            "KUBECONFIG": str(paths.KUBECONFIG),
            "TENSORKILN_RESYNC_SECONDS": "5",
            "TENSORKILN_SLO_PERIOD_SECONDS": "5",
            "PYTHONUNBUFFERED": "1",
            **self.env,
        }
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tensorkiln", "operator", "run", *self.args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )

    def kill(self):
        """SIGKILL, as a crash or an OOM kill would."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def restart(self):
        self.kill()
        self.start()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture(scope="session")
def operator(api, tmp_path_factory):
    operator_process.stop()  # a demo operator would act alongside the one under test
    # A registry of this session's own: a compile test must not be a cache hit of an earlier run.
    registry_dir = tmp_path_factory.mktemp("registry")
    op = Operator(tmp_path_factory.mktemp("operator") / "operator.log", f"file://{registry_dir}")
    op.start()
    yield op
    op.kill()


@pytest.fixture
def alone(operator):
    """For tests of operators of their own (the chart's, peered ones): the session's cluster-wide
    test operator would reconcile their namespaces too, so it is stopped meanwhile."""
    operator.kill()
    yield
    operator.start()


@pytest.fixture
def kopf_peering_crds(api):
    """kopf's peering CRDs (the chart installs them); removed afterwards unless the cluster had them."""
    extensions = client.ApiextensionsV1Api(api)
    existing = {crd.metadata.name for crd in extensions.list_custom_resource_definition().items}
    created = [crd for crd in crdgen.kopf_peering_crds() if crd["metadata"]["name"] not in existing]
    for crd in created:
        extensions.create_custom_resource_definition(crd)
    for crd in created:
        wait_for(
            lambda name=crd["metadata"]["name"]: any(
                c.type == "Established" and c.status == "True"
                for c in extensions.read_custom_resource_definition(name).status.conditions or []
            ),
            timeout=30,
            what=f"CRD {crd['metadata']['name']} established",
        )
    yield
    for crd in created:
        extensions.delete_custom_resource_definition(crd["metadata"]["name"])


@pytest.fixture
def namespace(api):
    core = client.CoreV1Api(api)
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)
    # Wait until it is gone: its pods hold simulated GPUs (8 L4s in all) the next test needs.
    wait_for(lambda: not namespace_exists(core, name), timeout=180, what=f"namespace {name} to be deleted")
