"""Fixtures for tests against the local cluster (`make integration`: `tensorkiln-local cluster up`
and `install`, then these tests).

The operator under test is the one installed the user's way: the chart's Deployment in
tensorkiln-system, from its image, on the real node (`operator`). The session upgrades that release
with values of its own (a registry directory of this run, resyncs and SLO evaluations every 5 s)
and puts the defaults back at the end. A few tests run operators as processes of this machine
instead (`Operator`), each saying why.
"""

import os
import signal
import socket
import subprocess
import sys
import uuid

import pytest
from kubernetes import client
from tensorkiln_api.registry.locations import PVC_ROOT_ENV
from tensorkiln_local import install
from tensorkiln_local.cluster import connection, paths

from .helpers import wait_for

pytestmark = pytest.mark.cluster
# Figures a test measured on this machine (e.g. one replica's capacity), printed after the run
# even with -q, so that CI's output says what the loads were sized from.
MEASURED: list[str] = []
OPERATOR_SELECTOR = f"app.kubernetes.io/instance={install.RELEASE},app.kubernetes.io/component=operator"


def cluster_state(namespace: str) -> str:
    """What `kubectl` says about a test's namespace and the operator: printed under a failed test,
    so that CI's output shows the state it failed in, not only the timeout."""
    kubectl = [str(paths.BIN_DIR / "kubectl"), "--kubeconfig", str(paths.KUBECONFIG)]
    commands = [
        ["get", "inferencemodels,compilejobs,jobs,pods", "-o", "wide", "-n", namespace],
        ["get", "events", "--sort-by=.lastTimestamp", "-n", namespace],
        ["logs", "--tail=40", "-n", install.NAMESPACE, "-l", OPERATOR_SELECTOR, "-c", "operator"],
    ]
    sections = []
    for args in commands:
        done = subprocess.run([*kubectl, *args], capture_output=True, text=True, timeout=30)
        lines = [line for line in (done.stdout + done.stderr).splitlines() if "kopf.activities.probe" not in line]
        sections.append("$ kubectl " + " ".join(args) + "\n" + "\n".join(lines[-40:]))
    return "\n".join(sections)


