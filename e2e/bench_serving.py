"""Benchmark: Triton's dynamic batching, fixed and as the compile tunes it, and the selected engine vs the raw ONNX.

One real tritonserver (the nvidia-pytriton wheel's server with the serving image's native onnxruntime and
openvino backends, as the local node's Triton pods run it) on a loopback address serves four models of the
rapidocr cls classifier, each with the configs the operator renders for any cluster (the intra-op threads per
instance those the compile measured the engine with):

    selected-batching  the engine tensorkiln-compile selects, behind Triton's dynamic batcher with the
                       InferenceModel API's fixed defaults (preferred [8, 16], 2000 µs), one instance
    selected-tuned     the same engine with the batcher and instance count the compile chose for it by
                       measurement (CompileJob spec.batcherTuning -> manifest.serving_tuning)
    selected-nobatch   the same engine, no dynamic batcher (max_batch_size 32, so shapes match)
    baseline           the unmodified ONNX on onnxruntime, no dynamic batcher

The selected engine comes from the real compile pipeline (every candidate built, checked and
benchmarked with small run counts, then the batcher tuned for serving.maxBatchSize 32 with no SLO:
the lone-client rule) published to a filesystem registry in a temporary directory; the engines are
laid out as the Triton pod's init container lays them out, configs are rendered by
tensorkiln.builders.tritonconfig: selected-tuned's from a spec.serving that leaves the batcher
fields and instancesPerGPU unset, so the manifest's choice fills them, as the operator renders it.
For every concurrency, each model in turn gets closed-loop clients (threads sending batch-1
[1,3,48,192] requests of rendered text with tritonclient.grpc, one client per thread): a warm-up,
then a fixed measured window. Client-side latency percentiles, throughput, and the mean batch size
from Triton's nv_inference_count / nv_inference_exec_count. On a machine of 2 or more CPUs the server
and the load generator get CPUs of their own (--pin, the default): the compile and the server run on CPU 0
alone, so the engine is chosen, tuned and timed (the bound) on the one core that serves it, and the clients
run on the others. Without pinning they share the CPUs, and are part of the measurement. Writes e2e/results/serving.md
and serving.png, with selected-tuned's goals (p95 at 1 client within 1.2x of no batching; at the
highest concurrency, throughput at least 0.8x the bound the engine's batch efficiency allows). Then NVIDIA's
perf_analyzer (tensorkiln_local.perf_analyzer), a second, independent load generator, loads selected-tuned and
selected-nobatch at the lowest and highest concurrency, and the goal is judged on its figures too. No cluster needed.

Usage: .venv/bin/python e2e/bench_serving.py [--duration 5] [--warmup 2] [--concurrency 1 8 32] [--output DIR]
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import onnxruntime as ort
import tritonclient.grpc as grpcclient
from google.protobuf import text_format
from tensorkiln.builders.tritonconfig import (
    batcher,
    config_dict,
    measured_threads,
    parse,
    render,
    selected_settings,
    served_settings,
)
from tensorkiln_api import CompileJobSpec, ServingOptions, batching
from tensorkiln_api.registry.manifest import EngineManifest, ServingTuning
from tensorkiln_client.triton import settled_counters
from tensorkiln_compiler import pipeline
from tensorkiln_compiler.benchmark import BenchmarkPlan
from tensorkiln_local import perf_analyzer, triton_process
from tensorkiln_local.cluster.ocr_models import CLS, write_dataset
from tensorkiln_serving import enginefetch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "e2e" / "results"
BIN = Path(sys.executable).parent
INPUT = "x"
MAX_BATCH = 32
PREFERRED, QUEUE_DELAY_US = [8, 16], 2000  # the InferenceModel API's dynamicBatching defaults
MODELS = ("selected-batching", "selected-tuned", "selected-nobatch", "baseline")
COLOURS = {"selected-batching": "tab:blue", "selected-tuned": "tab:green", "selected-nobatch": "tab:orange",
           "baseline": "tab:grey"}  # fmt: skip
LONE_CLIENT_SLACK = batching.LONE_CLIENT_SLACK  # goal: selected-tuned's p95 at 1 client within 1.2x of no batching
BOUND_SHARE = (
    0.8  # goal: selected-tuned's throughput at the highest concurrency over the engine's batch-efficiency bound
)
TRITON_ARGS = [
    "--model-repository={repository}", "--model-control-mode=none", "--strict-readiness=true", "--allow-metrics=true",
    "--http-port=8000", "--grpc-port=8001", "--metrics-port=8002", "--log-verbose=0",
]  # fmt: skip
REQUEST_TIMEOUT_S = 30.0  # one request; a stuck server ends the point instead of hanging it
MAX_REQUESTS_PER_POINT = 100_000  # with the time window: every point stops by itself
MAX_ERRORS_PER_CLIENT = 5
SAMPLES = 64  # distinct rendered text lines; request i sends line i % SAMPLES
SECOND_OPINION = ("selected-tuned", "selected-nobatch")  # the models perf_analyzer loads too

log = logging.getLogger("bench_serving")


# --- engines -------------------------------------------------------------------------------------


def compile_selected(work: Path, registry_uri: str, plan: BenchmarkPlan) -> tuple[str, EngineManifest]:
    """The real compile pipeline for cls, batches up to 32, the batcher tuned for serving.maxBatchSize 32 without
    an SLO (the lone-client rule); returns the published engine's digest and manifest (manifest.serving_tuning)."""
    dataset = write_dataset(CLS, work / "cls-calibration.npz", 32)
    spec = CompileJobSpec.model_validate({
        "modelName": "ocr-cls",
        "source": {"uri": f"file://{CLS.path}"},
        "hardware": {"className": "cpu-bench", "kind": "CPU", "nodeSelector": {}},
        "compilers": ["OnnxRuntime", "OpenVINO"],
        "precisions": ["FP32", "BF16", "INT8"],
        "shapes": CLS.shapes(batch_max=MAX_BATCH),
        "calibration": {"datasetUri": f"file://{dataset}", "samples": 32},
        "accuracy": {"minTop1Agreement": 1.0},
        "objective": {"metric": "LatencyP95", "batchSize": CLS.batch_size},
        "batcherTuning": {"maxBatchSize": MAX_BATCH},
        "registry": {"uri": registry_uri},
        "optionsHash": "bench-serving-cls",
    })  # fmt: skip
    outcome = pipeline.run(spec, work / "compile", pipeline.Options(benchmark=plan))
    return outcome.payload["engine"]["digest"], outcome.manifest


