"""Registry entries for simulated GPU pools, marked as test seeds.

kwok nodes have no GPU, so nothing can compile for them. Tests that need their targets to
have engines publish these: honest entries (origin "test-seed", a placeholder plan file that
says what it is) under the exact cache key the operator looks up, so the CompileJob is a cache
hit and the rollout can be tested. Nothing here pretends a GPU built an engine.
"""

import hashlib
from datetime import UTC, datetime
from pathlib import Path

from tensorkiln.builders.compilejob import build_compile_job
from tensorkiln.controllers.inferencemodel import normalised_spec
from tensorkiln.hardware.classes import HardwareClass
from tensorkiln.registry import open_registry
from tensorkiln.registry.manifest import Artifact, CacheKey, Candidate, EngineManifest, Selection, TensorInfo
from tensorkiln.settings import Settings

PLACEHOLDER = b"test seed for a kwok-simulated GPU pool: not a TensorRT engine\n"


def seed_engine(registry_uri: str, model: dict, target: HardwareClass, work_dir: Path) -> str:
    """Publish a test-seed engine for (model, target); return its digest."""
    settings = Settings(registry_uri=registry_uri)
    spec = normalised_spec(model)
    # Only the spec matters here; the owner reference needs some uid.
    compile_spec = build_compile_job(
        model | {"metadata": {**model["metadata"], "uid": "seed"}}, spec, target, settings
    )["spec"]
    files = work_dir / target.name
    files.mkdir(parents=True, exist_ok=True)
    (files / "model.plan").write_bytes(PLACEHOLDER)
    seed = Candidate(id="test-seed", compiler="TensorRT", precision="FP16", status="Selected",
                     reason="seeded by a test: no compiler ran")  # fmt: skip
    manifest = EngineManifest(
        origin="test-seed",
        key=CacheKey(
            model_digest=compile_spec["modelDigest"],
            options_hash=compile_spec["optionsHash"],
            hardware_class=target.name,
            compiler_version=settings.compiler_version,
        ),
        model_name=model["metadata"]["name"],
        source_uri=spec["source"]["uri"],
        hardware_kind="GPU",
        fingerprint={"simulated": True, "gpuProduct": target.product},
        compiler="TensorRT",
        runtime_versions={},
        precision="FP16",
        inputs=[TensorInfo(name="input", data_type="FP32", dims=[-1, 3, 224, 224])],
        outputs=[TensorInfo(name="output", data_type="FP32", dims=[-1, 1000])],
        profiles={"batch": spec["shapes"]["batch"]},
        candidates=[seed],
        selection=Selection(objective=spec["compile"]["objective"], winner=seed.id, reason="test seed"),
        artifacts=[Artifact(path="model.plan", sha256=hashlib.sha256(PLACEHOLDER).hexdigest(), size=len(PLACEHOLDER))],
        created_at=datetime.now(UTC),
    )
    return open_registry(registry_uri).publish(manifest, files)
