"""Benchmark: what a request costs Triton beside the engine, by transport: gRPC, HTTP (binary tensors) and gRPC
with system shared memory (the tensor never crosses the socket).

One real tritonserver (the serving image's native onnxruntime backend, as e2e/bench_serving.py starts it) on
CPU 0 alone serves the rapidocr cls classifier raw (the baseline: onnxruntime defaults, one intra-op thread, no
dynamic batching); NVIDIA's perf_analyzer loads it from CPU 1 with 32 closed-loop clients of batch-1 requests,
each transport twice, in turn. The engine alone is timed on CPU 0 with onnxruntime first: its samples per
second are the bound a server adds its own per-request work to. Writes e2e/results/transport.md.

Usage: .venv/bin/python e2e/bench_transport.py [--window 5] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tensorkiln_local import perf_analyzer
from tensorkiln_local.cluster.ocr_models import CLS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_serving import Server  # noqa: E402  (a sibling script: its server, pinned as it pins it)

RESULTS = Path(__file__).resolve().parent / "results" / "transport.md"
SERVER_CPU, CLIENT_CPU = 0, 1
MODEL = "baseline"
CONFIG = f"""name: "{MODEL}" platform: "onnxruntime_onnx" max_batch_size: 32
input {{ name: "x" data_type: TYPE_FP32 dims: 3 dims: 48 dims: 192 }}
output {{ name: "save_infer_model/scale_0.tmp_1" data_type: TYPE_FP32 dims: 2 }}
instance_group {{ count: 1 kind: KIND_CPU }} default_model_filename: "model.onnx"
parameters {{ key: "intra_op_thread_count" value {{ string_value: "1" }} }}
"""
TRANSPORTS = {  # name: (perf_analyzer -i, port, extra flags)
    "gRPC": ("grpc", 8001, []),
    "HTTP, binary tensors": ("http", 8000, []),
    "gRPC, system shared memory": ("grpc", 8001, ["--shared-memory", "system"]),
}


def engine_samples_per_second(runs: int = 400) -> float:
    """The engine alone on the server's CPU: batch-1 p50 with onnxruntime, one thread, default options."""
    os.sched_setaffinity(0, {SERVER_CPU})
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(CLS.path), options, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).random((1, 3, 48, 192), dtype=np.float32)
    for _ in range(50):
        session.run(None, {"x": x})
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, {"x": x})
        times.append(time.perf_counter() - start)
    os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
    return 1 / float(np.median(times))


def load(tool: perf_analyzer.PerfAnalyzer, server: Server, transport: str, concurrency: int, window_s: float):
    protocol, port, extra = TRANSPORTS[transport]
    with tempfile.TemporaryDirectory(prefix="transport-") as tmp:
        report = Path(tmp) / "report.csv"
        argv, env = tool.command([
            "-m", MODEL, "-u", f"{server.ip}:{port}", "-i", protocol, "-b", "1", *extra,
            "--concurrency-range", f"{concurrency}:{concurrency}", "--measurement-mode", "time_windows",
            "--measurement-interval", str(round(window_s * 1000)), "--max-trials", "3",
            "--stability-percentage", "1000", "-f", str(report),
        ])  # fmt: skip
        cpu, start = server.cpu_seconds(), time.monotonic()
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60 + 10 * window_s,
                              preexec_fn=lambda: os.sched_setaffinity(0, {CLIENT_CPU}))  # fmt: skip
        cores = (server.cpu_seconds() - cpu) / (time.monotonic() - start)
        if done.returncode != 0 or not report.exists():
            raise SystemExit(f"perf_analyzer ({transport}) failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        return perf_analyzer.parse(report.read_text())[0], cores


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=5.0, help="seconds per perf_analyzer window (3 windows)")
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("needs 2 CPUs: the server on one, the load generator on the other")
    bound = engine_samples_per_second()
    root = Path(tempfile.mkdtemp(prefix="bench-transport-"))
    (root / "models" / MODEL / "1").mkdir(parents=True)
    shutil.copyfile(CLS.path, root / "models" / MODEL / "1" / "model.onnx")
    (root / "models" / MODEL / "config.pbtxt").write_text(CONFIG)
    server = Server(root, {SERVER_CPU})
    rows = []
    try:
        server.wait_ready()
        tool = perf_analyzer.ensure()
        for _ in range(2):
            for transport in TRANSPORTS:
                measured, cores = load(tool, server, transport, args.concurrency, args.window)
                rows.append((transport, measured, cores))
                print(f"{transport:28} {measured.throughput:7.1f} req/s  p95 {measured.p95_ms:6.2f} ms  "
                      f"server {cores:.2f} cores", flush=True)  # fmt: skip
    finally:
        server.process.terminate()
        server.process.wait(30)
        shutil.rmtree(root, ignore_errors=True)
    lines = [
        "# What a request costs Triton beside the engine, by transport (e2e/bench_transport.py)",
        "",
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, {os.cpu_count()} CPUs. tritonserver 2.51 "
        f"(the serving image's native onnxruntime backend) on CPU {SERVER_CPU} alone, serving the rapidocr cls "
        f"classifier raw (one intra-op thread, no dynamic batching); perf_analyzer on CPU {CLIENT_CPU}, "
        f"{args.concurrency} closed-loop clients of batch-1 requests, three {args.window:.0f} s windows a point, "
        "each transport twice in turn.",
        "",
        f"The engine alone on CPU {SERVER_CPU} (onnxruntime {ort.__version__}, batch 1, p50): {bound:.0f} samples/s, "
        "the bound a server's own per-request work comes on top of.",
        "",
        "| transport | req/s | p95 ms | server cores | of the engine's bound | server CPU per request beside the engine |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for transport, measured, cores in rows:
        beside = cores / measured.throughput - 1 / bound
        lines.append(f"| {transport} | {measured.throughput:.0f} | {measured.p95_ms:.1f} | {cores:.2f} | "
                     f"{measured.throughput / bound:.2f}x | {beside * 1000:.2f} ms |")  # fmt: skip
    RESULTS.write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
