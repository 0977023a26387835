"""Benchmark: the operator at 1000 InferenceModels, on 160 kwok-SIMULATED GPU nodes.

The GPU nodes are simulated by kwok (their pods run nothing) and every engine is a registry hit
(engine_seeds' test seed: no compiler runs), so this measures the operator and the control plane:
how fast models become Ready, what the operator asks of the API server, its memory and CPU.

1. The cluster is converged to e2e/pools-1000.yaml (130 H100 nodes with 8 GPUs, 30 L4 nodes);
   the default pools are restored at the end.
2. An operator of its own, watching one fresh namespace, runs as a ServiceAccount (bound to
   cluster-admin: this measures requests, not RBAC), so the API server's audit log records every
   request it makes (localcluster/audit-policy.yaml). `--operator-tree` runs another checkout's
   operator (e.g. an older commit, for before/after figures) under the same script.
3. N models (the resnet50 sample on the H100 pool, no SLO) are created by parallel applies.
Printed, and written to e2e/results/scale.md:
- the seconds until all were created, and until all were Ready;
- the operator's RSS and CPU seconds;
- its requests by verb from the audit log (watches left out), while converging, in a quiet
  minute after, and while one more model becomes Ready (and the seconds that takes);
- after a SIGKILL and a restart: the seconds until it has reconciled every model again (its
  own tensorkiln_reconciles_total), and its requests meanwhile;
- the control plane alone: the seconds until N copies of the operator's Triton Deployment, created
  by the same parallel applies with no operator running, are available. The control plane's
  share of "all Ready" (ReplicaSets, pods, bindings, kwok's pod status, on the same 2 cores) is
  set against the time the applies took: the floor this gives is the ratio to compare.

Needs `tensorkiln-local cluster up`; stops a demo operator while it runs.
Usage: .venv/bin/python e2e/bench_scale.py [--models 1000] [--operator-tree DIR]
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import yaml
from kubernetes import client
from tensorkiln.hardware.classes import discover
from tensorkiln.hardware.selection import select_targets
from tensorkiln_api import GROUP, VERSION
from tensorkiln_local import install, rbac_audit
from tensorkiln_local.cluster import cluster, connection, paths
from tensorkiln_local.cluster.cluster import audit_lines
from tensorkiln_local.cluster.engine_seeds import publish_test_seed

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
POOLS = HERE / "pools-1000.yaml"
SAMPLE = ROOT / "manifests" / "samples" / "resnet50-gpu.yaml"
RESULTS = HERE / "results" / "scale.md"
PRODUCT = "NVIDIA-H100-80GB-HBM3"
QUIET_SECONDS = 60
READS, WRITES = ("get", "list"), ("create", "patch", "update", "delete", "deletecollection")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def requests(user: str, since: datetime, until: datetime) -> Counter:
    return rbac_audit.requests_since(audit_lines(), user, since, until)


def by_verb(counted: Counter) -> dict[str, int]:
    verbs: Counter = Counter()
    for (verb, _), n in counted.items():
        verbs[verb] += n
    return dict(sorted(verbs.items()))


def service_account_kubeconfig(core: client.CoreV1Api, rbac_api, namespace: str, directory: Path) -> tuple[Path, str]:
    """A ServiceAccount bound to cluster-admin, and a kubeconfig with a token of it."""
    name = "bench-operator"
    core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    rbac_api.create_cluster_role_binding({
        "metadata": {"name": f"{namespace}-{name}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    })  # fmt: skip
    token = core.create_namespaced_service_account_token(name, namespace, {"spec": {"expirationSeconds": 7200}})
    admin = yaml.safe_load(paths.KUBECONFIG.read_text())
    cluster_entry = admin["clusters"][0]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster_entry],
        "users": [{"name": name, "user": {"token": token.status.token}}],
        "contexts": [{"name": name, "context": {"cluster": cluster_entry["name"], "user": name}}],
        "current-context": name,
    }
    path = directory / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path, f"system:serviceaccount:{namespace}:{name}"


class Operator:
    def __init__(self, kubeconfig: Path, registry_uri: str, namespace: str, tree: Path, log_path: Path):
        self.metrics_port = free_port()
        self.env = {
            **os.environ,
            # As the installed operator is set (its images, serving target and compiler version: the seeded
            # engine's cache key is the one it looks up), but for the registry and what follows.
            **install.process_environment(registry_uri),
            "KUBECONFIG": str(kubeconfig),
            "PYTHONPATH": str(tree / "operator"),
            "TENSORKILN_METRICS_PORT": str(self.metrics_port),
            "TENSORKILN_HEALTH_PORT": str(free_port()),
            "TENSORKILN_LISTEN_ADDRESS": "127.0.0.1",
            "TENSORKILN_LOG_FORMAT": "plain",
            "PYTHONUNBUFFERED": "1",
        }
        self.namespace, self.log_path, self.proc = namespace, log_path, None

    def start(self) -> None:
        log = open(self.log_path, "ab")
        argv = [sys.executable, "-m", "tensorkiln", "run", "--namespace", self.namespace]
        self.proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,
            umask=install.REGISTRY_UMASK,
        )

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def reconciles(self) -> float:
        """tensorkiln_reconciles_total{kind="InferenceModel"} of this process (0 until it serves /metrics)."""
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read().decode()
        except OSError:
            return 0.0
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("tensorkiln_reconciles_total{") and 'kind="InferenceModel"' in line
        )


def ready_count(custom: client.CustomObjectsApi, namespace: str) -> int:
    items = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels")["items"]
    return sum(1 for m in items if m.get("status", {}).get("phase") == "Ready")


def wait_until(check, timeout: float, what: str, interval: float = 1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(interval)
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")


def model_body(name: str, namespace: str) -> dict:
    body = yaml.safe_load(SAMPLE.read_text())
    body["metadata"] = {"name": name, "namespace": namespace}
    body["spec"]["hardware"] = {"mode": "Auto", "include": [PRODUCT]}
    del body["spec"]["slo"]
    return body


def run(args, api: client.ApiClient, work: Path) -> dict:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    namespace = f"scale-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    kubeconfig, user = service_account_kubeconfig(core, client.RbacAuthorizationV1Api(api), namespace, work)
    registry_uri = f"file://{work / 'registry'}"
    template = model_body("m", namespace)
    nodes = [api.sanitize_for_serialization(n) for n in core.list_node().items]
    (target,) = select_targets(template["spec"]["hardware"], discover(nodes), nodes)
    publish_test_seed(registry_uri, template, target, work / "seeds")  # one key serves every model: same spec
    operator = Operator(kubeconfig, registry_uri, namespace, args.operator_tree, work / "operator.log")
    operator.start()
    found: dict = {"namespace": namespace, "nodes": len(nodes), "tree": str(args.operator_tree)}
    try:
        wait_until(lambda: _serving(operator), 120, "the operator's /metrics")
        found["rss_start_mb"] = operator.rss_mb()
        started_at, start = datetime.now(UTC), time.monotonic()

        def create(i: int) -> None:
            body = copy.deepcopy(template)
            body["metadata"]["name"] = f"m{i:04d}"
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", body)

        with ThreadPoolExecutor(args.appliers) as pool:
            list(pool.map(create, range(args.models)))
        found["created_s"] = time.monotonic() - start
        wait_until(lambda: ready_count(custom, namespace) >= args.models, args.timeout, f"{args.models} Ready", 2)
        found["ready_s"] = time.monotonic() - start
        ready_at = datetime.now(UTC)
        found["rss_mb"], found["cpu_s"] = operator.rss_mb(), operator.cpu_seconds()
        found["converging"] = by_verb(requests(user, started_at, ready_at))

        time.sleep(20)  # the last status writes and watch events settle
        quiet_from, quiet_cpu = datetime.now(UTC), operator.cpu_seconds()
        time.sleep(QUIET_SECONDS)
        found["quiet_cpu_s"] = operator.cpu_seconds() - quiet_cpu
        quiet = requests(user, quiet_from, datetime.now(UTC))
        found["quiet"] = by_verb(quiet)
        found["quiet_detail"] = {f"{v} {r}": n for (v, r), n in sorted(quiet.items())}
        found["rss_quiet_mb"] = operator.rss_mb()

        one_from, start = datetime.now(UTC), time.monotonic()
        create(args.models)
        wait_until(lambda: ready_count(custom, namespace) > args.models, 120, "one more model Ready", 0.1)
        found["one_more_s"] = time.monotonic() - start
        found["one_more"] = by_verb(requests(user, one_from, datetime.now(UTC)))

        operator.kill()
        restart_from, start = datetime.now(UTC), time.monotonic()
        operator.start()
        total = args.models + 1
        wait_until(
            lambda: operator.reconciles() >= total, 600, f"the restarted operator to reconcile {total} models", 0.5
        )
        found["restart_s"] = time.monotonic() - start
        restarted = requests(user, restart_from, datetime.now(UTC))
        found["restart"] = by_verb(restarted)
        found["restart_writes"] = {f"{v} {r}": n for (v, r), n in sorted(restarted.items()) if v in WRITES}
        found["rss_restart_mb"] = operator.rss_mb()
        operator.kill()
        found["control_plane_s"] = control_plane_alone(api, namespace, args)
    finally:
        operator.kill()
        core.delete_namespace(namespace)
        client.RbacAuthorizationV1Api(api).delete_cluster_role_binding(f"{namespace}-bench-operator")
    return found


def control_plane_alone(api: client.ApiClient, namespace: str, args) -> float:
    """Seconds for the control plane alone (no operator) to make N copies of the operator's first
    Triton Deployment available, created by the same parallel applies in a namespace of their own:
    the floor under the operator's "all Ready", as a Deployment's ReplicaSet, pod, binding and
    kwok's pod status are the same work for the control plane either way."""
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    (first,) = [d for d in apps.list_namespaced_deployment(namespace).items if d.metadata.name.startswith("m0000-")]
    body = api.sanitize_for_serialization(first)
    template = {"apiVersion": "apps/v1", "kind": "Deployment", "spec": body["spec"],
                "metadata": {"labels": body["metadata"].get("labels", {})}}  # fmt: skip
    # The models' pods hold the GPUs the copies need: their Deployments go first (the operator is
    # stopped: nothing makes them again).
    apps.delete_collection_namespaced_deployment(namespace, propagation_policy="Background")
    wait_until(lambda: not core.list_namespaced_pod(namespace, limit=1).items, args.timeout, "the models' pods gone", 2)
    alone = f"{namespace}-alone"
    core.create_namespace({"metadata": {"name": alone}})
    try:
        start = time.monotonic()

        def create(i: int) -> None:
            deployment = copy.deepcopy(template)
            deployment["metadata"]["name"] = f"d{i:04d}"
            for labels in (
                deployment["spec"]["selector"]["matchLabels"],
                deployment["spec"]["template"]["metadata"]["labels"],
            ):
                labels["bench-copy"] = f"d{i:04d}"  # each copy's ReplicaSet selects its own pods only
            apps.create_namespaced_deployment(alone, deployment)

        with ThreadPoolExecutor(args.appliers) as pool:
            list(pool.map(create, range(args.models)))

        def available() -> bool:
            items = apps.list_namespaced_deployment(alone).items
            return sum(1 for d in items if (d.status.available_replicas or 0) >= 1) >= args.models

        wait_until(available, args.timeout, f"{args.models} Deployments available", 2)
        return time.monotonic() - start
    finally:
        core.delete_namespace(alone)


