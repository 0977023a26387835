"""`tensorkiln-operator run`: the operator in the foreground, the container's command.

A request to a served model is the client's command (`tensorkiln infer`, the package tensorkiln_client).
The development commands (the local cluster, generated files) are `tensorkiln-local`, in the
tensorkiln-local distribution under localcluster/, which the images do not install."""

import argparse
import sys


def _run(args) -> int:
    from tensorkiln import operator_runner

    if args.all_namespaces and args.namespace:
        sys.exit("tensorkiln-operator run: --all-namespaces and --namespace exclude each other")
    from tensorkiln.leadership import Timings

    timings = Timings(args.lease_duration, args.renew_deadline, args.retry_period)
    if problems := timings.problems():
        sys.exit("tensorkiln-operator run: " + "; ".join(problems))
    operator_runner.run(args.namespace, args.log_format, args.leader_election_lease, args.leader_election_namespace,
                        timings)  # fmt: skip
    return 0


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="tensorkiln-operator", description=" ".join(__doc__.split()))
    commands = root.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run in the foreground (the container's command)")
    run.add_argument("--namespace", action="append", default=[], help="watch only these namespaces (repeatable)")
    run.add_argument("--all-namespaces", action="store_true", help="watch every namespace (the default)")
    election = run.add_argument_group("leader election (the chart's Deployment; default: this operator leads alone)")
    election.add_argument("--leader-election-lease", metavar="NAME", help="campaign for this coordination.k8s.io Lease")
    election.add_argument(
        "--leader-election-namespace", metavar="NS", help="the Lease's namespace (default: POD_NAMESPACE)"
    )
    election.add_argument("--lease-duration", type=int, default=8, metavar="S", help="seconds a leader's renewal holds")
    election.add_argument(
        "--renew-deadline", type=int, default=6, metavar="S", help="a leader unable to renew this long stops"
    )
    election.add_argument(
        "--retry-period", type=int, default=2, metavar="S", help="seconds between a candidate's tries"
    )
    run.add_argument(
        "--log-format", choices=["json", "full", "plain"], help="default: TENSORKILN_LOG_FORMAT, else json"
    )
    run.set_defaults(func=_run)
    return root


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    sys.exit(args.func(args))
