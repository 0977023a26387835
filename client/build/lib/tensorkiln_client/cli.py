"""`tensorkiln`: TensorKiln's client command line; `tensorkiln infer` sends one request to a served model."""

import argparse
import sys
from pathlib import Path


def _infer(args) -> int:
    from . import infer, request

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
