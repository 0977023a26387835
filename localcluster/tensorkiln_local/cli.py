"""`tensorkiln-local`: the local development cluster, the detached operator on it, and the
files generated from the code (CRDs, plain manifests)."""

import argparse
import sys
from pathlib import Path

from tensorkiln_local.cluster import paths
from tensorkiln_local.cluster.binaries import BINARIES


def _cluster(args) -> int:
    from tensorkiln_local.cluster import cluster

    if args.action == "up":
        cluster.up(Path(args.pools))
    elif args.action == "down":
        cluster.down()
    elif args.action == "status":
        return cluster.status()
    elif args.action == "env":
        print(cluster.env(), end="")
    elif args.action == "build":
        cluster.build(args.names)
    return 0


def _node(args) -> int:
    from kubernetes import client
    from tensorkiln import kube

    from tensorkiln_local.cluster import localnodes

    with kube.api_client(str(paths.KUBECONFIG)) as api:
        if args.action == "up":
            localnodes.start(client.CoreV1Api(api), args.name)
            print(f"real node {args.name} is Ready (log: {localnodes.LocalNode(args.name).log})")
        else:
            localnodes.remove(client.CoreV1Api(api), args.name)
            print(f"real node {args.name} stopped and deleted")
    return 0


def _crds(args) -> int:
    from tensorkiln.api.crdgen import write_crds

    chart = Path(args.chart_output) if args.chart_output else None
    for path in write_crds(Path(args.output), chart):
        print(path)
    return 0


def _manifests(args) -> int:
    from tensorkiln_local import installmanifests

    for path in installmanifests.write(Path(args.output)):
        print(path)
    return 0


def _operator(args) -> int:
    from tensorkiln_local import operator_process

    if args.action == "start":
        print(f"operator started, pid {operator_process.start()}; log: {operator_process.LOGFILE}")
    elif args.action == "stop":
        print("operator stopped" if operator_process.stop() else "operator was not running")
    return 0


def _wait(args) -> int:
    from tensorkiln_local import converge

    return converge.wait(args.timeout)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="tensorkiln-local", description=" ".join(__doc__.split()))
    commands = root.add_subparsers(dest="command", required=True)

    cluster = commands.add_parser("cluster", help="the local cluster (real control plane, kwok GPU pools, local-0)")
    cluster_actions = cluster.add_subparsers(dest="action", required=True)
    up = cluster_actions.add_parser("up", help="create or restart the cluster and converge pools and CRDs (idempotent)")
    up.add_argument("--pools", default=str(paths.DEFAULT_POOLS), help="node pool file (default: %(default)s)")
    cluster_actions.add_parser("down", help="stop the operator, local node and control plane; delete the cluster")
    cluster_actions.add_parser("status", help="what runs; exit 1 if the API server is down")
    cluster_actions.add_parser("env", help='shell exports: eval "$(tensorkiln-local cluster env)"')
    build = cluster_actions.add_parser("build", help="build or reuse the cached binaries (helm only when named)")
    # Named choices: a wrong name is refused with the list, not a KeyError.
    build.add_argument("names", nargs="*", choices=sorted(BINARIES), help="default: the cluster's own binaries")
    cluster.set_defaults(func=_cluster)

    node = commands.add_parser(
        "node", help="more real nodes on this machine (local-1 ..), beside the cluster's local-0"
    )
    node_actions = node.add_subparsers(dest="action", required=True)
    for action, text in (
        ("up", "start its agent (idempotent); its pods get 127.0.N.x"),
        ("down", "stop it, delete the Node"),
    ):
        node_actions.add_parser(action, help=text).add_argument("name", choices=[f"local-{i}" for i in range(1, 10)])
    node.set_defaults(func=_node)

    crds = commands.add_parser("crds", help="generate crds/*.yaml from the pydantic API types")
    crds.add_argument("--output", default=str(paths.CRDS_DIR))
    crds.add_argument(
        "--chart-output",
        default=str(paths.CHART_DIR / "crds"),
        help="the chart's copy, with kopf's peering CRDs ('' to skip; default: %(default)s)",
    )
    crds.set_defaults(func=_crds)

    manifests = commands.add_parser(
        "manifests",
        help="render manifests/install/ and manifests/kustomization.yaml from the Helm chart (default values)",
    )
    manifests.add_argument("--output", default=str(paths.MANIFESTS_DIR))
    manifests.set_defaults(func=_manifests)

    operator = commands.add_parser("operator", help="the operator as a detached process on the local cluster")
    operator_actions = operator.add_subparsers(dest="action", required=True)
    operator_actions.add_parser("start", help="start detached against the local cluster (tensorkiln operator run)")
    operator_actions.add_parser("stop", help="stop the detached operator")
    operator.set_defaults(func=_operator)

    wait = commands.add_parser("wait", help="wait until every InferenceModel is handled and its compile pods placed")
    wait.add_argument("--timeout", type=float, default=300, help="seconds (default: %(default)s)")
    wait.set_defaults(func=_wait)
    return root


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    sys.exit(args.func(args))