def _serving(operator: Operator) -> bool:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=5).close()
    except OSError:
        return False
    return True


def report(found: dict, models: int) -> str:
    def verbs(d: dict) -> str:
        return ", ".join(f"{v} {n}" for v, n in d.items()) or "none"

    load = os.getloadavg()
    return "\n".join([
        f"## {models} models, operator from {found['tree']}",
        "",
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs ({platform.machine()}), load average "
        f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} after; {found['nodes']} nodes (all but local-0 SIMULATED by kwok).",
        "",
        "| measure | value |",
        "| --- | ---: |",
        f"| all created (parallel applies) | {found['created_s']:.0f} s |",
        f"| all Ready | {found['ready_s']:.0f} s ({found['ready_s'] / found['created_s']:.2f}x the applies) |",
        f"| the control plane alone: the same {models} Deployments available, no operator | "
        f"{found['control_plane_s']:.0f} s (all Ready took {found['ready_s'] / found['control_plane_s']:.2f}x this) |",
        f"| operator RSS at {models} models | {found['rss_mb']:.0f} MB (after the quiet minute "
        f"{found['rss_quiet_mb']:.0f} MB; with no model {found['rss_start_mb']:.0f} MB) |",
        f"| operator CPU until all Ready | {found['cpu_s']:.0f} s (in the quiet {QUIET_SECONDS} s after: {found['quiet_cpu_s']:.1f} s) |",
        f"| one more model Ready | {found['one_more_s']:.1f} s |",
        f"| restart (SIGKILL) until every model reconciled again | {found['restart_s']:.0f} s |",
        "",
        "Requests by verb (watches left out):",
        "",
        f"- converging: {verbs(found['converging'])}",
        f"- a quiet {QUIET_SECONDS} s after: {verbs(found['quiet'])}"
        + (f" ({', '.join(f'{k}: {n}' for k, n in found['quiet_detail'].items())})" if found["quiet_detail"] else ""),
        f"- one more model: {verbs(found['one_more'])}",
        f"- the restart: {verbs(found['restart'])}; writes: {found['restart_writes'] or 'none'}",
        "",
    ])  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--appliers", type=int, default=8, help="parallel creates")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--operator-tree", type=Path, default=ROOT, help="checkout whose operator/ to run")
    args = parser.parse_args()
    cluster.up(POOLS)
    try:
        with connection.api_client() as api, tempfile.TemporaryDirectory() as work:
            install.scale_operator(api, 0)  # the installed operator would act alongside the one measured
            try:
                found = run(args, api, Path(work))
            finally:
                install.scale_operator(api, 1)
    finally:
        cluster.up(paths.DEFAULT_POOLS)
    text = report(found, args.models)
    print(text)
    RESULTS.parent.mkdir(exist_ok=True)
    header = "# Scale benchmark: the operator at many models (e2e/bench_scale.py)\n\n"
    previous = RESULTS.read_text() if RESULTS.exists() else header
    RESULTS.write_text(previous.rstrip("\n") + "\n\n" + text)


if __name__ == "__main__":
    main()