# Modules that read what the serving tests leave in the cluster's Prometheus (the Triton series of
# the last hour), so they run after them; pytest's order is otherwise the files' names.
RUN_LAST = ("test_dashboard.py",)


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: item.path.name in RUN_LAST)  # stable: the rest keep their order


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call" and report.failed and "namespace" in getattr(item, "funcargs", {}):
        report.sections.append(("cluster state", cluster_state(item.funcargs["namespace"])))
    return report


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
    os.environ["KUBECONFIG"] = str(paths.KUBECONFIG)  # subprocesses too: this cluster, whatever the shell names
    # pvc:// registries read from this machine as the operator's pod reads them (install.claims_view).
    os.environ.setdefault(PVC_ROOT_ENV, str(install.claims_view()))
    with connection.api_client() as api_client:
        client.VersionApi(api_client).get_code()  # fail loudly: integration tests need the cluster
        yield api_client


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class InstalledOperator:
    """The chart's operator (helm release `tensorkiln` in tensorkiln-system, watching every
    namespace), driven as an operations engineer would: `kill` deletes its pod at once (SIGKILL; the
    Deployment starts another), `stop`/`start` scale it to 0 and back to 1, `log` is what its pods
    printed, the killed ones' included."""

    def __init__(self, api_client: client.ApiClient, registry_uri: str):
        self.core = client.CoreV1Api(api_client)
        self.registry_uri = registry_uri
        self._logs: list[str] = []

    def pod(self) -> client.V1Pod | None:
        pods = self.core.list_namespaced_pod(install.NAMESPACE, label_selector=OPERATOR_SELECTOR).items
        live = [p for p in pods if p.metadata.deletion_timestamp is None]
        return max(live, key=lambda p: p.metadata.creation_timestamp) if live else None

    def _pod_log(self, pod: client.V1Pod) -> str:
        try:
            return self.core.read_namespaced_pod_log(pod.metadata.name, install.NAMESPACE, container="operator")
        except client.ApiException:
            return ""

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill would: the pod deleted with no grace period."""
        pod = self.pod()
        if pod is None:
            return
        self._logs.append(self._pod_log(pod))
        self.core.delete_namespaced_pod(pod.metadata.name, install.NAMESPACE, grace_period_seconds=0)
        wait_for(lambda: self.pod() is None or self.pod().metadata.uid != pod.metadata.uid, timeout=60,
                 what="the killed operator pod to go")  # fmt: skip

    def stop(self) -> None:
        """No operator until `start`: the Deployment scaled to 0."""
        pod = self.pod()
        if pod is not None:
            self._logs.append(self._pod_log(pod))
        install.scale_operator(self.core.api_client, 0)

    def start(self) -> None:
        """One operator, Ready (after `kill`, the Deployment's replacement)."""
        install.scale_operator(self.core.api_client, 1)

    def restart(self) -> None:
        self.kill()
        self.start()

    def log(self) -> str:
        """Everything its pods printed, in order: a later call's answer extends an earlier one's."""
        pod = self.pod()
        return "".join(self._logs) + (self._pod_log(pod) if pod else "")

    def incarnation(self) -> tuple[str, int] | None:
        """(pod uid, operator container restarts): unchanged while the same process runs."""
        pod = self.pod()
        if pod is None:
            return None
        statuses = pod.status.container_statuses or []
        return pod.metadata.uid, sum(c.restart_count for c in statuses if c.name == "operator")

    def url(self, port_name: str) -> str:
        """http://<pod IP>:<port> of the running pod's named port (`health`, `metrics`): the pod
        network of the real node is this machine's."""
        pod = self.pod()
        if pod is None or not pod.status.pod_ip:
            return "http://0.0.0.0:1"  # refuses at once: no operator pod to ask
        (container,) = (c for c in pod.spec.containers if c.name == "operator")
        port = next(p.container_port for p in container.ports if p.name == port_name)
        return f"http://{pod.status.pod_ip}:{port}"


class Operator:
    """The operator as a process of this machine, for tests of operators of their own (peered
    ones, one log format or another, a webhook it registers itself): each such test says why.

    `args` go to `tensorkiln-operator run` (e.g. --namespace), `env` over the defaults. /metrics
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
            **install.process_environment(self.registry_uri),
            "KUBECONFIG": str(paths.KUBECONFIG),
            "TENSORKILN_RESYNC_SECONDS": "5",
            "TENSORKILN_SLO_PERIOD_SECONDS": "5",
            "PYTHONUNBUFFERED": "1",
            **self.env,
        }
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tensorkiln", "run", *self.args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            # It runs as root, the pod as the compiler's group: what it makes in the registry volume
            # (setgid, group 65532) stays writable for that group, as the installed operator's does.
            umask=install.REGISTRY_UMASK,
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


# This session's values over those `install --engine-registry pvc` gives the chart (the tests reach into
# the engines' files: test_registry_oci_cluster covers the OCI registry `make demo` installs): a registry
# directory of its own (a compile test must not be a cache hit of an earlier run) and faster periodic work.
# No admission webhook: tests that check what the operator says of a bad spec would be refused at
# admission instead (test_helm_webhook and test_helm_cert_manager check the chart's webhook).
def session_values(run: str) -> dict:
    # One replica: the tests drive "the operator pod" (kill, stop, its log and metrics); the standby
    # and the takeover are test_leader_election's.
    return {
        "replicaCount": 1,
        "registry": {"filesystem": {"path": f"engines-{run}"}},
        "resyncSeconds": 5,
        "sloPeriodSeconds": 5,
        "webhook": {"enabled": False},
    }


@pytest.fixture(scope="session")
def operator(api):
    run = uuid.uuid4().hex[:8]
    values = install.install(namespaces=(), overrides=session_values(run), engine_registry="pvc")
    op = InstalledOperator(api, f"pvc://{install.CLAIM}/{values['registry']['filesystem']['path']}")
    op.start()
    yield op
    install.install(namespaces=(), engine_registry="pvc")  # as `make integration` installed it


@pytest.fixture
def alone(operator):
    """For tests of operators of their own (the chart's, peered ones): the session's cluster-wide
    operator would reconcile their namespaces too, so it is stopped meanwhile."""
    operator.stop()
    yield
    operator.start()


@pytest.fixture
def namespace(api):
    """A fresh namespace with the registry claim `tensorkiln-registry` that compile and Triton pods mount;
    deleted afterwards, its pods waited for: they hold simulated GPUs (8 L4s in all) the next test needs."""
    core = client.CoreV1Api(api)
    name = f"t-{uuid.uuid4().hex[:8]}"
    install.create_namespace(core, name)
    yield name
    install.delete_namespace(core, name)
