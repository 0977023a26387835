"""`tensorkiln`: the operator's command line (`tensorkiln operator run`, the container's command)
and one request to a served model (`tensorkiln infer`).

The development commands (the local cluster, generated files) are `tensorkiln-local`, in the
tensorkiln-local distribution under localcluster/, which the images do not install."""

import argparse
import sys
from pathlib import Path


def _operator(args) -> int:
    from tensorkiln import operator_runner

    if args.all_namespaces and args.namespace:
        sys.exit("tensorkiln operator run: --all-namespaces and --namespace exclude each other")
    operator_runner.run(args.namespace, args.log_format, args.peering)
    return 0


def _infer(args) -> int:
    from tensorkiln.serving import infer, request

    try:
        labels = args.labels.split(",") if args.labels else None
        lines = infer.run(args.model, args.namespace, Path(args.input), args.address, args.top_k, labels)
    except (request.RequestError, OSError) as error:
        sys.exit(f"tensorkiln infer: {error}")
    print("\n".join(lines))
    return 0


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="tensorkiln", description=" ".join(__doc__.split()))
    commands = root.add_subparsers(dest="command", required=True)
    operator = commands.add_parser("operator", help="run the operator")
    operator_actions = operator.add_subparsers(dest="action", required=True)
    run = operator_actions.add_parser("run", help="run in the foreground (the container's command)")
    run.add_argument("--namespace", action="append", default=[], help="watch only these namespaces (repeatable)")
    run.add_argument("--all-namespaces", action="store_true", help="watch every namespace (the default)")
    run.add_argument("--peering", help="join this kopf peering object (the chart's Deployment; default: standalone)")
    run.add_argument(
        "--log-format", choices=["json", "full", "plain"], help="default: TENSORKILN_LOG_FORMAT, else json"
    )
    run.set_defaults(func=_operator)

    infer = commands.add_parser("infer", help="send one request to a served InferenceModel and print the answer")
    infer.add_argument("model", help="the InferenceModel's name")
    infer.add_argument("-n", "--namespace", default="default")
    infer.add_argument("--input", required=True, help=".npy (one input), .npz (arrays by input name) or an image")
    infer.add_argument("--address", help="Triton's gRPC host:port (default: a ready pod behind the model's Service)")
    infer.add_argument("--top-k", type=int, default=5, help="classes printed for a classifier (default: %(default)s)")
    infer.add_argument("--labels", help="a classifier's class names, comma-separated, in class order")
    infer.set_defaults(func=_infer)
    return root


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    sys.exit(args.func(args))
