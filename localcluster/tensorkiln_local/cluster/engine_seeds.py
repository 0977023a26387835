"""Registry entries that no compiler built, for what the local cluster cannot compile. Each says
what it is in its `origin`, and is published under the exact cache key the operator looks up, so
the CompileJob is a cache hit and the rollout and scaling paths run for real.

- `origin: test-seed`: a placeholder plan for a kwok-simulated GPU pool. Nothing runs it (pods on
  kwok nodes run nothing); it lets tests roll out to those pools.
- `origin: simulation`: a fixed-service-time engine, a SIMULATION of a GPU-bound engine. The
  python-backend runner (serving/python_backend/model.py) sleeps for the service time per batch
  and answers zeros; it computes nothing. It runs in real Triton (the serving image) on the real
  node local-0, so
  queueing, batching, Prometheus and the SLO scaler see a model whose per-replica capacity is
  fixed, as a GPU's would be, and which 2 CPUs can scale out to many replicas.

Nothing here pretends a GPU or a compiler did work.
"""

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

from tensorkiln.builders.compilejob import build_compile_job
from tensorkiln.controllers.inferencemodel import normalised_spec
from tensorkiln.hardware.classes import HardwareClass
from tensorkiln.settings import Settings
from tensorkiln_api.registry import open_registry
from tensorkiln_api.registry.filesystem import FilesystemRegistry
from tensorkiln_api.registry.manifest import (
    Artifact,
    Benchmark,
    CacheKey,
    Candidate,
    EngineManifest,
    Selection,
    TensorInfo,
)

from tensorkiln_local import install
from tensorkiln_local.cluster import registry as image_registry
from tensorkiln_local.images import build as images
from tensorkiln_local.images.catalog import SERVING_TARGET

PLACEHOLDER = b"test seed for a kwok-simulated GPU pool: not a TensorRT engine\n"
SIMULATION_FILE = "simulation.json"  # the engine file of a simulation: its parameters, for the record


def _publish(
    registry_uri: str,
    model: dict,
    target: HardwareClass,
    work_dir: Path,
    files: dict[str, bytes],
    candidate: Candidate,
    **fields,
) -> str:
    """Publish `files` as the engine of (model, target) under the operator's cache key; return its digest."""
    settings = Settings(  # as the local install sets it
        registry_uri=registry_uri,
        serving_target=SERVING_TARGET,
        compiler_version=install.compiler_version(images.pushed(image_registry.HOST)),
    )
    spec = normalised_spec(model)
    # Only the spec matters here; the owner reference needs some uid.
    compile_spec = build_compile_job(
        model | {"metadata": {**model["metadata"], "uid": "seed"}}, spec, target, settings
    )["spec"]
    directory = work_dir / target.name
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (directory / name).write_bytes(content)
    manifest = EngineManifest(
        key=CacheKey(
            model_digest=compile_spec["modelDigest"],
            options_hash=compile_spec["optionsHash"],
            hardware_class=target.name,
            compiler_version=compile_spec["compilerVersion"],
        ),
        model_name=model["metadata"]["name"],
        source_uri=spec["source"]["uri"],
        compiler=candidate.compiler,
        precision=candidate.precision,
        runtime_versions={},
        profiles={"batch": spec["shapes"]["batch"]},
        candidates=[candidate],
        selection=Selection(objective=spec["compile"]["objective"], winner=candidate.id, reason=candidate.reason),
        artifacts=[
            Artifact(path=name, sha256=hashlib.sha256(content).hexdigest(), size=len(content))
            for name, content in files.items()
        ],
        created_at=datetime.now(UTC),
        **fields,
    )
    registry = open_registry(registry_uri)
    digest = registry.publish(manifest, directory)
    if isinstance(registry, FilesystemRegistry):  # written as root: compile pods add to these directories
        install.give_to_compiler(registry.root)
    return digest


def publish_test_seed(registry_uri: str, model: dict, target: HardwareClass, work_dir: Path) -> str:
    """A placeholder engine for a kwok-simulated GPU pool; return its digest."""
    seed = Candidate(id="test-seed", compiler="TensorRT", precision="FP16", status="Selected",
                     reason="seeded by a test: no compiler ran")  # fmt: skip
    return _publish(
        registry_uri, model, target, work_dir, {"model.plan": PLACEHOLDER}, seed,
        origin="test-seed",
        hardware_kind="GPU",
        fingerprint={"simulated": True, "gpuProduct": target.product},
        inputs=[TensorInfo(name="input", data_type="FP32", dims=[-1, 3, 224, 224])],
        outputs=[TensorInfo(name="output", data_type="FP32", dims=[-1, 1000])],
    )  # fmt: skip


def publish_simulation(
    registry_uri: str,
    model: dict,
    target: HardwareClass,
    work_dir: Path,
    service_ms: float,
    inputs: list[TensorInfo],
    outputs: list[TensorInfo],
    with_figures: bool = False,
) -> str:
    """A SIMULATED fixed-service-time engine for a CPU target: each batch takes `service_ms`
    whatever its size, as a GPU engine roughly does below saturation; return its digest.

    `with_figures`: the manifest carries the simulation's own latency at batch 1 (service_ms at every
    percentile, `runs: 0`: defined, not timed) as its benchmark, so the operator has a capacity per
    replica before any pod has served (what a compile's benchmark gives a real engine); without it the
    capacity is known only once Triton has served load."""
    parameters = {"serviceMilliseconds": service_ms}
    defined = Benchmark(
        batch_size=1, p50_ms=service_ms, p95_ms=service_ms, p99_ms=service_ms,
        throughput_per_s=1000.0 / service_ms, threads=1, warmup_runs=0, runs=0,
    )  # fmt: skip
    simulation = Candidate(
        id="simulation", compiler="SimulatedServiceTime", precision="FP32", status="Selected",
        reason=f"simulation of a GPU-bound engine: {service_ms:g} ms per batch, computes nothing",
        settings=parameters, benchmarks=[defined] if with_figures else [],
    )  # fmt: skip
    files = {SIMULATION_FILE: (json.dumps(parameters, sort_keys=True) + "\n").encode()}
    return _publish(
        registry_uri, model, target, work_dir, files, simulation,
        origin="simulation",
        hardware_kind=target.kind,
        fingerprint={"simulated": True, "serviceMilliseconds": service_ms},
        inputs=inputs,
        outputs=outputs,
    )  # fmt: skip
