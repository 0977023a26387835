"""Text encoders: recognising their inputs, synthetic feeds that look like tokenised text, and padding.

A transformer text encoder takes input_ids, an attention_mask and often token_type_ids, each
[batch, seq], and gives per-token outputs [batch, seq, hidden] beside pooled ones. Tokenised text
is right-padded: the mask is 1 for a prefix of each row (its tokens) and 0 after it. Two things
follow, and both are keyed on the attention mask, so a model without one is untouched:

- Synthetic feeds (no dataset given) are shaped like that: a prefix mask of varying length per row
  (one token at least), ids within the embedding table the graph gathers them from (an id past it
  makes onnxruntime's Gather fail), token types 0 then 1 where the type table has two rows, 0 in
  the padding. Uniform small integers, what other integer inputs get, would be a mask of random
  holes, which no tokeniser produces.
- The accuracy comparison leaves out the positions of per-token outputs where the mask is 0:
  nothing downstream reads them (pooling and attention mask them out), and a lower precision
  legitimately gives other values there. An output is per token when its leading axes are the
  mask's [batch, seq] on the feed compared (and the graph does not say otherwise).

The mask is recognised by name only (attention_mask, or input_mask as TF BERT exports name it):
encoder_attention_mask and the like belong to other sequences, whose lengths may match by chance.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import onnx

if TYPE_CHECKING:  # inspection imports this module
    from .inspection import Tensor

MASK_NAMES = ("attention_mask", "input_mask")
IDS_NAMES = ("input_ids",)
TYPE_NAMES = ("token_type_ids", "segment_ids")
UNKNOWN_ROWS = 16  # ids when the graph does not tell the table: small values stay valid for any vocabulary
_VALUE_PRESERVING = ("Cast", "Identity")  # an id passes through these unchanged on its way to a Gather


def mask_input(inputs: Iterable[Tensor]) -> Tensor | None:
    """The attention mask among `inputs`: named as MASK_NAMES (any case), rank 2 ([batch, seq]), numeric."""
    for tensor in inputs:
        if tensor.name.lower() in MASK_NAMES and len(tensor.dims) == 2 and tensor.dtype.kind in "biuf":
            return tensor
    return None


def table_rows(model: onnx.ModelProto, inputs: Iterable[Tensor]) -> dict[str, int]:
    """For a text encoder (an attention mask among `inputs`), its id inputs (input_ids, token_type_ids)
    -> rows of the smallest table each indexes: the static axis 0 of a Gather's data (axis 0) whose
    indices are the input, directly or through Cast/Identity. The table is an initializer, or computed
    in the graph (int8 weights dequantised by Cast and Mul), then its shape comes from shape inference.
    Empty for any other model, and for ids the graph does not let us bound."""
    inputs = list(inputs)
    if mask_input(inputs) is None:
        return {}
    graph = model.graph
    carried = {t.name: t.name for t in inputs if t.name.lower() in IDS_NAMES + TYPE_NAMES}  # tensor -> input
    for node in graph.node:  # topologically sorted: a Cast of a Cast follows its source
        if node.op_type in _VALUE_PRESERVING and node.input and node.input[0] in carried:
            carried[node.output[0]] = carried[node.input[0]]
    gathers = [
        (node.input[0], carried[node.input[1]])
        for node in graph.node
        if node.op_type == "Gather" and len(node.input) == 2 and node.input[1] in carried and _axis(node) == 0
    ]
    if not gathers:
        return {}
    shapes = {t.name: tuple(t.dims) for t in graph.initializer}
    if any(data not in shapes for data, _ in gathers):
        shapes = _inferred_shapes(model) | shapes
    rows: dict[str, int] = {}
    for data, name in gathers:
        dims = shapes.get(data)
        if dims and dims[0] > 0:
            rows[name] = min(rows.get(name, dims[0]), dims[0])
    return rows


def synthetic_feeds(inputs: Iterable[Tensor], shapes: dict[str, tuple], rows: dict[str, int], seed: int) -> dict:
    """Arrays like tokenised text (module docstring) for the mask, ids and token types among `inputs`,
    each of shapes[name] (the sample index first); empty without a mask. Every axis before the last
    is a row of its own: batched [samples, seq], unbatched [samples, batch, seq]."""
    inputs = list(inputs)
    mask = mask_input(inputs)
    if mask is None:
        return {}
    rng = np.random.default_rng(seed)
    shape = shapes[mask.name]
    length = shape[-1]
    tokens = rng.integers(1, length + 1, shape[:-1])  # per row, one token at least, up to the whole row
    present = np.arange(length) < tokens[..., None]
    arrays = {mask.name: present.astype(mask.dtype)}
    for tensor in inputs:
        name = tensor.name.lower()
        if tensor.dtype.kind not in "iu" or shapes[tensor.name] != shape:  # not fed alongside the mask
            continue
        if name in IDS_NAMES:  # 0 is [PAD] in BERT vocabularies; real tokens from 1 (a table of one row: 0)
            table = rows.get(tensor.name, UNKNOWN_ROWS)
            ids = rng.integers(min(1, table - 1), table, shape)
            arrays[tensor.name] = np.where(present, ids, 0).astype(tensor.dtype)
        elif name in TYPE_NAMES:  # sentence pairs: segment 0, then 1; one type row (RoBERTa) or unknown: 0 only
            split = rng.integers(1, tokens + 1)[..., None]
            second = (np.arange(length) >= split) & present if rows.get(tensor.name, 1) >= 2 else False
            arrays[tensor.name] = np.broadcast_to(second, shape).astype(tensor.dtype)
    return arrays


def describe(arrays: dict, inputs: Iterable[Tensor], rows: dict[str, int]) -> dict | None:
    """What synthetic_feeds made, for the manifest's calibration entry (None: nothing)."""
    mask = mask_input(inputs)
    if mask is None or mask.name not in arrays:
        return None
    present = arrays[mask.name].astype(bool)
    tokens = present.sum(axis=-1)
    # over the tokens: the padding is 0 whatever the range
    ranges = {name: [int(a[present].min()), int(a[present].max())] for name, a in arrays.items() if name != mask.name}
    return {
        "attentionMask": mask.name,
        "tokensPerRow": [int(tokens.min()), int(tokens.max())],
        "idRanges": ranges,
        "tableRows": {name: rows[name] for name in ranges if name in rows},
    }