@dataclass(frozen=True)
class Serving:
    """What the benchmark lets one vary in the served configs (every model but selected-tuned, whose batcher and
    instances are the compile's choice)."""

    preferred: tuple[int, ...] = tuple(PREFERRED)
    queue_delay_us: int = QUEUE_DELAY_US
    instances: int = 1

    def spec(self, batching: bool) -> dict:
        """An InferenceModel's spec.serving, with the batcher on or off."""
        return {
            "maxBatchSize": MAX_BATCH,
            "instancesPerGPU": 1,
            "dynamicBatching": {
                "enabled": batching,
                "preferredBatchSizes": list(self.preferred),
                "maxQueueDelayMicroseconds": self.queue_delay_us,
                "queuePolicy": {"timeoutAction": "REJECT", "timeoutMicroseconds": 0, "maxQueueSize": 0},
            },
        }


def tuned_spec() -> dict:
    """An InferenceModel's spec.serving that sets maxBatchSize alone, as the operator gets it (the API's dump): the
    batcher fields and instancesPerGPU unset, so config_dict takes them from manifest.serving_tuning."""
    serving = ServingOptions.model_validate({"maxBatchSize": MAX_BATCH})
    return serving.model_dump(by_alias=True, exclude_none=True, mode="json")


def served_threads(manifest: EngineManifest) -> int:
    """The CPU threads per instance the rendered config gives the engine: those the compile measured it with."""
    return measured_threads(selected_settings(manifest)) or 1


