"""`tensorkiln-compile`: the CompileJob pod's entrypoint.

The Job passes `--termination-log PATH --work-dir DIR` and the CompileJobSpec (camelCase JSON)
in $TENSORKILN_COMPILE_SPEC; `--spec FILE` reads it from a file for local runs. $TENSORKILN_NAMESPACE,
the pod's namespace, goes into the engine's manifest. Exit codes:
0 published, 2 bad input (the Job fails at once), 1 anything else (the Job may retry).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from pydantic import ValidationError
from tensorkiln_api import CompileJobSpec, field_errors

from . import __version__, pipeline, report
from .benchmark import BenchmarkPlan
from .candidates.tensorrt import HARDWARE_COMPATIBILITY
from .errors import EXIT_FAILED, EXIT_OK, CompileError, InvalidInput, first_line

log = logging.getLogger("tensorkiln_compiler")
SPEC_ENV = "TENSORKILN_COMPILE_SPEC"
NAMESPACE_ENV = "TENSORKILN_NAMESPACE"


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.runs < 1 or args.warmup < 0:
        parser.error("--runs must be >= 1 and --warmup >= 0")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    options = pipeline.Options(
        benchmark=BenchmarkPlan(warmup=args.warmup, runs=args.runs, time_cap_s=args.time_cap),
        trt={
            "hardware_compatibility": args.trt_hardware_compatibility,
            "version_compatible": args.trt_version_compatible,
        },
        tune_runtime_settings=not args.no_runtime_settings_tuning,
        namespace=os.environ.get(NAMESPACE_ENV) or None,
    )
    try:
        payload, code = pipeline.run(load_spec(args.spec), args.work_dir, options).payload, EXIT_OK
    except CompileError as e:
        log.error("%s: %s", e.reason, e.message)
        payload, code = report.failure(e.reason, e.message), e.exit_code
    except Exception as e:  # a bug or an unforeseen runtime failure: report it, let the Job retry
        log.exception("compile failed")
        payload, code = report.failure("InternalError", f"{type(e).__name__}: {first_line(e)}"), EXIT_FAILED
    if args.termination_log:
        report.write(args.termination_log, payload)
    print(report.render(payload))
    return code


def load_spec(path: Path | None) -> CompileJobSpec:
    where = str(path) if path else f"${SPEC_ENV}"
    text = path.read_text() if path else os.environ.get(SPEC_ENV)
    if not text:
        raise InvalidInput("InvalidSpec", f"no CompileJobSpec: set ${SPEC_ENV} or pass --spec FILE")
    try:
        return CompileJobSpec.model_validate(json.loads(text))
    except json.JSONDecodeError as e:
        raise InvalidInput("InvalidSpec", f"{where} is not JSON: {e}") from e
    except ValidationError as e:
        raise InvalidInput("InvalidSpec", f"{where}: " + "; ".join(field_errors(e))) from e


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tensorkiln-compile", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=__version__)
    parser.add_argument(
        "--termination-log", type=Path, help="where the JSON result goes (the pod's terminationMessagePath)"
    )
    parser.add_argument(
        "--work-dir", type=Path, required=True, help="scratch space: downloads, candidates, staged engine"
    )
    parser.add_argument("--spec", type=Path, help=f"CompileJobSpec JSON file (default: ${SPEC_ENV})")
    parser.add_argument("--warmup", type=int, default=BenchmarkPlan.warmup, help="benchmark warm-up runs")
    parser.add_argument("--runs", type=int, default=BenchmarkPlan.runs, help="benchmark timed runs per batch size")
    parser.add_argument(
        "--time-cap", type=float, default=BenchmarkPlan.time_cap_s, help="seconds per candidate and batch size"
    )
    parser.add_argument(
        "--no-runtime-settings-tuning",
        action="store_true",
        help="skip the tuning stage: every candidate keeps its compiler's default runtime settings",
    )
    parser.add_argument("--trt-hardware-compatibility", choices=sorted(HARDWARE_COMPATIBILITY), default="none")
    parser.add_argument("--trt-version-compatible", action="store_true", help="plans newer TensorRT runtimes can load")
    return parser
