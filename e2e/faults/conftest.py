"""Fixtures of the fault suite (`make faults`): the local cluster, its lock, the seed, operators
limited to their own namespaces, and the checks every case ends with.

The suite is long and shares the cluster: every test here runs under the cluster lock
(/tmp/tensorkiln-cluster.lock, `flock`), which `make faults` takes; run directly, the session
takes it itself. Operators run with --namespace only, so other people's operators and objects
are left alone, and the suite refuses to start beside an operator that watches every namespace
(it would act on these namespaces too).
"""

import fcntl
import os
import random
import time
import uuid
from pathlib import Path

import pytest
from kubernetes import client
from tensorkiln import kube
from tensorkiln_local.cluster import paths

from tests.integration.conftest import Operator  # noqa: F401  (re-exported for the test modules)
from tests.integration.helpers import namespace_exists, wait_for

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
    """Running `tensorkiln operator run` processes that watch every namespace (no --namespace)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = [a.decode(errors="replace") for a in (entry / "cmdline").read_bytes().split(b"\0") if a]
        except OSError:
            continue
        text = " ".join(argv)
        if "tensorkiln" in text and "operator" in argv and "run" in argv and "--namespace" not in argv:
            found.append((int(entry.name), text))
    return found


@pytest.fixture(scope="session")
def api(cluster_lock):
    os.environ.setdefault("KUBECONFIG", str(paths.KUBECONFIG))
    others = cluster_wide_operators()
    if others:
        pytest.fail(
            "an operator watching every namespace is running and would act on this suite's namespaces: "
            + "; ".join(f"pid {pid}: {cmd}" for pid, cmd in others)
        )
    with kube.api_client(os.environ["KUBECONFIG"]) as api_client:
        client.VersionApi(api_client).get_code()
        yield api_client


@pytest.fixture(scope="session")
def seed() -> int:
    return SEED


@pytest.fixture
def rng(seed, request) -> random.Random:
    """This test's own random stream: the same seed gives each test the same choices, in any order."""
    return random.Random(f"{seed}:{request.node.name}")


def delete_namespace(core: client.CoreV1Api, name: str, timeout: float = 300) -> None:
    try:
        core.delete_namespace(name)
    except client.ApiException as error:
        if error.status != 404:
            raise
    wait_for(lambda: not namespace_exists(core, name), timeout=timeout, what=f"namespace {name} to be deleted")


@pytest.fixture
def namespace(api):
    core = client.CoreV1Api(api)
    name = f"faults-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name, "labels": {"tensorkiln.dev/suite": "faults"}}})
    yield name
    delete_namespace(core, name)


@pytest.fixture
def start_operator(tmp_path):
    """start_operator(namespace, registry_uri, **env) -> a started Operator watching only `namespace`;
    every one is killed at the end of the test."""
    started = []

    def start(namespace: str, registry_uri: str, log_format: str = "json", **env) -> Operator:
        log = tmp_path / f"operator-{len(started)}.log"
        op = Operator(
            log, registry_uri, args=["--namespace", namespace], env={"TENSORKILN_LOG_FORMAT": log_format, **env}
        )
        op.start()
        started.append(op)
        return op

    yield start
    for op in started:
        op.kill()


def elapsed(since: float) -> str:
    return f"{time.monotonic() - since:.0f} s"