def write_config(path: Path, name: str, manifest: EngineManifest, spec: dict, instances: int | None) -> str:
    """config.pbtxt for spec.serving `spec`; `instances`: the instance count, None to keep config_dict's."""
    config = config_dict(name, manifest, spec)
    if instances is not None:
        config["instanceGroup"][0]["count"] = instances  # tritonconfig gives CPU classes 1 per pod untuned
    text = render(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return text


def lay_out_repository(
    root: Path, registry_uri: str, digest: str, manifest: EngineManifest, serving: Serving
) -> dict[str, str]:
    """The four models under root/models; returns each config.pbtxt."""
    repository, configs = root / "models", {}
    selected = {
        "selected-batching": (serving.spec(True), serving.instances),
        "selected-tuned": (tuned_spec(), None),  # manifest.serving_tuning's batcher and instances
        "selected-nobatch": (serving.spec(False), serving.instances),
    }
    for name, (spec, instances) in selected.items():
        config = root / "etc" / name / "config.pbtxt"
        configs[name] = write_config(config, name, manifest, spec, instances)
        enginefetch.lay_out(registry_uri, digest, name, config, repository, python_backend=False)

    # The raw ONNX as Triton would get it from a user: onnxruntime, default options, no batcher: the compile's
    # baseline candidate (graphOptimizationLevel "default"), rendered as the operator would render it.
    baseline = manifest.model_copy(
        update={
            "compiler": "OnnxRuntime",
            "precision": "FP32",
            "selection": manifest.selection.model_copy(update={"winner": "baseline"}),
        }
    )
    version = repository / "baseline" / enginefetch.VERSION
    version.mkdir(parents=True)
    config = repository / "baseline" / "config.pbtxt"
    configs["baseline"] = write_config(config, "baseline", baseline, serving.spec(False), serving.instances)
    shutil.copyfile(CLS.path, version / "model.onnx")
    return configs


# --- the server ------------------------------------------------------------------------------------


class Server:
    """tritonserver (the serving image's, as a process of this machine, so that it can be pinned to CPUs) on
    its own loopback address; `cpus`: the CPUs it may run on, None for all."""

    def __init__(self, root: Path, cpus: set[int] | None = None):
        self.ip = triton_process.free_loopback_address()
        args = [arg.format(repository=root / "models") for arg in TRITON_ARGS]
        argv, env = triton_process.command(
            triton_process.local_tritonserver(root / "backends"),
            args,
            self.ip,
            {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"},
        )
        self.log_path = root / "tritonserver.log"
        with open(self.log_path, "wb") as out:
            self.process = subprocess.Popen(
                argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
            )  # fmt: skip

    @property
    def grpc(self) -> str:
        return f"{self.ip}:8001"

    def wait_ready(self, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"tritonserver exited with {self.process.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(f"http://{self.ip}:8000/v2/health/ready", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise SystemExit(f"tritonserver not ready after {timeout_s:.0f} s:\n{self.tail()}")

    def tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def counters(self, model: str) -> dict[str, float]:
        return settled_counters(self.ip, model)

    def cpu_seconds(self) -> float:
        """User + system CPU time of the server (its process group)."""
        total, tick = 0.0, os.sysconf("SC_CLK_TCK")
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # exited meanwhile
            if int(fields[2]) == self.process.pid:  # pgrp: start_new_session made the server its leader
                total += (int(fields[11]) + int(fields[12])) / tick
        return total

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


# --- load --------------------------------------------------------------------------------------------


@dataclass
class Point:
    """One (model, concurrency) window, or several pooled: sums, so that rounds add up."""

    model: str
    concurrency: int
    seconds: float  # measured wall time
    latencies_ms: np.ndarray  # client side, one per answered request
    errors: int
    triton: dict[str, float]  # deltas of this model's nv_inference_* counters over the window
    server_cpu_s: float  # CPU seconds of the server
    client_cpu_s: float  # CPU seconds of this process (the clients)
    load: float  # 1-minute load average after the (last) window

    def __add__(self, other: Point) -> Point:
        names = self.triton.keys() | other.triton.keys()
        return Point(
            model=self.model,
            concurrency=self.concurrency,
            seconds=self.seconds + other.seconds,
            latencies_ms=np.concatenate([self.latencies_ms, other.latencies_ms]),
            errors=self.errors + other.errors,
            triton={n: self.triton.get(n, 0.0) + other.triton.get(n, 0.0) for n in names},
            server_cpu_s=self.server_cpu_s + other.server_cpu_s,
            client_cpu_s=self.client_cpu_s + other.client_cpu_s,
            load=other.load,
        )

    @property
    def requests(self) -> int:
        return len(self.latencies_ms)

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds

    def p(self, q: float) -> float:
        return float(np.percentile(self.latencies_ms, q)) if len(self.latencies_ms) else math.nan

    def _per(self, name: str, per: str) -> float:
        return self.triton.get(name, 0.0) / (self.triton.get(per, 0.0) or math.nan)

    @property
    def mean_batch(self) -> float:
        return self._per("nv_inference_count", "nv_inference_exec_count")

    @property
    def queue_ms(self) -> float:
        """Triton's mean queue time per request."""
        return self._per("nv_inference_queue_duration_us", "nv_inference_request_success") / 1000

    @property
    def compute_ms(self) -> float:
        """Triton's mean compute time per request (a batch's time counts for every request in it)."""
        return self._per("nv_inference_compute_infer_duration_us", "nv_inference_request_success") / 1000

    @property
    def server_cpu(self) -> float:
        return self.server_cpu_s / self.seconds  # cores busy

    @property
    def client_cpu(self) -> float:
        return self.client_cpu_s / self.seconds


def drive(address: str, model: str, concurrency: int, seconds: float, samples: np.ndarray):
    """`concurrency` closed-loop clients for `seconds`: (latencies in ms, errors, wall seconds until all stopped)."""
    per_client = math.ceil(MAX_REQUESTS_PER_POINT / concurrency)
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    errors = [0] * concurrency
    start = time.perf_counter()
    deadline = start + seconds

    def client(k: int) -> None:
        with grpcclient.InferenceServerClient(address) as triton:
            tensor = grpcclient.InferInput(INPUT, [1, *samples.shape[1:]], "FP32")
            i = k
            while time.perf_counter() < deadline and len(latencies[k]) < per_client:
                tensor.set_data_from_numpy(samples[i % len(samples)][None])
                sent = time.perf_counter()
                try:
                    triton.infer(model, [tensor], client_timeout=REQUEST_TIMEOUT_S)
                except Exception as error:  # counted and reported; a client that keeps failing stops
                    errors[k] += 1
                    log.warning("%s c=%d client %d: %s", model, concurrency, k, error)
                    if errors[k] >= MAX_ERRORS_PER_CLIENT:
                        return
                    continue
                latencies[k].append((time.perf_counter() - sent) * 1000)
                i += concurrency

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + REQUEST_TIMEOUT_S + 10)
    return np.array([v for values in latencies for v in values]), sum(errors), time.perf_counter() - start


def measure(server: Server, model: str, concurrency: int, args, samples: np.ndarray) -> Point:
    drive(server.grpc, model, concurrency, args.warmup, samples)
    before, cpu_before, client_before = server.counters(model), server.cpu_seconds(), time.process_time()
    latencies, errors, seconds = drive(server.grpc, model, concurrency, args.duration, samples)
    after, cpu_after, client_after = server.counters(model), server.cpu_seconds(), time.process_time()

    point = Point(
        model=model,
        concurrency=concurrency,
        seconds=seconds,
        latencies_ms=latencies,
        errors=errors,
        triton={name: after[name] - before.get(name, 0.0) for name in after},
        server_cpu_s=cpu_after - cpu_before,
        client_cpu_s=client_after - client_before,
        load=os.getloadavg()[0],
    )
    print(
        f"  {model:18} c={concurrency:<3} {point.throughput:7.1f} req/s  p50 {point.p(50):7.2f}  p95 {point.p(95):7.2f}"
        f"  p99 {point.p(99):7.2f} ms  batch {point.mean_batch:5.2f}  errors {errors}",
        flush=True,
    )
    return point


def check_outputs(server: Server, samples: np.ndarray) -> dict[str, str]:
    """Each model answers batch-1 requests like the original ONNX on onnxruntime (top-1, and the max abs error)."""
    reference = ort.InferenceSession(str(CLS.path), providers=["CPUExecutionProvider"]).run(None, {INPUT: samples})[0]
    checks = {}
    with grpcclient.InferenceServerClient(server.grpc) as triton:
        for model in MODELS:
            outputs = []
            for row in samples[:16]:
                tensor = grpcclient.InferInput(INPUT, [1, *row.shape], "FP32")
                tensor.set_data_from_numpy(row[None])
                result = triton.infer(model, [tensor], client_timeout=REQUEST_TIMEOUT_S)
                outputs.append(result.as_numpy(result.get_response().outputs[0].name))
            output = np.concatenate(outputs)
            agree = float(np.mean(output.argmax(1) == reference[:16].argmax(1)))
            error = float(np.abs(output - reference[:16]).max())
            if agree < 1.0:
                raise SystemExit(f"{model} disagrees with the original ONNX on {1 - agree:.0%} of 16 lines")
            checks[model] = f"top-1 agreement {agree:.0%}, max abs error {error:.2g}"
    return checks


def second_opinion(
    server: Server, concurrencies: list[int], window_s: float, cpus: set[int]
) -> dict[tuple[str, int], perf_analyzer.Measured]:
    """NVIDIA's perf_analyzer on SECOND_OPINION at the lowest and highest concurrency, on the clients' CPUs."""
    tool = perf_analyzer.ensure()
    found = {}
    for concurrency in sorted({min(concurrencies), max(concurrencies)}):
        for model in SECOND_OPINION:
            m = found[model, concurrency] = perf_analyzer.measure(tool, server.grpc, model, concurrency, window_s, cpus)
            print(f"  perf_analyzer {model:18} c={concurrency:<3} {m.throughput:7.1f} req/s  p95 {m.p95_ms:7.2f} ms",
                  flush=True)  # fmt: skip
    return found


# --- report ------------------------------------------------------------------------------------------


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b and not math.isnan(b) else "n/a"


def table(points: list[Point]) -> list[str]:
    rows = [
        "| model | concurrency | requests | errors | throughput (req/s) | p50 ms | p95 ms | p99 ms "
        "| mean batch | Triton queue ms | Triton compute ms | server CPU | client CPU | load 1m |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for p in sorted(points, key=lambda p: (MODELS.index(p.model), p.concurrency)):
        rows.append(
            f"| {p.model} | {p.concurrency} | {p.requests} | {p.errors} | {p.throughput:.1f} | {p.p(50):.2f} "
            f"| {p.p(95):.2f} | {p.p(99):.2f} | {p.mean_batch:.2f} | {p.queue_ms:.2f} | {p.compute_ms:.2f} "
            f"| {p.server_cpu:.2f} | {p.client_cpu:.2f} | {p.load:.2f} |"
        )
    return rows


def headline(by: dict[tuple[str, int], Point], hi: int, lo: int) -> tuple[float, float, float]:
    """Batching vs no batching and selected vs baseline throughput at `hi`; batched p95 at `hi` over at `lo`."""
    batched = by["selected-batching", hi]
    return (
        batched.throughput / by["selected-nobatch", hi].throughput,
        batched.throughput / by["baseline", hi].throughput,
        batched.p(95) / by["selected-batching", lo].p(95),
    )


def little(batched: Point, single: Point, winner) -> list[str]:
    """What the p95 half of the goal asks of throughput, by Little's law (arithmetic on the measured figures)."""
    needed = batched.concurrency / (2 * single.p(95) / 1000)  # mean <= p95 <= 2 x single-request p95
    lines = [
        f"- What the p95 half asks (Little's law, arithmetic on the figures above): in a closed loop the mean latency is "
        f"clients / throughput, and p95 >= mean, so p95 at c={batched.concurrency} within 2x of {single.p(95):.1f} ms "
        f"needs at least {needed:.0f} req/s, {needed / batched.throughput:.1f}x what selected-batching served at "
        f"c={batched.concurrency} ({batched.throughput:.0f} req/s)."
    ]
    bench = max(winner.benchmarks, key=lambda b: b.batch_size, default=None)
    if bench is not None:
        per_sample = bench.p50_ms / bench.batch_size
        lines[0] += (
            f" The compile measured the engine alone at {per_sample:.2f} ms per sample at batch {bench.batch_size} "
            f"(p50, {bench.threads} threads, as served here), i.e. about {1000 / per_sample:.0f} samples/s of "
            "engine time for one instance before any server overhead. Inside Triton at "
            f"c={batched.concurrency}, compute per batch / mean batch = {batched.compute_ms / batched.mean_batch:.2f} ms "
            "per sample; the gap is the server's per-request work plus contention for the CPUs (a rough "
            "comparison: the compile's figure was taken at another moment)."
        )
    return lines


def tuned_goals(by: dict[tuple[str, int], Point], hi: int, lo: int, bound: float | None) -> tuple[float, float]:
    """selected-tuned's p95 at `lo` over selected-nobatch's, and its throughput at `hi` over `bound`."""
    return (
        by["selected-tuned", lo].p(95) / by["selected-nobatch", lo].p(95),
        by["selected-tuned", hi].throughput / bound if bound else math.nan,
    )


def tuned_report(
    by: dict[tuple[str, int], Point],
    rounds: list[dict[tuple[str, int], Point]],
    concurrencies: list[int],
    manifest: EngineManifest,
    chosen_by: str,
) -> list[str]:
    """selected-tuned beside selected-batching (the fixed defaults) and selected-nobatch: the compile's choice and
    why, a table per concurrency, the two goals, and what the CPUs allow (arithmetic on the measured figures)."""
    tuning, hi, lo = manifest.serving_tuning, max(concurrencies), min(concurrencies)
    if tuning is None:
        lines = [
            "The compile recorded no `serving_tuning` (the tuning stage measured nothing usable; see its log), so "
            "`selected-tuned` was served with the fixed defaults, as `selected-batching`. No goal is judged."
        ]
        bound, simulated = None, {}
    else:
        bound, simulated = tuning.throughput_bound_per_s, {load.clients: load for load in tuning.simulated}
        times = ", ".join(f"{t.batch_size}: {t.p50_ms:.2f}" for t in tuning.service_times)
        threads = sorted({t.threads for t in tuning.service_times})
        scaling = ", ".join(f"{s.instances} at batch {s.batch_size}: {s.speedup:.2f}x" for s in tuning.instance_scaling)
        lines = [
            f"- Setting: **{batching.setting_of(tuning.setting).describe()}** (chosen for serving.maxBatchSize "
            f"{tuning.max_batch_size}, "
            + (
                f"SLO {tuning.slo_target_ms:g} ms {tuning.slo_percentile}"
                if tuning.slo_target_ms
                else "no SLO: the lone-client rule"
            )
            + f"); config.pbtxt chosen by {chosen_by}.",
            f"- The compile's reason: {tuning.reason}.",
            f"- What it measured: the engine's p50 ms per batch by batch size ({', '.join(map(str, threads))} "
            f"thread(s)): {times}; instances run at once over one alone: {scaling or 'not measured'}. The bound, "
            f"{bound:.0f}/s, is the best batch size / p50 times the best instance gain.",
        ]
    rows = [
        "",
        "| concurrency | tuned req/s | tuned p95 ms | tuned mean batch | defaults req/s | defaults p95 ms "
        "| no batching req/s | no batching p95 ms | tuned/defaults throughput | tuned/defaults p95 "
        "| compile's model: req/s, p95 ms |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c in concurrencies:
        tuned, defaults, nobatch = (by[m, c] for m in ("selected-tuned", "selected-batching", "selected-nobatch"))
        model = simulated.get(c)
        rows.append(
            f"| {c} | {tuned.throughput:.1f} | {tuned.p(95):.2f} | {tuned.mean_batch:.2f} | {defaults.throughput:.1f} "
            f"| {defaults.p(95):.2f} | {nobatch.throughput:.1f} | {nobatch.p(95):.2f} "
            f"| {ratio(tuned.throughput, defaults.throughput)} | {ratio(tuned.p(95), defaults.p(95))} "
            f"| {f'{model.throughput_per_s:.0f}, {model.p95_ms:.2f}' if model else 'not simulated'} |"
        )
    lines += [*rows, ""]

    p95_ratio, bound_ratio = tuned_goals(by, hi, lo, bound)
    per_round = [tuned_goals(r, hi, lo, bound) for r in rounds]

    def spread(i: int) -> str:
        return f" (per round: {', '.join(f'{g[i]:.2f}x' for g in per_round)})" if len(rounds) > 1 else ""

    def verdict(ok: bool) -> str:
        return "met" if ok else "not met"

    single, alone = by["selected-tuned", lo], by["selected-nobatch", lo]
    lines.append(
        f"- Goal at c={lo}: selected-tuned's p95 within {LONE_CLIENT_SLACK:g}x of selected-nobatch's: "
        f"{single.p(95):.2f} ms vs {alone.p(95):.2f} ms, **{p95_ratio:.2f}x**{spread(0)}, "
        f"**{verdict(p95_ratio <= LONE_CLIENT_SLACK)}**. Triton's mean queue time {single.queue_ms:.2f} ms vs "
        f"{alone.queue_ms:.2f} ms; {LONE_CLIENT_SLACK:g}x of the no-batching p95 leaves "
        f"{(LONE_CLIENT_SLACK - 1) * alone.p(95):.2f} ms for the batcher's wait and the noise between two windows."
    )
    if bound is None:
        return lines
    top = by["selected-tuned", hi]
    target = BOUND_SHARE * bound
    lines.append(
        f"- Goal at c={hi}: selected-tuned's throughput at least {BOUND_SHARE:g}x the bound the engine's own batch "
        f"efficiency allows: {top.throughput:.0f} req/s vs bound {bound:.0f}/s (goal {target:.0f} req/s), "
        f"**{bound_ratio:.2f}x**{spread(1)}, **{verdict(bound_ratio >= BOUND_SHARE)}**. The compile's model put "
        "the setting at "
        + (f"{simulated[hi].throughput_per_s:.0f}/s here." if hi in simulated else f"no load of {hi} clients.")
    )
    lines += cpu_arithmetic(top, tuning, target, served_threads(manifest))
    return lines


def cpu_arithmetic(top: Point, tuning: ServingTuning, target: float, threads: int) -> list[str]:
    """What the throughput goal asks of this machine's CPUs, from the CPU time measured per request at `top`, served
    with `threads` intra-op threads per instance."""
    cpus = os.cpu_count() or 1
    if not top.requests:
        return []
    server_ms, client_ms = (1000 * s / top.requests for s in (top.server_cpu_s, top.client_cpu_s))
    per_request = server_ms + client_ms
    ceiling, server_only = 1000 * cpus / per_request, 1000 * cpus / server_ms
    best = max(tuning.service_times, key=lambda t: t.batch_size / t.p50_ms)
    engine_ms = min(cpus, best.threads) * best.p50_ms / best.batch_size  # its threads busy for its batch
    line = (
        f"- What the throughput goal asks of the CPUs (arithmetic on the figures above): at c={top.concurrency} "
        f"selected-tuned took {per_request:.2f} ms of CPU per request ({server_ms:.2f} ms in tritonserver, "
        f"{client_ms:.2f} ms in the clients, this process; {cpus} CPUs in all). At that cost {cpus} CPUs "
        f"doing nothing else serve at most {ceiling:.0f} req/s ({ratio(ceiling, target)} the goal's {target:.0f}). "
        f"The bound counts the engine alone: at its most efficient batch ({best.batch_size}, {best.p50_ms:.2f} ms with "
        f"{best.threads} thread(s)) at most {engine_ms:.2f} ms of CPU per sample (its threads busy throughout), "
        f"against {per_request:.2f} ms measured per request here (served with {threads} intra-op thread(s) per "
        f"instance; mean batch {top.mean_batch:.1f}); the rest, at least {per_request - engine_ms:.2f} ms, is gRPC, "
        "Triton's own work and the clients, which the bound leaves out."
    )
    if ceiling < target:
        line += (
            f" So on this machine the goal is out of reach at the measured per-request cost: it needs that cost cut "
            f"to {1000 * cpus / target:.2f} ms; even with the clients on other CPUs the server's share alone caps it "
            f"at {server_only:.0f} req/s."
        )
    else:
        line += (
            f" The CPUs do not rule it out at that cost: {top.server_cpu + top.client_cpu:.2f} of {cpus} cores were "
            f"busy with the benchmark (1-minute load average {top.load:.2f}: other processes took the rest)."
        )
    return [line]


def second_opinion_report(
    found: dict[tuple[str, int], perf_analyzer.Measured], by: dict[tuple[str, int], Point], bound: float | None
) -> list[str]:
    """perf_analyzer's figures beside the project's clients', and the throughput goal judged on them."""
    lines = [
        "| model | concurrency | perf_analyzer req/s | perf_analyzer p95 ms | own clients req/s | own clients p95 ms "
        "| perf_analyzer / own clients, throughput |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for (model, c), m in sorted(found.items(), key=lambda item: (item[0][1], item[0][0])):
        own = by[model, c]
        lines.append(f"| {model} | {c} | {m.throughput:.1f} | {m.p95_ms:.2f} | {own.throughput:.1f} | {own.p(95):.2f} "
                     f"| {ratio(m.throughput, own.throughput)} |")  # fmt: skip
    hi = max(c for _, c in found)
    if bound:
        share = found["selected-tuned", hi].throughput / bound
        verdict = "met" if share >= BOUND_SHARE else "not met"
        lines += ["", f"- Goal at c={hi} judged on perf_analyzer's throughput: selected-tuned "
                      f"{found['selected-tuned', hi].throughput:.0f} req/s vs bound {bound:.0f}/s, **{share:.2f}x**, "
                      f"**{verdict}** (goal {BOUND_SHARE:g}x)."]  # fmt: skip
    return lines


def plot(series: dict[str, list[tuple[int, float, float]]], concurrencies: list[int], title: str, path: Path) -> None:
    """Throughput and p95 against concurrency; `series`: model -> [(concurrency, req/s, p95 ms)]."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 5), constrained_layout=True)
    for model, rows in series.items():
        xs, throughputs, p95s = zip(*sorted(rows))
        left.plot(xs, throughputs, "o-", color=COLOURS[model], label=model)
        right.plot(xs, p95s, "o-", color=COLOURS[model], label=model)
    left.set(title="Throughput", xlabel="concurrent clients (batch-1 requests, closed loop)",
             ylabel="throughput (requests/s)")  # fmt: skip
    right.set(title="p95 latency (client side)", xlabel="concurrent clients (batch-1 requests, closed loop)",
              ylabel="p95 latency (ms, log scale)", yscale="log")  # fmt: skip
    left.set_ylim(bottom=0)
    right.yaxis.set_major_locator(ticker.LogLocator(subs=(1, 2, 5)))
    right.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
    right.yaxis.set_minor_formatter(ticker.NullFormatter())
    for axis in (left, right):
        axis.set_xscale("log", base=2)
        axis.set_xticks(concurrencies, [str(c) for c in concurrencies])
        axis.xaxis.set_minor_locator(ticker.NullLocator())
        axis.set_xlim(min(concurrencies) / 1.3, max(concurrencies) * 1.3)
        axis.grid(True, alpha=0.3)
        axis.legend()
    figure.suptitle(title)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=5.0, help="measured seconds per point and round")
    parser.add_argument("--warmup", type=float, default=2.0, help="warm-up seconds before each window (not measured)")
    parser.add_argument("--rounds", type=int, default=2, help="measured windows per point, in separate sweeps")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--compile-runs", type=int, default=BenchmarkPlan.runs,
                        help="timed runs per candidate in the compile (default: the operator's); the bound's "
                        "per-batch timings come from them")  # fmt: skip
    parser.add_argument("--preferred", type=int, nargs="+", default=PREFERRED,
                        help="preferred_batch_size of selected-batching")  # fmt: skip
    parser.add_argument("--queue-delay-us", type=int, default=QUEUE_DELAY_US,
                        help="max_queue_delay_microseconds of selected-batching")  # fmt: skip
    parser.add_argument("--instances", type=int, default=1,
                        help="instance_group count, every model but selected-tuned (the compile's choice)")  # fmt: skip
    parser.add_argument("--output", type=Path, default=RESULTS, help="where serving.md and serving.png go")
    parser.add_argument("--perf-analyzer", action=argparse.BooleanOptionalAction, default=True,
                        help=f"also load {', '.join(SECOND_OPINION)} with NVIDIA's perf_analyzer")  # fmt: skip
    parser.add_argument(
        "--pin",
        action=argparse.BooleanOptionalAction,
        default=(os.cpu_count() or 1) >= 2,
        help="compile and serve on CPU 0 alone, the clients on the other CPUs (default: with 2+ CPUs)",
    )
    args = parser.parse_args()
    every_cpu = os.sched_getaffinity(0)
    server_cpus = {min(every_cpu)} if args.pin else None
    client_cpus = every_cpu - server_cpus if args.pin else every_cpu
    serving = Serving(tuple(args.preferred), args.queue_delay_us, args.instances)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    concurrencies = sorted(set(args.concurrency))
    started, load_before = datetime.now(UTC), os.getloadavg()
    samples = CLS.samples(SAMPLES, seed=3)

    with tempfile.TemporaryDirectory(prefix="bench-serving-") as tmp:
        root = Path(tmp)
        registry_uri = f"file://{root}/registry"
        print("compiling cls (every candidate) ...", flush=True)
        t0 = time.perf_counter()
        plan = BenchmarkPlan(runs=args.compile_runs)  # as the operator times engines, so the bound is as sound
        if server_cpus:  # chosen, tuned and timed on the core that serves it: its usable CPUs are that one
            os.sched_setaffinity(0, server_cpus)
        digest, manifest = compile_selected(root, registry_uri, plan)
        os.sched_setaffinity(0, client_cpus)
        compile_s = time.perf_counter() - t0
        winner = next(c for c in manifest.candidates if c.id == manifest.selection.winner)
        print(f"selected {winner.id} ({manifest.selection.reason}) in {compile_s:.0f} s", flush=True)
        tuning = manifest.serving_tuning
        print(f"batcher tuned: {tuning.reason}" if tuning else "batcher not tuned: selected-tuned gets the defaults")
        configs = lay_out_repository(root, registry_uri, digest, manifest, serving)

        server = Server(root, server_cpus)
        try:
            server.wait_ready()
            checks = check_outputs(server, samples)
            rounds: list[dict[tuple[str, int], Point]] = []
            for r in range(args.rounds):  # models and rounds interleaved, so background load lands on all alike
                print(f"round {r + 1} of {args.rounds}", flush=True)
                rounds.append({})
                for concurrency in concurrencies:
                    for model in MODELS:
                        rounds[-1][model, concurrency] = measure(server, model, concurrency, args, samples)
            found = second_opinion(server, concurrencies, args.duration, client_cpus) if args.perf_analyzer else {}
        finally:
            server.stop()
    load_after = os.getloadavg()

    by = {key: sum((r[key] for r in rounds[1:]), rounds[0][key]) for key in rounds[0]}  # rounds pooled
    points = list(by.values())
    hi, lo = max(concurrencies), min(concurrencies)
    batched, nobatch, baseline = (by[(m, hi)] for m in ("selected-batching", "selected-nobatch", "baseline"))
    speedup, vs_baseline, p95_growth = headline(by, hi, lo)
    met = speedup >= 3 and p95_growth <= 2
    per_round = [headline(r, hi, lo) for r in rounds]

    def spread(i: int) -> str:
        return f" (per round: {', '.join(f'{h[i]:.2f}x' for h in per_round)})" if len(rounds) > 1 else ""

    cpu = manifest.fingerprint.get("cpu", {})
    machine = f"{cpu_name()}, {os.cpu_count()} CPUs"
    versions = ", ".join(f"{k} {v}" for k, v in manifest.runtime_versions.items())
    tuned_config = config_dict("selected-tuned", manifest, tuned_spec())
    chosen_by = served_settings(tuned_config, batcher(tuned_spec(), manifest, gpu=False), manifest)["chosenBy"]
    tuned = tuned_report(by, rounds, concurrencies, manifest, chosen_by)
    tuned_instances = tuned_config["instanceGroup"][0]["count"]
    settings = {k: v for k, v in winner.settings.items() if k != "quantization"}

    args.output.mkdir(parents=True, exist_ok=True)
    series = {m: [(p.concurrency, p.throughput, p.p(95)) for p in points if p.model == m] for m in MODELS}
    title = (
        f"Triton 2.51 (native backends), rapidocr cls, batch-1 requests: {machine}\n{args.rounds} x {args.duration:g} s "
        f"measured per point; 1-minute load average {load_before[0]:.2f} before, {load_after[0]:.2f} after"
    )
    plot(series, concurrencies, title, args.output / "serving.png")
    ratios = [
        f"- Dynamic batching vs no batching, throughput at c={hi}: **{speedup:.2f}x**{spread(0)} "
        f"({batched.throughput:.0f} vs {nobatch.throughput:.0f} req/s; mean batch {batched.mean_batch:.1f} vs "
        f"{nobatch.mean_batch:.1f}).",
        f"- Selected engine (batching) vs baseline (raw ONNX, no batching), throughput at c={hi}: "
        f"**{vs_baseline:.2f}x**{spread(1)}; the engine alone, both without batching: "
        f"{ratio(nobatch.throughput, baseline.throughput)}.",
        f"- selected-batching p95 at c={hi} vs at c={lo}: **{p95_growth:.2f}x**{spread(2)} "
        f"({batched.p(95):.1f} ms vs {by[('selected-batching', lo)].p(95):.1f} ms).",
        f"- Project goal (>= 3x throughput from dynamic batching at c={hi}, p95 within 2x of the single-request p95): "
        f"**{'met' if met else 'not met'}** on this run ({speedup:.2f}x, p95 {p95_growth:.2f}x, rounds pooled).",
        *little(batched, by[("selected-batching", lo)], winner),
        f"- At c={lo} the batched model's requests wait {by[('selected-batching', lo)].queue_ms:.1f} ms on average in "
        f"Triton's queue (the batcher holds a lone request up to max_queue_delay_microseconds {serving.queue_delay_us} "
        f"for a preferred batch that does not come), against {by[('selected-nobatch', lo)].queue_ms:.2f} ms without "
        "the batcher: that wait is in the single-request p95 the goal compares against.",
    ]
    lines = [
        "# Serving benchmark: dynamic batching on real Triton, on this CPU",
        "",
        f"`e2e/bench_serving.py`, {started:%Y-%m-%d %H:%M} UTC. Machine: {machine} "
        f"({platform.machine()}; ISA {', '.join(cpu.get('isa', [])) or 'unknown'}). "
        f"1/5/15-minute load average before: {' / '.join(f'{v:.2f}' for v in load_before)}, after: "
        f"{' / '.join(f'{v:.2f}' for v in load_after)}. Other processes may have been running: the load column "
        "gives the 1-minute load average after each point; the benchmark itself accounts for about 1 of it (the "
        "server's execution thread and the clients).",
        "",
        "Setup: one real `tritonserver` 2.51 (the nvidia-pytriton wheel's server with the serving image's native "
        "onnxruntime and openvino backends, r24.10, as the local node's Triton pods run it) on a 127.0.0.x address; "
        + (
            f"the compile and the server on CPU {sorted(server_cpus)} alone, the clients on CPU {sorted(client_cpus)}. "
            if server_cpus
            else "server and clients on every CPU (not pinned). "
        )
        + f"Model: rapidocr's `{CLS.path.name}`, batch-1 requests of shape [1,3,{CLS.height},{CLS.width}], "
        f"{SAMPLES} rendered text lines in rotation. Each model: {serving.instances} instance(s) (KIND_CPU; "
        f"selected-tuned: {tuned_instances}, the compile's choice), {served_threads(manifest)} intra-op thread(s) per "
        "instance (the threads the compile measured the engine with, as the operator renders them), "
        f"`max_batch_size` {MAX_BATCH}; configs rendered by `tensorkiln.builders.tritonconfig`, the renderer every "
        "cluster gets.",
        "",
        f"- `selected-batching`: the engine the compile selected, `{winner.id}` ({winner.compiler}, {winner.precision}; "
        f"settings {settings}; {manifest.selection.reason}), with `dynamic_batching {{ preferred_batch_size: "
        f"{list(serving.preferred)} max_queue_delay_microseconds: {serving.queue_delay_us} }}`"
        + (" (the InferenceModel API's defaults)." if serving == Serving() else "."),
        "- `selected-tuned`: the same engine with the batcher and instance count the compile chose for it by "
        f"measurement (CompileJob `batcherTuning {{ maxBatchSize: {MAX_BATCH} }}`, no SLO), rendered from a "
        "spec.serving that leaves the batcher fields and instancesPerGPU unset, so `manifest.serving_tuning` fills "
        "them as the operator renders them: "
        + (
            batching.setting_of(manifest.serving_tuning.setting).describe()
            if manifest.serving_tuning
            else "none recorded, so the fixed defaults"
        )
        + ".",
        "- `selected-nobatch`: the same engine, no `dynamic_batching`.",
        "- `baseline`: the unmodified ONNX on onnxruntime with default options, no `dynamic_batching`: the raw file "
        "served as is, by the native onnxruntime backend.",
        "",
        (
            "Serving config of selected-batching: the InferenceModel API's fixed defaults, unchanged, what the "
            "operator renders for an engine compiled without spec.batcherTuning."
            if serving == Serving()
            else f"Serving config of selected-batching: changed from the API defaults on the command line ({serving})."
        )
        + " `--preferred` and `--queue-delay-us` vary it; `--instances` sets the instance count of every model but "
        "selected-tuned, whose settings are the compile's.",
        "",
        f"Compile: `tensorkiln_compiler.pipeline` with every OnnxRuntime/OpenVINO FP32/BF16/INT8 candidate, objective "
        f"LatencyP95 at batch {CLS.batch_size}, warm-up {plan.warmup}, {plan.runs} timed runs each, then the batcher "
        f"tuned for the winner (`tensorkiln_compiler.serving_tuning`; {compile_s:.0f} s in all), published to a "
        f"filesystem registry in a temporary directory. {versions}.",
        "Answers checked before timing (16 lines, batch 1, vs the original ONNX on onnxruntime): "
        + "; ".join(f"{m}: {c}" for m, c in checks.items())
        + ".",
        "",
        f"Load: {args.rounds} round(s); in each, for each concurrency, the {len(MODELS)} models in turn, each point "
        f"{args.warmup:g} s warm-up then {args.duration:g} s measured ({args.rounds * args.duration:g} s measured per "
        "point in all; the table pools the rounds): N threads, each with its own `tritonclient.grpc` client, "
        "sending batch-1 requests in a closed loop (the next request when the last answer arrives). Latencies are "
        "client-side (send to answer); throughput = answered requests / wall time until the last client stopped. "
        "Mean batch = delta `nv_inference_count` / delta `nv_inference_exec_count`; queue and compute are Triton's "
        "per-request means from `nv_inference_queue_duration_us` / `nv_inference_compute_infer_duration_us`. "
        "Server and client CPU are cores busy during the window (tritonserver; this Python process). "
        + (
            "The clients run on CPUs of their own, apart from the server's."
            if server_cpus
            else f"The clients run on the same {os.cpu_count()} CPUs as the server, so at high concurrency they "
            "compete with it."
        ),
        "",
        *table(points),
        "",
        "## Ratios",
        "",
        *ratios,
        "",
        "## Tuned batcher: selected-tuned vs the fixed defaults vs no batching",
        "",
        *tuned,
        "",
        "## Second load generator: NVIDIA's perf_analyzer",
        "",
        *(
            [
                "`perf_analyzer` 2.51.0 (the tritonclient 2.51.0 wheel's C++ client, `tensorkiln_local.perf_analyzer`), "
                f"gRPC, batch-1 requests of random data, closed loop at each concurrency, three {args.duration:g} s "
                "windows after the project's own rounds, on the clients' CPUs. Latencies are its client-side ones.",
                "",
                *second_opinion_report(
                    found, by, manifest.serving_tuning and manifest.serving_tuning.throughput_bound_per_s
                ),
            ]
            if found
            else ["Not run (--no-perf-analyzer)."]
        ),
        "",
        "## Configs served",
        "",
        "```",
        *(
            f"{name}/config.pbtxt: {text_format.MessageToString(parse(configs[name]), as_one_line=True)}"
            for name in MODELS
        ),
        "```",
    ]
    text = "\n".join(lines) + "\n"
    (args.output / "serving.md").write_text(text)
    print()
    print("\n".join(table(points)))
    print()
    print("\n".join(ratios))
    print()
    print("\n".join(tuned))
    if found:
        print("\n".join(second_opinion_report(found, by, tuning and tuning.throughput_bound_per_s)))
    print(f"\nwrote {args.output / 'serving.md'} and {args.output / 'serving.png'}")


if __name__ == "__main__":
    main()
