"""CompileJob status fields from a published engine's manifest (pure)."""

from tensorkiln_api.registry.manifest import EngineManifest, ServingTuning

from tensorkiln.status.conditions import condition


def _summary(candidate, batch_size: int) -> dict:
    summary = {
        "id": candidate.id,
        "compiler": candidate.compiler,
        "precision": candidate.precision,
        "status": candidate.status,
    }
    if candidate.reason:
        summary["reason"] = candidate.reason[:1024]
    bench = next((b for b in candidate.benchmarks if b.batch_size == batch_size), None)
    if bench:
        summary |= {
            "p50Ms": bench.p50_ms,
            "p95Ms": bench.p95_ms,
            "throughputPerSecond": bench.throughput_per_s,
            "timedRuns": bench.runs,
        }
        if bench.p95_interval_ms:
            summary["p95IntervalMs"] = list(bench.p95_interval_ms)
        if bench.stable is not None:
            summary["timingsSettled"] = bench.stable
    if candidate.accuracy:
        summary |= {
            "maxAbsError": candidate.accuracy.max_abs_error,
            "cosineSimilarity": candidate.accuracy.cosine_similarity,
        }
    return summary


def _padding_note(manifest: EngineManifest) -> str:
    """', padded positions left out ...' when the comparison ignored a text encoder's padding (the winner's
    figures, else any candidate's: every candidate is compared on the same feeds); '' otherwise. Said in
    the condition so that its figures are not read as covering every output element."""
    ranked = sorted(manifest.candidates, key=lambda c: c.id != manifest.selection.winner)
    padding = next((c.accuracy.padding_ignored for c in ranked if c.accuracy and c.accuracy.padding_ignored), None)
    if padding is None:
        return ""
    outputs = ", ".join(repr(name) for name in padding.outputs)
    return (
        f", padded positions ({padding.mask} 0) of {outputs} left out: {padding.compared_elements} output "
        f"elements compared, {padding.ignored_elements} padded ones ignored"
    )


def serving_tuning_summary(tuning: ServingTuning) -> dict:
    """CompileJob status.servingTuning: the settings chosen, and the simulated figures that chose them."""
    setting = tuning.setting
    lone, high = (f(tuning.simulated, key=lambda load: load.clients) for f in (min, max))
    unbatched = next((load for load in tuning.unbatched if load.clients == high.clients), tuning.unbatched[-1])
    return {
        "dynamicBatching": setting.dynamic_batching,
        "preferredBatchSizes": setting.preferred_batch_sizes,
        "maxQueueDelayMicroseconds": setting.max_queue_delay_microseconds,
        "instances": setting.instances,
        "clients": high.clients,
        "throughputPerSecond": round(high.throughput_per_s, 1),
        "unbatchedThroughputPerSecond": round(unbatched.throughput_per_s, 1),
        "throughputBoundPerSecond": round(tuning.throughput_bound_per_s, 1),
        "loneClientP95Ms": round(lone.p95_ms, 3),
        "reason": tuning.reason[:1024],
    }


def engine_status(manifest: EngineManifest, digest: str, uri: str, cache_hit: bool) -> tuple[dict, list[dict]]:
    """(status fields, conditions) describing the engine a CompileJob ended with."""
    batch_size = manifest.selection.objective.get("batchSize", 1)
    passed = [c for c in manifest.candidates if c.status in ("Selected", "Passed")]
    rejected = [c for c in manifest.candidates if c.status == "RejectedAccuracy"]
    synthetic = any(c.accuracy and c.accuracy.synthetic_data for c in manifest.candidates)
    selection = {
        "candidate": manifest.selection.winner,
        "reason": manifest.selection.reason[:1024],
        "syntheticData": synthetic,
    }
    if manifest.selection.speedup_vs_baseline is not None:
        selection["speedupVsBaseline"] = manifest.selection.speedup_vs_baseline
    if synthetic and (drawn := manifest.calibration.get("syntheticInputs")):  # compiled since it was recorded
        selection["syntheticInputs"] = drawn
    fields = {
        "engine": {"digest": digest, "uri": uri},
        "cacheHit": cache_hit,
        "selection": selection,
        "candidates": [_summary(c, batch_size) for c in manifest.candidates][:64],
    }
    if manifest.serving_tuning:
        fields["servingTuning"] = serving_tuning_summary(manifest.serving_tuning)
    data = "synthetic inputs only (no dataset given)" if synthetic else "the validation set"
    data += _padding_note(manifest)
    rejected_note = f"; rejected: {', '.join(c.id for c in rejected)}" if rejected else ""
    speedup = manifest.selection.speedup_vs_baseline
    conditions = [
        condition(
            "Compiled",
            True,
            "CacheHit" if cache_hit else "EnginePublished",
            f"engine {digest[:12]} ({manifest.compiler} {manifest.precision})"
            + (" reused from the registry: no compile ran" if cache_hit else " published"),
        ),
        condition(
            "AccuracyPassed",
            True,
            "WithinTolerance",
            f"{len(passed)} of {len(manifest.candidates)} candidates within tolerance on {data}{rejected_note}",
        ),
        condition(
            "Selected",
            True,
            "BaselineKept" if manifest.selection.winner == "baseline" else "FastestPassing",
            f"{manifest.selection.winner}: {manifest.selection.reason}"
            + (f" ({speedup:.2f}x baseline p50)" if speedup else ""),
        ),
    ]
    return fields, conditions
