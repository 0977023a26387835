"""Benchmark: least-cost placement (`slo.placement: LeastCost`) against scaling each class alone
(`PerClass`), on the same seeded step load (low, 4x, low), in one run; and LeastCost with burst capacity
(`slo.burstRequestsPerSecond`), one run per --burst value: by default the step's size (spare capacity for
the whole step at once) and half of it.

The model (tensorkiln_local.cluster.cost_workload) is served on two real nodes of the local
cluster as two hardware classes: local-0's pool, a fast expensive class (SIMULATED engine, 10 ms per
request, 0.4 per replica-hour), and local-1's, a slow cheap one (SIMULATED, 25 ms, 0.1). Real Triton,
real Prometheus and the real scaler act on it; the engines compute nothing (SIMULATIONS of GPU-bound
engines: see engine_seeds). The model's Service spreads requests evenly over its ready pods, as
kube-proxy does; the load generator follows its ready pods the same way (serving.loadgen).

Per policy it prints SLO-violation seconds (client p95 over a 10 s window over target; beside it the
same over a 1 s window and the requests over target, since one second of slow requests keeps a 10 s
window's p95 over target for up to 10 s), cost (replica-seconds of each class's Deployment times its
price per replica-hour, pods that existed, ready or not) and restore time after the step; and, beside them, the optimum: for each phase the
least-cost placement of that phase's rate (scaling.placement.place, from the same offers: each
class's capacity from its engine's figures, counted at offers.COUNTED_SHARE) and what it costs for
the phase's duration. Goal: LeastCost at least 30% cheaper than PerClass with the same or fewer
violation seconds (checked for each LeastCost run). Writes e2e/results/cost.md.

Needs `tensorkiln-local cluster up`; starts local-1 (`tensorkiln-local node up local-1`) and stops it
after, unless it ran before; annotates both real nodes with their price and takes it off after.
Starts an operator of its own per run, watching only that run's namespace (and stops a demo operator).
Usage: .venv/bin/python e2e/bench_cost.py [--seed 7] [--low 16] [--phase-seconds 60 150 150] [--burst 48 24]
  [--policies PerClass LeastCost LeastCost+burst]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench_slo import start_operator
from kubernetes import client
from tensorkiln.scaling.capacity import capacity_at_target
from tensorkiln.scaling.offers import COUNTED_SHARE
from tensorkiln.scaling.placement import ClassOffer, place
from tensorkiln_local import install
from tensorkiln_local.cluster import cluster, connection, cost_workload, nodes, paths
from tensorkiln_local.cluster.cost_workload import POOLS, REPLICA_CPU
from tensorkiln_local.cluster.slo_workloads import SIMULATED
from tensorkiln_local.load.evaluation import report
from tensorkiln_local.load.loadgen import OpenLoopLoad, Phase, ReplicaTimeline

RESULTS = Path(__file__).resolve().parent / "results"
POLICIES = ("PerClass", "LeastCost", "LeastCost+burst")


@dataclass(frozen=True)
class Run:
    """One policy's run: the name it is reported under, slo.placement and slo.burstRequestsPerSecond."""

    name: str
    placement: str
    burst: float = 0.0


def replica_price(pool: cost_workload.Pool) -> float:
    return pool.price_per_core_hour * REPLICA_CPU


def offers(target_ms: float, max_replicas: int) -> list[ClassOffer]:
    """What the operator offers the placement (scaling.offers), from the engines' defined figures."""
    found = []
    for pool in POOLS:
        capacity = capacity_at_target(pool.service_ms, target_ms)
        found.append(ClassOffer(pool.name, capacity * COUNTED_SHARE, replica_price(pool), 0, max_replicas))
    return found


def optimum(
    phases: list[Phase], target_ms: float, max_replicas: int, burst: float = 0.0
) -> list[tuple[Phase, dict, float]]:
    """Per phase: the least-cost replicas for its rate (and `burst`) and their cost over the phase."""
    rows = []
    for phase in phases:
        placed = place(offers(target_ms, max_replicas), phase.rate, burst=burst)
        rows.append((phase, placed.replicas, (placed.cost_per_hour or 0.0) * phase.seconds / 3600))
    return rows