@dataclass(frozen=True)
class Padding:
    """Where the attention mask fed marks padding, for the accuracy comparison (module docstring)."""

    mask: str  # the input's name
    masks: tuple[np.ndarray, ...]  # per validation feed, the mask fed as booleans (True: a token)
    per_token: tuple[bool, ...]  # per model output: whether the graph lets it be [batch, seq, ...]

    def keep(self, feed: int, output: int, shape: tuple[int, ...]) -> np.ndarray | None:
        """The positions to compare of an output of `shape` on `feed`: the mask, when the output's leading
        axes are the mask's; None (every element) otherwise."""
        mask = self.masks[feed]
        if not self.per_token[output] or tuple(shape[: mask.ndim]) != mask.shape:
            return None
        return mask


def padding(feeds: list[dict], inputs: Iterable[Tensor], outputs: Iterable[Tensor]) -> Padding | None:
    """The padding of `feeds` (the validation feeds), or None: no attention mask among `inputs`, or a mask
    fed that is not 0/1 [batch, seq] (an additive mask of 0 and -10000: not ours to read)."""
    mask = mask_input(inputs)
    if mask is None or not feeds:
        return None
    masks = [np.asarray(feed[mask.name]) for feed in feeds]
    if not all(m.ndim == 2 and np.isin(m, (0, 1)).all() for m in masks):
        return None
    per_token = tuple(_may_be_per_token(output, mask) for output in outputs)
    return Padding(mask.name, tuple(m.astype(bool) for m in masks), per_token)


def _may_be_per_token(output: Tensor, mask: Tensor) -> bool:
    """Unless the graph says otherwise: rank under 2, or a static axis 1 where the mask's sequence is open
    or of another size (a pooled [batch, 384] is not per token, even on a feed of 384 tokens)."""
    if output.symbols is None:  # the graph does not say
        return True
    if len(output.dims) < 2:
        return False
    return output.dims[1] is None or output.dims[1] == mask.dims[1]


def _axis(node: onnx.NodeProto) -> int:
    return next((a.i for a in node.attribute if a.name == "axis"), 0)


def _inferred_shapes(model: onnx.ModelProto) -> dict[str, tuple]:
    """Intermediate tensors' shapes by onnx shape inference (0 where a size stays open); best effort:
    a graph it cannot follow (or one over protobuf's 2 GB) leaves the ids' range unknown."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:
        return {}
    return {
        value.name: tuple(d.dim_value if d.HasField("dim_value") else 0 for d in value.type.tensor_type.shape.dim)
        for value in inferred.graph.value_info
        if value.type.HasField("tensor_type")
    }
