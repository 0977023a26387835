"""Benchmark: TensorKiln's SLO scaler against an HPA-style CPU-utilisation policy, on the same
step load (low, x4, low), on the local cluster's real node local-0, in one run.

For each workload (tensorkiln_local.cluster.slo_workloads: the SIMULATED fixed-service-time
engine standing in for a GPU-bound one, and/or the real PP-OCR detector compiled on local-0, whose
load is sized from one replica's capacity measured in the first policy's run, as the test does,
and reused for the second so both get the same arrivals):

- `slo`: the InferenceModel with `slo.mode: Operator`; the operator reads Triton's metrics from
  the local Prometheus and sets replicas through the Deployment's scale subresource.
- `cpu-utilisation`: the same InferenceModel with `slo.mode: HPA`, so the operator leaves replicas
  alone (the HPA it emits asks for an External metric that no adapter serves here, so the
  cluster's HPA controller holds replicas). This script then plays the HPA controller with the
  CPU-utilisation algorithm (tensorkiln_local.load.utilisation, target 70% of the CPU request,
  15 s sync period, the same scale-down window as the SLO policy), reading each Triton pod's CPU
  time from its processes on local-0 (what cAdvisor reads from cgroups on a real node), and
  patches the same scale subresource.

Both runs get the same open-loop Poisson arrivals (same seed), in fresh namespaces, one after the
other. Latency two ways: what clients saw (p95 over a 10 s sliding window, failed requests as
infinite; it includes the clients' own time on the shared CPUs), and what Triton reported (the
scaler's query: the worst pod's summary quantile, which remembers about a minute).
Reported per policy: seconds to restore the SLO after the step, SLO-violation seconds,
replica-seconds (pods that existed, ready or not). Writes e2e/results/slo.md and slo.png.

Needs `tensorkiln-local cluster up`; starts an operator of its own per run, watching only that run's
namespace (and stops a demo operator while it runs).
Usage: .venv/bin/python e2e/bench_slo.py [--workloads simulated detector]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from kubernetes import client
from tensorkiln_local import install
from tensorkiln_local.cluster import connection, nodes, paths
from tensorkiln_local.cluster.slo_workloads import DETECTOR, SIMULATED, Workload, prepare, triton_latency
from tensorkiln_local.load.evaluation import report
from tensorkiln_local.load.loadgen import run_step_load
from tensorkiln_local.load.utilisation import UtilisationPolicy

RESULTS = Path(__file__).resolve().parent / "results"
WORKLOADS = {"simulated": SIMULATED, "detector": DETECTOR}
HPA_SYNC_S = 15.0
CPU_TARGET = 0.7


def wait(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(2)
    raise TimeoutError(what)


class UtilisationController:
    """The HPA controller's loop with the CPU-utilisation algorithm, for one Deployment on local-0."""

    def __init__(self, api, namespace: str, deployment: str, pod_labels: dict, policy: UtilisationPolicy):
        self.api = api
        self.apps, self.core = client.AppsV1Api(api), client.CoreV1Api(api)
        self.namespace, self.deployment, self.policy = namespace, deployment, policy
        self.selector = ",".join(f"{k}={v}" for k, v in sorted(pod_labels.items()))
        self._cpu: dict[str, tuple[float, float]] = {}  # pod uid -> (cpu seconds, at)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _utilisations(self) -> list[float]:
        found = []
        for pod in self.core.list_namespaced_pod(self.namespace, label_selector=self.selector).items:
            ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
            used = nodes.container_cpu_seconds(self.api, pod, "triton")
            if used is None:
                continue
            now, before = time.monotonic(), self._cpu.get(pod.metadata.uid)
            self._cpu[pod.metadata.uid] = (used, now)
            request = _cores(pod.spec.containers[0].resources.requests["cpu"])
            if ready and before is not None and now > before[1]:
                found.append((used - before[0]) / (now - before[1]) / request)
        return found

    def _loop(self) -> None:
        while not self._stop.wait(HPA_SYNC_S):
            scale = self.apps.read_namespaced_deployment_scale(self.deployment, self.namespace)
            current = scale.spec.replicas
            wanted = self.policy.decide(current, self._utilisations(), time.monotonic())
            if wanted != current:
                self.apps.patch_namespaced_deployment_scale(
                    self.deployment, self.namespace, {"spec": {"replicas": wanted}}, field_manager="bench-hpa"
                )

    def __enter__(self):
        self._utilisations()  # the first CPU readings
        self._thread.start()
        return self

    def __exit__(self, *_):
        self._stop.set()
        self._thread.join()


