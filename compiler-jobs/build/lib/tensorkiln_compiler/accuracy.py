"""Validate step: compare a candidate's outputs with the FP32 reference on the validation set.

An element is out of tolerance when it misses both limits, |d| > maxAbsError and
|d| > maxRelError * |reference| (numpy.isclose's reading of atol/rtol): near zero the
absolute limit decides, on large values the relative one. So each reported figure compares
directly with its tolerance: maxAbsError is the largest |d|; maxRelError is the largest
|d| / |reference| among the elements beyond the absolute limit (0 when none are).
Cosine similarity is the lowest over outputs; top-1 agreement is measured on outputs shaped
like class scores ([batch, classes], or unbatched [classes] per sample) and gated only when
minTop1Agreement is set. Outputs are compared feed by feed (a batch, or unbatched one sample of any
rank, scalars included), so an output whose shape depends on the input (NonMaxSuppression's detections)
compares sample by sample; the figures pool every feed. A candidate whose output shape differs from
the reference's on some feed is rejected naming the output and the feed, its figures from the feeds
that agree in shape.

A text encoder's padding (text.Padding: where the attention mask fed is 0) is left out of every figure
for its per-token outputs, those whose leading axes are the mask's [batch, seq]; top-1 on such an
output [batch, seq] is taken over each row's tokens. The figures say so (Accuracy.paddingIgnored: the
mask, those outputs, how many elements were compared and how many left out). Without a mask every
element is compared, as the figures have always been.
"""

from __future__ import annotations

import numpy as np
from tensorkiln_api import AccuracyTolerance
from tensorkiln_api.registry.manifest import Accuracy, PaddingIgnored

from .text import Padding

Outputs = list[list[np.ndarray]]  # per validation batch, per model output
LARGEST = float(np.finfo(np.float64).max)  # stands for an infinite error: JSON has no Infinity


def compare(
    reference: Outputs,
    candidate: Outputs,
    tolerance: AccuracyTolerance,
    *,
    samples: int,
    synthetic: bool,
    batched: bool = True,
    names: list[str] | None = None,
    padding: Padding | None = None,
) -> tuple[Accuracy, str | None]:
    """The figures, and why the candidate is rejected (None when it passes). `names`: the outputs' names;
    `padding`: where the validation feeds are padding, left out of per-token outputs (module docstring)."""
    max_abs = max_rel = 0.0
    cosines, top1, mismatches = [], [], []
    masked, compared, ignored = [], 0, 0  # outputs compared without their padding; element counts
    for index in range(len(reference[0])):
        name = repr(names[index]) if names else str(index)
        refs, outs, hits, rows = [], [], 0, 0
        for feed, (ref_feed, out_feed) in enumerate(zip(reference, candidate, strict=True)):
            ref = np.asarray(ref_feed[index], np.float64)
            out = np.asarray(out_feed[index], np.float64)
            if ref.shape != out.shape:
                where = f"batch {feed}" if batched else f"sample {feed}"
                mismatches.append(
                    f"output {name} has shape {list(out.shape)} on {where}, the reference {list(ref.shape)}"
                )
                continue
            keep = padding.keep(feed, index, ref.shape) if padding else None
            if batched and ref.ndim == 2 and ref.shape[1] > 1:  # [batch, classes], or per token [batch, seq]
                row_hits, row_count = _top1_rows(ref, out, keep)
                hits, rows = hits + row_hits, rows + row_count
            elif not batched and ref.ndim == 1 and ref.size > 1:  # [classes], one sample
                hits, rows = hits + int(ref.argmax() == out.argmax()), rows + 1
            if keep is not None:  # [tokens, ...]: the padded positions go
                masked += [] if index in masked else [index]
                size = ref.size
                ref, out = ref[keep], out[keep]
                ignored += size - ref.size
            compared += ref.size
            refs.append(ref.ravel())
            outs.append(out.ravel())
            diff = np.nan_to_num(np.abs(out - ref), nan=np.inf)  # a NaN output is infinitely wrong
            max_abs = max(max_abs, float(diff.max(initial=0.0)))
            beyond = diff > tolerance.max_abs_error
            if beyond.any():
                with np.errstate(divide="ignore", invalid="ignore"):
                    max_rel = max(max_rel, float(np.max(diff[beyond] / np.abs(ref[beyond]))))
        # No feed agreeing in shape: nothing is similar (the mismatches say why).
        cosines.append(_cosine(np.concatenate(refs), np.concatenate(outs)) if refs else 0.0)
        if rows:
            top1.append(hits / rows)
    padding_ignored = None
    if masked:  # said only when some output lost its padding: other models' figures read as they always did
        padding_ignored = PaddingIgnored(
            mask=padding.mask,
            outputs=[names[i] if names else str(i) for i in masked],
            compared_elements=compared,
            ignored_elements=ignored,
        )
    accuracy = Accuracy(
        max_abs_error=min(max_abs, LARGEST),
        max_rel_error=min(max_rel, LARGEST),
        cosine_similarity=min(cosines),
        top1_agreement=min(top1) if top1 else None,
        samples=samples,
        synthetic_data=synthetic,
        padding_ignored=padding_ignored,
    )
    return accuracy, _rejection(accuracy, tolerance, mismatches)


def _top1_rows(ref: np.ndarray, out: np.ndarray, keep: np.ndarray | None) -> tuple[int, int]:
    """(rows whose argmax agrees, rows) of [batch, classes] scores; with `keep` (a per-token [batch, seq]
    output), the argmax among each row's tokens, rows without a token aside."""
    if keep is not None:
        rows = keep.any(axis=1)
        ref, out = np.where(keep, ref, -np.inf)[rows], np.where(keep, out, -np.inf)[rows]
    return int(np.sum(ref.argmax(axis=1) == out.argmax(axis=1))), len(ref)


def _rejection(accuracy: Accuracy, tolerance: AccuracyTolerance, mismatches: list[str]) -> str | None:
    problems = mismatches[:1] + ([f"{len(mismatches) - 1} more feeds differ in shape"] if len(mismatches) > 1 else [])
    if not accuracy.max_rel_error <= tolerance.max_rel_error:  # `not <=`: NaN fails too
        problems.append(
            f"elements beyond maxAbsError {tolerance.max_abs_error:g} (max {accuracy.max_abs_error:.3g}) "
            f"are also beyond maxRelError {tolerance.max_rel_error:g} (max {accuracy.max_rel_error:.3g})"
        )
    if not accuracy.cosine_similarity >= tolerance.min_cosine_similarity:
        problems.append(
            f"cosine similarity {accuracy.cosine_similarity:.6f}"
            f" < minCosineSimilarity {tolerance.min_cosine_similarity:g}"
        )
    wanted = tolerance.min_top1_agreement
    if wanted is not None and accuracy.top1_agreement is not None and not accuracy.top1_agreement >= wanted:
        problems.append(f"top-1 agreement {accuracy.top1_agreement:.3f} < minTop1Agreement {wanted:g}")
    return "; ".join(problems) or None


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    with np.errstate(invalid="ignore", over="ignore"):
        norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    if norms == 0.0:  # all-zero outputs agree only with all zeros
        return 1.0 if not a.any() and not b.any() else 0.0
    cosine = float(np.dot(a, b) / norms)
    return min(cosine, 1.0) if np.isfinite(cosine) else 0.0  # NaN/Inf outputs are not similar to anything
