"""The compile's choice of batcher and instance settings, kept in step with the spec (pure).

The compile chose the settings for the spec.slo and serving.maxBatchSize of its day (CompileJob
spec.batcherTuning), from measurements the manifest records (servingTuning). Those are not part of
the engine's cache key, so a later change to either reuses the engine: the operator then makes the
choice again from the same measurements (tensorkiln_api.batching.retuned), which needs no new
compile, and everything downstream (config.pbtxt, the capacity the scaler plans with, status) reads
the choice for the spec as it is now.
"""

from tensorkiln_api.batching import retuned
from tensorkiln_api.registry import EngineManifest


def for_spec(manifest: EngineManifest, spec: dict) -> EngineManifest:
    """`manifest`, its servingTuning chosen again when the validated `spec` asks for other settings than it
    was chosen for; itself when nothing changed, the compile chose nothing, or Triton runs no dynamic batcher."""
    tuning, serving, slo = manifest.serving_tuning, spec["serving"], spec.get("slo")
    if tuning is None or serving["maxBatchSize"] == 0 or serving.get("sequenceBatching"):
        return manifest
    target, percentile = (slo["targetMilliseconds"], slo["percentile"]) if slo else (None, "p95")
    chosen = retuned(tuning, serving["maxBatchSize"], target, percentile)
    return manifest if chosen is tuning else manifest.model_copy(update={"serving_tuning": chosen})