def run_policy(api, policy: Run, phases: list[Phase], seed: int, work_dir: Path) -> dict:
    namespace = f"bench-cost-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(api)
    install.create_namespace(core, namespace)
    registry = f"pvc://{install.CLAIM}/{namespace}"
    operator = start_operator(namespace, registry, work_dir)
    try:
        deployments = cost_workload.deploy(api, registry, namespace, policy.placement, work_dir, policy.burst)
        cost_workload.wait_ready(api, namespace, 600)
        load = OpenLoopLoad(api, namespace, cost_workload.NAME, cost_workload.NAME, SIMULATED.inputs(), seed=seed)
        timelines = {pool: ReplicaTimeline(api, namespace, name) for pool, name in deployments.items()}
        for timeline in timelines.values():
            timeline.__enter__()
        try:
            requests = load.run(phases)
        finally:
            for timeline in timelines.values():
                timeline.__exit__()
        points = {pool: timeline.since(load.started_at) for pool, timeline in timelines.items()}
        status = client.CustomObjectsApi(api).get_namespaced_custom_object(
            "tensorkiln.dev", "v1alpha1", namespace, "inferencemodels", cost_workload.NAME
        )["status"]
        return {"requests": requests, "points": points, "status": status}
    finally:
        operator.terminate()
        operator.wait()
        install.delete_namespace(core, namespace)


def figures(result: dict, phases: list[Phase], target_ms: float) -> dict:
    """Violation and restore from the clients' p95 (the model's, whichever class served), and per class
    the replica-seconds and replicas asked for, priced into the run's cost."""
    by_class = {pool: report(phases, result["requests"], points, target_ms, "p95")[0]
                for pool, points in result["points"].items()}  # fmt: skip
    clients = next(iter(by_class.values()))
    points = next(iter(result["points"].values()))
    # The same p95 over 1 s: a burst of slow requests shorter than the 10 s window counts as long as the window.
    short = report(phases, result["requests"], points, target_ms, "p95", window_s=1.0)[0]
    replica_s = {pool: sum(r.replica_s for r in reports) for pool, reports in by_class.items()}
    prices = {pool.name: replica_price(pool) for pool in POOLS}
    return {
        "violation": sum(r.violation_s for r in clients),
        "violation_1s": sum(r.violation_s for r in short),
        "slow": sum(1 for r in result["requests"] if not r.ok or r.latency_s * 1000 > target_ms),
        "restore": clients[1].restore_s,
        "cost": sum(seconds / 3600 * prices[pool] for pool, seconds in replica_s.items()),
        "replica_s": replica_s,
        "replicas": {pool: [r.replicas for r in reports] for pool, reports in by_class.items()},
        "requests": len(result["requests"]),
        "failed": sum(1 for r in result["requests"] if not r.ok),
    }