def _cores(quantity: str) -> float:
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def start_operator(namespace: str, registry_uri: str, work_dir: Path) -> subprocess.Popen:
    """An operator of the benchmark's own, watching only the run's namespace: a process of this machine,
    so that its settings (5 s periods) are the benchmark's and the installed operator's are left alone."""
    env = {**os.environ, **install.process_environment(registry_uri), "TENSORKILN_RESYNC_SECONDS": "5",
           "TENSORKILN_SLO_PERIOD_SECONDS": "5",
           "TENSORKILN_METRICS_PORT": "0", "TENSORKILN_HEALTH_PORT": "0"}  # fmt: skip
    log = open(work_dir / f"operator-{namespace}.log", "ab")
    command = [sys.executable, "-m", "tensorkiln", "run", "--namespace", namespace]
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)


def run_policy(api, workload: Workload, policy: str, registry_uri: str, work_dir: Path, seed: int, measured=None):
    namespace = f"bench-slo-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(api)
    install.create_namespace(core, namespace)
    operator = start_operator(namespace, registry_uri, work_dir)
    try:
        mode = "Operator" if policy == "slo" else "HPA"
        prepared = prepare(api, registry_uri, namespace, workload, work_dir, 900, mode, measured)
        deployment, phases = prepared.deployment, prepared.phases
        slo = prepared.workload.slo  # a calibrated workload's target: as its capacity was measured
        apps = client.AppsV1Api(api)
        if policy != "slo":  # start where the SLO policy starts: at the minimum
            apps.patch_namespaced_deployment_scale(
                deployment, namespace, {"spec": {"replicas": slo["minReplicas"]}}, field_manager="bench-hpa"
            )
            wait(lambda: apps.read_namespaced_deployment(deployment, namespace).status.ready_replicas
                 == slo["minReplicas"], 300, "minimum replicas ready")  # fmt: skip
        server = triton_latency(api, namespace, deployment, workload)
        run = lambda: run_step_load(api, namespace, workload.name, deployment, workload.inputs(), phases, seed, server)  # noqa: E731
        if policy == "slo":
            requests, points = run()
        else:
            hpa = UtilisationPolicy(
                CPU_TARGET, slo["minReplicas"], slo["maxReplicas"], slo["scaleDownStabilizationSeconds"]
            )
            with UtilisationController(
                api,
                namespace,
                deployment,
                apps.read_namespaced_deployment(deployment, namespace).spec.selector.match_labels,
                hpa,
            ):
                requests, points = run()
        target, percentile = slo["targetMilliseconds"], slo["percentile"]
        reports, series = report(phases, requests, points, target, percentile)
        server_reports, server_series = report(phases, requests, points, target, percentile, source="server")
        return {"requests": requests, "points": points, "reports": reports, "series": series, "phases": phases,
                "server_reports": server_reports, "server_series": server_series,
                "capacity": prepared.capacity, "workload": prepared.workload}  # fmt: skip
    finally:
        operator.terminate()
        operator.wait()
        install.delete_namespace(core, namespace)


