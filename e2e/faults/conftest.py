"""Fixtures of the fault suite (`make faults`): the local cluster, its lock, the seed, the
installed operator, and the checks every case ends with.

The suite is long and shares the cluster: every test here runs under the cluster lock
(/tmp/tensorkiln-cluster.lock, `flock`), which `make faults` takes; run directly, the session
takes it itself. The operator is the one users get: the chart's Deployment in tensorkiln-system,
from its image, on the real node, upgraded for the session as the integration tests do (a registry
directory of the session's own, fast resyncs, no admission webhook). Faults reach it as they would
on any cluster: its pod force-deleted (SIGKILL), the API server killed under it, its registry
directory moved away in the volume it mounts. The suite refuses to start beside an operator process
of this machine that watches every namespace (it would act on these namespaces too).
"""

import fcntl
import os
import random
import time
import uuid
from pathlib import Path

import pytest
from kubernetes import client
from tensorkiln_api.registry.locations import PVC_ROOT_ENV
from tensorkiln_local import install
from tensorkiln_local.cluster import connection, paths

from tests.integration.conftest import operator  # noqa: F401  (the session's installed operator)

LOCK = Path(os.environ.get("TENSORKILN_CLUSTER_LOCK", "/tmp/tensorkiln-cluster.lock"))
SEED_ENV = "TENSORKILN_FAULTS_SEED"


def _seed() -> int:
    return int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(1, 2**31))


SEED = _seed()


def pytest_report_header(config):
    return f"fault suite seed: {SEED} (rerun with {SEED_ENV}={SEED})"


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"fault suite seed: {SEED} (rerun with {SEED_ENV}={SEED})")


def _ancestors_hold_lock() -> bool:
    """True when a `flock <lock> ...` above this process holds the lock (as `make faults` does)."""
    pid = os.getppid()
    while pid > 1:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        if argv and Path(argv[0].decode(errors="replace")).name == "flock" and str(LOCK).encode() in argv:
            return True
        pid = int(stat[stat.rindex(")") + 2 :].split()[1])
    return False


@pytest.fixture(scope="session", autouse=True)
def cluster_lock():
    """Hold the shared cluster lock for the whole session (unless a parent `flock` already does)."""
    if _ancestors_hold_lock():
        yield
        return
    LOCK.touch(exist_ok=True)
    with open(LOCK) as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"\nwaiting for the cluster lock {LOCK} ...", flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def cluster_wide_operators() -> list[tuple[int, str]]:
    """`tensorkiln-operator run` processes of this machine, not of a pod (the installed operator's
    container is one of a kubelet's), that watch every namespace (no --namespace)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = [a.decode(errors="replace") for a in (entry / "cmdline").read_bytes().split(b"\0") if a]
            in_a_pod = "/kubepods/" in (entry / "cgroup").read_text()
        except OSError:
            continue
        if in_a_pod:
            continue
        text = " ".join(argv)
        if "tensorkiln" in text and "operator" in argv and "run" in argv and "--namespace" not in argv:
            found.append((int(entry.name), text))
    return found


@pytest.fixture(scope="session")
def api(cluster_lock):
    os.environ["KUBECONFIG"] = str(paths.KUBECONFIG)  # subprocesses too: this cluster, whatever the shell names
    os.environ.setdefault(PVC_ROOT_ENV, str(install.claims_view()))
    with connection.api_client() as api_client:
        client.VersionApi(api_client).get_code()
        others = cluster_wide_operators()
        if others:
            pytest.fail(
                "an operator watching every namespace is running and would act on this suite's namespaces: "
                + "; ".join(f"pid {pid}: {cmd}" for pid, cmd in others)
            )
        yield api_client


@pytest.fixture(scope="session")
def seed() -> int:
    return SEED


@pytest.fixture
def rng(seed, request) -> random.Random:
    """This test's own random stream: the same seed gives each test the same choices, in any order."""
    return random.Random(f"{seed}:{request.node.name}")


@pytest.fixture
def namespace(api):
    """A fresh namespace with the registry claim compile and Triton pods mount."""
    core = client.CoreV1Api(api)
    name = f"faults-{uuid.uuid4().hex[:8]}"
    install.create_namespace(core, name, {"tensorkiln.dev/suite": "faults"})
    yield name
    install.delete_namespace(core, name, timeout=300)


@pytest.fixture
def registry_uri(operator) -> str:  # noqa: F811  (the fixture imported above)
    """The installed operator's registry, this session's own: a directory of the claim every
    namespace mounts (this machine reads it through install.claims_view, the pods at their mount)."""
    return operator.registry_uri


def elapsed(since: float) -> str:
    return f"{time.monotonic() - since:.0f} s"
