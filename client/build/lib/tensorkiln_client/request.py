"""One inference request from files, checked against the served model's metadata (pure but for
reading the files): what `tensorkiln infer` sends and how it prints the answer.

Inputs: a `.npy` file (a model with one input), a `.npz` file (arrays named after the inputs), or
an image (PNG, JPEG, BMP; a model with one image-shaped input: 4-D with 1 or 3 channels first or
last). An image is resized to the input's height and width and scaled to [0, 1], which is how far
a generic client can go: a model that wants its own normalisation takes a `.npy` instead. Where the
model batches and an array lacks the batch axis, one is added; where it does not (max_batch_size 0),
arrays are full shapes, and a scalar is sent as [1], the shape Triton gives a scalar input.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tritonclient.utils import triton_to_np_dtype

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")


class RequestError(ValueError):
    """Input that does not fit the model; the message names the tensor and what it expects."""


@dataclass(frozen=True)
class ServedTensor:
    """One input as the serving Triton describes it (its model metadata), not spec.io's declaration."""

    name: str
    datatype: str  # Triton's: FP32, INT64, ...
    shape: tuple[int, ...]  # -1: any size (the batch axis of a batching model is -1)

    @classmethod
    def from_metadata(cls, entry: dict) -> ServedTensor:
        return cls(entry["name"], entry["datatype"], tuple(int(d) for d in entry["shape"]))

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(triton_to_np_dtype(self.datatype))

    def describe(self) -> str:
        return f"{list(self.shape)} of {self.datatype} ({self.dtype})"


def _fits(shape: tuple[int, ...], spec: ServedTensor) -> bool:
    return len(shape) == len(spec.shape) and all(want in (-1, got) for want, got in zip(spec.shape, shape))


def checked(spec: ServedTensor, array: np.ndarray, batching: bool) -> np.ndarray:
    """`array` as `spec` takes it (a batch axis added where it lacks one, a scalar as [1]), or RequestError."""
    if batching and len(array.shape) == len(spec.shape) - 1:
        array = array[np.newaxis]
    elif not batching and array.shape == () and spec.shape == (1,):  # Triton's dims [1] reshaped to []
        array = array.reshape(1)
    if not _fits(array.shape, spec):
        raise RequestError(f"input {spec.name!r}: expected shape {spec.describe()}, got {list(array.shape)}")
    if array.dtype != spec.dtype:
        raise RequestError(
            f"input {spec.name!r}: expected dtype {spec.dtype} ({spec.datatype}), got {array.dtype}; "
            f"convert it, e.g. array.astype(np.{spec.dtype})"
        )
    return array


def image_layout(spec: ServedTensor) -> tuple[int, int, int, bool]:
    """(height, width, channels, channels_first) of a 4-D image input, or RequestError."""
    if len(spec.shape) == 4 and spec.shape[1] in (1, 3) and spec.shape[2] > 0 and spec.shape[3] > 0:
        return spec.shape[2], spec.shape[3], spec.shape[1], True
    if len(spec.shape) == 4 and spec.shape[3] in (1, 3) and spec.shape[1] > 0 and spec.shape[2] > 0:
        return spec.shape[1], spec.shape[2], spec.shape[3], False
    raise RequestError(
        f"input {spec.name!r} of shape {list(spec.shape)} does not look like an image (4-D, 1 or 3 channels "
        "first or last, fixed height and width): give a .npy or .npz instead"
    )


def image_array(path: Path, spec: ServedTensor) -> np.ndarray:
    """The image at `path` as `spec` takes it: resized, channels where it wants them, in [0, 1]."""
    try:
        from PIL import Image
    except ImportError as error:  # an optional extra: the operator image does not need it
        raise RequestError("reading images needs Pillow: pip install pillow") from error
    height, width, channels, channels_first = image_layout(spec)
    with Image.open(path) as image:
        pixels = np.asarray(image.convert("L" if channels == 1 else "RGB").resize((width, height)))
    pixels = pixels.reshape(height, width, channels).astype(spec.dtype) / 255
    return (pixels.transpose(2, 0, 1) if channels_first else pixels)[np.newaxis]


def inputs_from(path: Path, specs: list[ServedTensor], batching: bool) -> dict[str, np.ndarray]:
    """Every input of the request, by name, from one file."""
    suffix = path.suffix.lower()
    names = ", ".join(s.name for s in specs)
    if suffix == ".npz":
        with np.load(path) as archive:
            given = {key: archive[key] for key in archive.files}
        missing = [s.name for s in specs if s.name not in given]
        unknown = sorted(set(given) - {s.name for s in specs})
        if missing or unknown:
            raise RequestError(f"{path.name} holds {sorted(given)}; the model's inputs are: {names}")
        return {s.name: checked(s, given[s.name], batching) for s in specs}
    if len(specs) != 1:
        raise RequestError(f"the model has {len(specs)} inputs ({names}): give a .npz with one array for each")
    (spec,) = specs
    if suffix == ".npy":
        return {spec.name: checked(spec, np.load(path), batching)}
    if suffix in IMAGE_SUFFIXES:
        return {spec.name: checked(spec, image_array(path, spec), batching)}
    raise RequestError(f"{path.name}: expected a .npy, .npz or image file ({', '.join(IMAGE_SUFFIXES)})")


def top_k(scores: np.ndarray, k: int) -> list[tuple[int, float]] | None:
    """(class, score) pairs of a classifier's output for one sample ([1, classes]); None for any
    other output (it is printed as a shape and a summary instead)."""
    if scores.ndim != 2 or scores.shape[0] != 1 or scores.shape[1] < 2:
        return None
    row = scores[0].astype(np.float64)
    best = np.argsort(-row, kind="stable")[:k]
    return [(int(i), float(row[i])) for i in best]


def describe_output(name: str, value: np.ndarray, k: int, labels: list[str] | None = None) -> list[str]:
    """The lines `tensorkiln infer` prints for one output; `labels` name a classifier's classes."""
    lines = [f"{name}: shape {list(value.shape)} {value.dtype}"]
    ranked = top_k(value, k) if np.issubdtype(value.dtype, np.number) else None
    if ranked is not None:
        named = labels or []
        lines += [
            f"  class {index}" + (f" ({named[index]})" if index < len(named) else "") + f": {score:.4f}"
            for index, score in ranked
        ]
    elif value.size and np.issubdtype(value.dtype, np.number):
        lines.append(f"  min {value.min():.4g}, max {value.max():.4g}, mean {value.mean():.4g}")
    return lines
