"""The dynamic batcher's settings spec.serving.dynamicBatching sets, and why Triton may leave them unused (pure).

A batcher setting the spec sets (preferredBatchSizes, maxQueueDelayMicroseconds, or a queuePolicy other than
its defaults) asks for the dynamic batcher: with dynamicBatching.enabled unset it keeps the batcher on, whatever
the compile chose (builders.tritonconfig.batcher; a field the spec sets always wins). Triton still runs no
dynamic batcher when the spec itself says so (sequenceBatching, maxBatchSize 0, enabled: false) or while the
engine served was compiled unbatched: those settings are then unused, and `unused` says which and why, for the
target's status.serving and, from the spec alone, the admission warning (review.checks). Not refused: objects
created under the first CRD hold maxQueueDelayMicroseconds 2000 (its schema default) beside an enabled: false
or a maxBatchSize 0 of their own, and a refusal would fail them at the operator's next reconcile.
"""

from tensorkiln_api import QueuePolicy

PREFIX = "spec.serving.dynamicBatching."
_DEFAULT_QUEUE_POLICY = QueuePolicy().model_dump(by_alias=True, mode="json")


def fields_set(serving: dict) -> list[str]:
    """The batcher settings the validated spec.serving sets, by field name: preferredBatchSizes and
    maxQueueDelayMicroseconds when present (empty preferred sizes too), queuePolicy when other than its defaults
    (the CRD fills those in, so a default one cannot be told from one written out)."""
    batching = serving["dynamicBatching"]
    names = [name for name in ("preferredBatchSizes", "maxQueueDelayMicroseconds") if batching.get(name) is not None]
    if {**_DEFAULT_QUEUE_POLICY, **batching.get("queuePolicy", {})} != _DEFAULT_QUEUE_POLICY:
        names.append("queuePolicy")
    return names


def off_because(serving: dict, engine_batched: bool = True) -> tuple[str, str] | None:
    """(why, what to do) when Triton runs no dynamic batcher whatever the compile chose: the spec turns it off,
    or the engine served (`engine_batched` False) was compiled unbatched; None when it may run one."""
    if serving.get("sequenceBatching"):
        return ("serving.sequenceBatching is set and a model has one scheduler (the sequence batcher's own delay is "
                "serving.sequenceBatching.maxQueueDelayMicroseconds)", "unset {them}")  # fmt: skip
    if serving["maxBatchSize"] == 0:
        return "serving.maxBatchSize is 0 (the model is served unbatched)", "unset {them}, or set maxBatchSize above 0"
    if serving["dynamicBatching"].get("enabled") is False:
        return "serving.dynamicBatching.enabled is false", "unset {them}, or unset enabled to batch"
    if not engine_batched:
        return ("the engine served was compiled unbatched", "used once the engine compiled for "
                f"serving.maxBatchSize {serving['maxBatchSize']} replaces it")  # fmt: skip
    return None


def unused(serving: dict, engine_batched: bool = True) -> tuple[str, str] | None:
    """(the first field concerned, a message naming every one, why and what to do) for the batcher settings the
    validated spec.serving sets that Triton leaves unused (off_because; enabled: true among them); None: none."""
    off = off_because(serving, engine_batched)
    names = fields_set(serving)
    if serving["dynamicBatching"].get("enabled") is True:
        names.insert(0, "enabled")
    if off is None or not names:
        return None
    fields = [PREFIX + name for name in names]
    why, fix = off
    many = len(fields) > 1
    listed = f"{', '.join(fields[:-1])} and {fields[-1]} are" if many else f"{fields[0]} is"
    fix = fix.format(them="them" if many else "it")
    return fields[0], f"{listed} set but unused: Triton runs no dynamic batcher, as {why}; {fix}"