def write_report(
    by_policy: dict, runs: dict[str, Run], phases: list[Phase], started: datetime, loads, target_ms: float, max_r: int
) -> str:
    lines = [
        "# Least-cost placement vs scaling each class alone",
        "",
        f"`e2e/bench_cost.py`, {started:%Y-%m-%d %H:%M} UTC, on the local cluster's two real nodes local-0 and "
        f"local-1 (one machine, {os.cpu_count()} CPUs, {platform.machine()}; load average before/after "
        f"{loads[0][0]:.2f} / {loads[1][0]:.2f}). Both classes serve a SIMULATION (fixed service time, computes "
        "nothing) in real Triton, scaled by the real operator from real Prometheus.",
        "",
        "| class | node | SIMULATED service time | price per replica-hour | capacity counted per replica |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for pool, offer in zip(POOLS, offers(target_ms, max_r)):
        lines.append(
            f"| {pool.name} | {pool.node} | {pool.service_ms:g} ms | {replica_price(pool):.2f} | "
            f"{offer.capacity:.1f} req/s |"
        )
    lines += [
        "",
        f"SLO p95 < {target_ms:g} ms; minReplicas 0, maxReplicas {max_r} per class (PerClass keeps 1 per class). "
        "Load: " + ", ".join(f"{p.name} {p.rate:g} req/s for {p.seconds:g} s" for p in phases) + ", open-loop Poisson, "
        "the same seed for every policy. "
        + "; ".join(f"{run.name}: burstRequestsPerSecond {run.burst:g}" for run in runs.values() if run.burst),
        "",
        "| policy | violation s (client p95, 10 s window) | the same, 1 s window | requests over target | "
        "restore after step (s) | cost | replica-seconds per class | replicas per phase per class | requests | failed |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: |",
    ]
    results = {policy: figures(result, phases, target_ms) for policy, result in by_policy.items()}
    for policy, f in results.items():
        restore = "not restored" if f["restore"] is None else f"{f['restore']:.0f}"
        replica_s = ", ".join(f"{k}: {v:.0f}" for k, v in f["replica_s"].items())
        replicas = "; ".join(f"{k}: {v}" for k, v in f["replicas"].items())
        lines.append(
            f"| {policy} | {f['violation']:.0f} | {f['violation_1s']:.0f} | {f['slow']} | {restore} | {f['cost']:.4f} | "
            f"{replica_s} | {replicas} | {f['requests']} | {f['failed']} |"
        )
    for burst in sorted({run.burst for run in runs.values() if run.placement == "LeastCost"}):
        with_burst = f" plus {burst:g} req/s of burst capacity" if burst else ""
        lines += [
            "",
            f"The optimum (scaling.placement.place on each phase's rate{with_burst}, from the same offers):",
            "",
        ]
        best = optimum(phases, target_ms, max_r, burst)
        for phase, replicas, cost in best:
            lines.append(f"- {phase.name}, {phase.rate:g} req/s: {replicas}, {cost:.4f} for {phase.seconds:g} s")
        lines.append(f"- in all: {sum(c for _, _, c in best):.4f} (no time to scale counted)")
    per = results.get("PerClass")
    for name, least in results.items():
        if per is None or runs[name].placement != "LeastCost":
            continue
        saving = 1 - least["cost"] / per["cost"] if per["cost"] else 0.0
        met = saving >= 0.30 and least["violation"] <= per["violation"]
        cheaper = f"{saving:.0%} cheaper" if saving >= 0 else f"{-saving:.0%} dearer"
        lines += [
            "",
            f"Goal ({name} at least 30% cheaper than PerClass, with the same or fewer violation seconds): "
            f"**{'met' if met else 'not met'}**: {cheaper} ({least['cost']:.4f} vs {per['cost']:.4f}); "
            f"{least['violation']:.0f} vs {per['violation']:.0f} violation seconds.",
        ]
    for policy, result in by_policy.items():
        status = result["status"]
        lines += [
            "",
            f"{policy}: the model's status at the end: costPerHour {status.get('costPerHour')}; "
            + "; ".join(f"{t.get('hardwareClass')}: {t.get('slo', {})}" for t in status.get("targets", [])),
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--low", type=float, default=16.0, help="requests/s of the low phases; the step is 4x")
    parser.add_argument("--phase-seconds", type=float, nargs=3, default=(60.0, 150.0, 150.0))
    parser.add_argument("--policies", nargs="+", choices=POLICIES, default=list(POLICIES))
    parser.add_argument(
        "--burst",
        type=float,
        nargs="+",
        help="LeastCost+burst's burstRequestsPerSecond, a run each (default: the step, 3 x --low, and half of it)",
    )
    parser.add_argument(
        "--work-dir", type=Path, help="keep the operators' logs and the registry here (default: a temporary dir)"
    )
    args = parser.parse_args()
    os.environ["KUBECONFIG"] = str(paths.KUBECONFIG)  # subprocesses too: this cluster, whatever the shell names
    low, high, after = args.phase_seconds
    phases = [Phase("low", args.low, low), Phase("high", 4 * args.low, high), Phase("low-again", args.low, after)]
    bursts = args.burst or [3 * args.low, 1.5 * args.low]
    every = [Run("PerClass", "PerClass"), Run("LeastCost", "LeastCost")]
    every += [Run(f"LeastCost+burst {burst:g}", "LeastCost", burst) for burst in bursts]
    runs = {run.name: run for run in every if run.name.split(" ")[0] in args.policies}
    target_ms, max_r = 100.0, cost_workload.manifest("x", "LeastCost")["spec"]["slo"]["maxReplicas"]
    started, before = datetime.now(UTC), os.getloadavg()
    temporary = tempfile.TemporaryDirectory()
    work = args.work_dir or Path(temporary.name)
    work.mkdir(parents=True, exist_ok=True)
    with temporary, connection.api_client() as api:
        core = client.CoreV1Api(api)
        install.scale_operator(api, 0)  # the installed operator would act on the benchmark's namespaces too
        second_was_up = "local-1" in nodes.running()
        cluster.start_node(core, "local-1")
        cost_workload.set_prices(core, cost_workload.pool_prices())
        try:
            by_policy = {}
            for name, run in runs.items():
                print(f"{name} ...", flush=True)
                by_policy[name] = run_policy(api, run, phases, args.seed, work)
                print(f"  {figures(by_policy[name], phases, target_ms)}", flush=True)
        finally:
            cost_workload.set_prices(core, dict.fromkeys(cost_workload.pool_prices()))
            if not second_was_up:
                nodes.delete(core, "local-1")
            install.scale_operator(api, 1)
    RESULTS.mkdir(exist_ok=True)
    text = write_report(by_policy, runs, phases, started, (before, os.getloadavg()), target_ms, max_r)
    (RESULTS / "cost.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