def _figures(result) -> dict:
    reports = result["reports"]
    step = reports[1]
    return {
        "restore": step.restore_s,
        "violation": sum(r.violation_s for r in reports),
        "server_restore": result["server_reports"][1].restore_s,
        "server_violation": sum(r.violation_s for r in result["server_reports"]),
        "replica_s": sum(r.replica_s for r in reports),
        "max": max(max(r.replicas) for r in reports),
        "requests": len(result["requests"]),
        "failed": sum(1 for r in result["requests"] if not r.ok),
    }


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(results), figsize=(7 * len(results), 7), squeeze=False, sharex="col")
    for column, (name, (workload, by_policy)) in enumerate(results.items()):
        top, bottom = axes[0][column], axes[1][column]
        target = workload.slo["targetMilliseconds"]
        for policy, result in by_policy.items():
            times = [t for t, v in result["series"]]
            values = [min(v, 10 * target) if v is not None else float("nan") for t, v in result["series"]]
            top.plot(times, values, label=f"{policy}: client p95")
            server = [(t, v) for t, v in result["server_series"] if v is not None]
            top.plot([t for t, _ in server], [min(v, 10 * target) for _, v in server], linestyle=":",
                     label=f"{policy}: Triton p95 (worst pod, ~1 min summary)")  # fmt: skip
            bottom.step([p.at for p in result["points"]], [p.replicas for p in result["points"]], where="post",
                        label=f"{policy}: replicas")  # fmt: skip
        top.axhline(target, color="red", linestyle="--", label=f"target {target:g} ms")
        top.set_yscale("log")
        top.set_ylabel("p95 latency, ms (10 s window)")
        bottom.set_ylabel("replicas")
        bottom.set_xlabel("seconds since the load started")
        start = 0.0
        for phase in next(iter(by_policy.values()))["phases"]:
            for axis in (top, bottom):
                axis.axvspan(start, start + phase.seconds, alpha=0.06 if phase.name == "high" else 0.0, color="k")
            start += phase.seconds
        top.set_title(f"{name}" + (" (SIMULATION of a GPU-bound engine)" if workload.simulated_service_ms else ""))
        top.legend(fontsize=8)
        bottom.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_report(results: dict, started: datetime, load_before, load_after) -> str:
    lines = [
        "# SLO scaling benchmark: the SLO scaler vs an HPA-style CPU-utilisation policy",
        "",
        f"`e2e/bench_slo.py`, {started:%Y-%m-%d %H:%M} UTC, on the local cluster's real node local-0 "
        f"({os.cpu_count()} CPUs, {platform.machine()}). 1/5/15-minute load average before: "
        f"{' / '.join(f'{x:.2f}' for x in load_before)}, after: {' / '.join(f'{x:.2f}' for x in load_after)}. "
        "The load generator, Triton, Prometheus, the control plane and the operator share these CPUs.",
        "",
        "Both policies get the same open-loop Poisson arrivals (same seed) through the Service's ready pods. "
        "Latency two ways: client-side, p95 over a 10 s sliding window every second (a failed request counts as "
        "infinitely slow; it includes the clients' own time on the shared CPUs), and Triton's, the scaler's "
        "query sampled every second (the worst pod's summary quantile, which remembers about a minute). "
        "Violation seconds: seconds where that p95 was over target. Restore: seconds after "
        "the step until the SLO held for the rest of the high phase. Replica-seconds: pods that existed "
        "(ready or not) integrated over the run. The utilisation policy is Kubernetes' HPA algorithm on CPU "
        f"(target {CPU_TARGET:.0%} of the CPU request, 10% tolerance, {HPA_SYNC_S:g} s sync, scale-up at most "
        "max(2x, +4), scale-down to the highest recommendation of the same window as the SLO policy), reading "
        "each Triton pod's CPU time from its processes on local-0.",
        "",
    ]
    for name, (workload, by_policy) in results.items():
        slo, first = workload.slo, next(iter(by_policy.values()))
        phases = ", ".join(f"{p.name} {p.rate:.1f} req/s for {p.seconds:g} s" for p in first["phases"])
        measured = (
            f"Capacity, measured in this run before the first policy's load: {first['capacity'].describe()}. "
            f"The phases are {', '.join(f'{p.rate:g}x' for p in workload.phases)} of it. "
            if first["capacity"]
            else ""
        )
        lines += [
            f"## {name}" + (" (SIMULATION)" if workload.simulated_service_ms else ""),
            "",
            (
                f"SIMULATED fixed-service-time engine ({workload.simulated_service_ms:g} ms per batch, no batching, "
                "computes nothing) standing in for a GPU-bound engine. "
                if workload.simulated_service_ms
                else "PP-OCR's text detector at 480x480 compiled on local-0 (OpenVINO FP32), one instance, one thread. "
            )
            + f"SLO {slo['percentile']} < {slo['targetMilliseconds']:g} ms, replicas {slo['minReplicas']}-"
            f"{slo['maxReplicas']}, scale-down window {slo['scaleDownStabilizationSeconds']} s. {measured}"
            f"Load: {phases}.",
            "",
            "| policy | restore after step (s), clients | violation s, clients | restore (s), Triton | violation s, Triton"
            " | replica-seconds | most replicas | requests | failed |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        figures = {policy: _figures(result) for policy, result in by_policy.items()}
        for policy, f in figures.items():
            restore = "not restored" if f["restore"] is None else f"{f['restore']:.0f}"
            server_restore = "not restored" if f["server_restore"] is None else f"{f['server_restore']:.0f}"
            lines.append(
                f"| {policy} | {restore} | {f['violation']:.0f} | {server_restore} | {f['server_violation']:.0f} | "
                f"{f['replica_s']:.0f} | {f['max']} | "
                f"{f['requests']} | {f['failed']} |"
            )
        lines += ["", "Per phase (replicas asked for, in order; violation seconds; restore seconds):", ""]
        for policy, result in by_policy.items():
            for r in result["reports"]:
                lines.append(
                    f"- {policy}, {r.name}: replicas {r.replicas}, {r.violation_s:.0f} s violated, "
                    f"restore {r.restore_s if r.restore_s is None else round(r.restore_s)}, "
                    f"{r.direction_changes} direction changes"
                )
        slo_f, cpu_f = figures.get("slo"), figures.get("cpu-utilisation")
        if slo_f and cpu_f:
            cheaper = slo_f["replica_s"] <= cpu_f["replica_s"]
            for side, key in (("clients", "violation"), ("Triton", "server_violation")):
                verdict = "met" if slo_f[key] < cpu_f[key] and cheaper else "not met"
                lines += [
                    "",
                    f"Goal (fewer violation seconds than the utilisation policy at no more replica-seconds), "
                    f"latency as seen by {side}: **{verdict}** ({slo_f[key]:.0f} vs {cpu_f[key]:.0f} violation s; "
                    f"{slo_f['replica_s']:.0f} vs {cpu_f['replica_s']:.0f} replica-seconds).",
                ]
        lines.append("")
    lines += ["![latency and replicas over time](slo.png)", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    os.environ["KUBECONFIG"] = str(paths.KUBECONFIG)  # subprocesses too: this cluster, whatever the shell names
    started, load_before = datetime.now(UTC), os.getloadavg()
    with tempfile.TemporaryDirectory() as work, connection.api_client() as api:
        install.scale_operator(api, 0)  # the installed operator would act on the benchmark's namespaces too
        results = {}
        for name in args.workloads:
            workload, by_policy = WORKLOADS[name], {}
            measured = None  # the first policy's run measures the capacity; the second reuses it
            for policy in ("slo", "cpu-utilisation"):
                print(f"{name}: {policy} ...", flush=True)
                registry = f"pvc://{install.CLAIM}/bench-slo-{uuid.uuid4().hex[:8]}"
                by_policy[policy] = run_policy(api, workload, policy, registry, Path(work), args.seed, measured)
                measured = by_policy[policy]["capacity"]
                print(f"  {_figures(by_policy[policy])}", flush=True)
            results[name] = (by_policy["slo"]["workload"], by_policy)
        install.scale_operator(api, 1)
    RESULTS.mkdir(exist_ok=True)
    plot(results, RESULTS / "slo.png")
    (RESULTS / "slo.md").write_text(write_report(results, started, load_before, os.getloadavg()))
    print((RESULTS / "slo.md").read_text())


if __name__ == "__main__":
    main()
