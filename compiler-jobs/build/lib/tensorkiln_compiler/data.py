"""Data step: calibration and validation samples, one array per model input, sample index first.

Batched, the sample index is the batch axis: samples are fed in batches. Unbatched, it is an axis
of its own before the input's full shape: each sample is fed alone, as one request carries it.
The dataset is an .npz, or a directory of NAME.npy files. Without one, inputs are
synthesised from the resolved shapes (seeded) and the engine says so (syntheticData); a text
encoder's mask, ids and token types are synthesised like tokenised text (text.synthetic_feeds), and
the engine says how (syntheticText).
Validation samples are held out of calibration whenever there are at least two samples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tensorkiln_api import SyntheticInput

from .errors import InvalidInput, first_line
from .fetch import Fetched
from .inspection import Tensor
from .text import describe, synthetic_feeds

FIELD = "spec.calibration.datasetUri"
SYNTHETIC_FIELD = "spec.compile.syntheticInputs"  # the InferenceModel's field: what the user edits
MAX_VALIDATION = 16  # enough to compare outputs, few enough for a 2-core node
SYNTHETIC_SAMPLES = 16
SEED = 0

Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class Dataset:
    calibration: Arrays
    validation: Arrays
    synthetic: bool
    batched: bool
    uri: str | None = None
    sha256: str | None = None
    text: dict | None = None  # synthetic feeds shaped like tokenised text: how (text.describe)
    drawn: dict[str, str] | None = None  # synthetic: how each input's samples were made, by input name
    given: frozenset[str] = frozenset()  # synthetic: the inputs whose values spec.compile.syntheticInputs gave

    def calibration_samples(self) -> list[Arrays]:
        """One feed per sample (a batch of 1, or unbatched the sample itself): what calibrators iterate over."""
        return _samples(self.calibration, self.batched)

    def batches(self, size: int) -> list[Arrays]:
        """Validation samples in full batches of `size`, repeating samples to fill the last one;
        unbatched, one sample per feed (`size` is 1: objective.batchSize must be)."""
        if not self.batched:
            return _samples(self.validation, batched=False)
        count = len(next(iter(self.validation.values())))
        order = np.arange(math.ceil(count / size) * size) % count
        return [
            {name: a[order[i : i + size]] for name, a in self.validation.items()} for i in range(0, len(order), size)
        ]

    def manifest(self) -> dict:
        manifest = {
            "datasetUri": self.uri,
            "sha256": self.sha256,
            "calibrationSamples": len(next(iter(self.calibration.values()))),
            "validationSamples": len(next(iter(self.validation.values()))),
            "syntheticData": self.synthetic,
        }
        if self.text is not None:  # only then: other models' manifests stay as they were
            manifest["syntheticText"] = self.text
        if self.drawn is not None:
            manifest["syntheticInputs"] = self.drawn
        return manifest


def load_dataset(fetched: Fetched, inputs: tuple[Tensor, ...], max_calibration: int, batched: bool = True) -> Dataset:
    read = _read(fetched.path)
    arrays = {t.name: _checked(read, t, fetched.path.name, batched) for t in inputs}
    counts = {name: len(a) for name, a in arrays.items()}
    if len(set(counts.values())) > 1:
        raise InvalidInput("CalibrationDataInvalid", f"{FIELD}: inputs have different sample counts: {counts}")
    return Dataset(
        *_split(arrays, max_calibration), synthetic=False, batched=batched, uri=fetched.uri, sha256=fetched.sha256
    )


def synthesize(
    inputs: tuple[Tensor, ...],
    batched: bool = True,
    table_rows: dict[str, int] | None = None,
    given: dict[str, SyntheticInput] | None = None,
) -> Dataset:
    """Seeded inputs at the opt shapes; `table_rows`: a text encoder's id inputs -> rows of the table each
    indexes (inspection's ModelInfo.table_rows), the bound of its synthetic ids; `given`: the spec's
    syntheticInputs, a constant or a range per input name, in place of the compiler's own draws."""
    given = given or {}
    names = {t.name for t in inputs}
    if unknown := sorted(given.keys() - names):
        raise InvalidInput(
            "InvalidSyntheticInput",
            f"{SYNTHETIC_FIELD}: the model has no input {', '.join(map(repr, unknown))} "
            f"(its inputs: {', '.join(sorted(names))})",
        )
    given = {name: value for name, value in given.items() if value.value is not None or value.min is not None}
    rng = np.random.default_rng(SEED)
    arrays, shapes, drawn = {}, {}, {}
    for tensor in inputs:
        shape = tensor.shape(SYNTHETIC_SAMPLES) if batched else (SYNTHETIC_SAMPLES, *tensor.profile[1])
        shapes[tensor.name] = shape
        arrays[tensor.name], drawn[tensor.name] = _draw(rng, tensor, shape)
    # A text encoder's mask, ids and token types replace those draws; its other inputs, and every input of
    # any other model, keep the draws above (a generator of their own leaves them as they were).
    text = synthetic_feeds(inputs, shapes, table_rows or {}, SEED)
    arrays.update(text)
    drawn.update({name: "shaped like tokenised text" for name in text})
    # The spec's values come last: they are what the user knows the model accepts.
    for tensor in inputs:
        if tensor.name in given:
            arrays[tensor.name], drawn[tensor.name] = _given(rng, tensor, shapes[tensor.name], given[tensor.name])
    return Dataset(
        *_split(arrays, SYNTHETIC_SAMPLES),
        synthetic=True,
        batched=batched,
        text=describe(text, inputs, table_rows or {}),
        drawn=drawn,
        given=frozenset(given),
    )


def refused(dataset: Dataset, inputs: tuple[Tensor, ...], error: BaseException) -> InvalidInput:
    """The failure for a model that refuses the samples it was fed (its FP32 reference run raised): the
    runtime's own first line, what was fed, and the field that changes it."""
    said = first_line(error)
    if not dataset.synthetic:
        return InvalidInput(
            "CalibrationDataRefused",
            f"spec.compile.calibration.datasetUri: the model refused the dataset's samples: {said}",
        )
    drawn = dataset.drawn or {}

    def drawn_blindly(tensor: Tensor) -> bool:  # a scalar or integer input: a rate, a size, an index?
        return tensor.name not in dataset.given and (not tensor.dims or tensor.dtype.kind in "iub")

    ordered = sorted(inputs, key=lambda t: not drawn_blindly(t))  # the likeliest culprits first
    fed = "; ".join(f"{t.name} ({t.dtype} {list(t.dims) or 'scalar'}): {drawn.get(t.name, '?')}" for t in ordered)
    return InvalidInput(
        "SyntheticInputRefused",
        f"{SYNTHETIC_FIELD}: the model refused the inputs the compiler synthesised (no spec.compile.calibration): "
        f"{said}. Synthesised: {fed}. Give the values the model accepts in {SYNTHETIC_FIELD} (a value, or min "
        f"and max), e.g. {ordered[0].name}: {{value: ...}}, or a dataset in spec.compile.calibration.datasetUri",
    )


def _draw(rng: np.random.Generator, tensor: Tensor, shape: tuple[int, ...]) -> tuple[np.ndarray, str]:
    """The compiler's own draw for an input the spec gives no values for, and how it was drawn."""
    if tensor.dtype.kind == "f":
        return rng.standard_normal(shape).astype(tensor.dtype), "standard normal"
    if tensor.dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool), "false or true"
    # ids and indices: small values stay valid for most vocabularies and tables
    return rng.integers(0, 16, shape).astype(tensor.dtype), "integers 0 to 15"


def _given(rng: np.random.Generator, tensor: Tensor, shape: tuple[int, ...], value: SyntheticInput):
    """An input's samples from the spec's syntheticInputs entry, and how they were made."""
    where = f"{SYNTHETIC_FIELD}.{tensor.name}"
    if value.value is not None:
        if tensor.dtype.kind in "iub" and value.value != int(value.value):
            raise InvalidInput("InvalidSyntheticInput", f"{where}.value: input {tensor.name!r} is {tensor.dtype}: "
                               f"give a whole number, not {value.value:g}")  # fmt: skip
        return np.full(shape, value.value).astype(tensor.dtype), f"{value.value:g} ({where})"
    if tensor.dtype.kind == "f":
        drawn = rng.uniform(value.min, value.max, shape).astype(tensor.dtype)
        return drawn, f"uniform {value.min:g} to {value.max:g} ({where})"
    low, high = math.ceil(value.min), math.floor(value.max)
    if low > high:
        raise InvalidInput("InvalidSyntheticInput", f"{where}: input {tensor.name!r} is {tensor.dtype}: "
                           f"no whole number lies in {value.min:g} to {value.max:g}")  # fmt: skip
    return rng.integers(low, high + 1, shape).astype(tensor.dtype), f"integers {low} to {high} ({where})"


def _read(path: Path) -> dict:
    try:
        if path.is_dir():
            return {p.stem: np.load(p, allow_pickle=False) for p in sorted(path.glob("*.npy"))}
        with np.load(path, allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}
    except (OSError, ValueError) as e:
        raise InvalidInput(
            "CalibrationDataInvalid", f"{FIELD}: {path.name} is neither an .npz nor a directory of .npy: {e}"
        ) from e


def _checked(arrays: dict, tensor: Tensor, source: str, batched: bool) -> np.ndarray:
    where = f"{FIELD}: {source}"
    # Batched, the sample index is the input's axis 0 (its batch axis); unbatched, an axis before the input's own.
    offset = 0 if batched else 1  # array axis = input axis + offset
    if tensor.name not in arrays:
        raise InvalidInput(
            "CalibrationDataInvalid",
            f"{where} has no array for input {tensor.name!r} (has: {', '.join(arrays) or 'none'})",
        )
    array = arrays[tensor.name]
    if array.ndim != len(tensor.dims) + offset:
        layout = "sample index first" if batched else "the sample index, then the input's full shape"
        raise InvalidInput(
            "CalibrationDataInvalid",
            f"{where}: array {tensor.name!r} has shape {array.shape}; input {tensor.name!r} needs rank "
            f"{len(tensor.dims) + offset}, {layout}",
        )
    if len(array) == 0:
        raise InvalidInput("CalibrationDataInvalid", f"{where}: array {tensor.name!r} is empty")
    low, _, high = tensor.profile
    for axis in range(1 - offset, len(tensor.dims)):  # batched, axis 0 is the sample index: any count
        size = array.shape[axis + offset]
        if not low[axis] <= size <= high[axis]:
            raise InvalidInput(
                "CalibrationDataInvalid",
                f"{where}: array {tensor.name!r} has shape {array.shape}; axis {axis} of input {tensor.name!r} "
                f"accepts {low[axis]}..{high[axis]}",
            )
    if not np.can_cast(array.dtype, tensor.dtype, "same_kind"):
        raise InvalidInput(
            "CalibrationDataInvalid",
            f"{where}: array {tensor.name!r} is {array.dtype}; input {tensor.name!r} is {tensor.dtype}",
        )
    return array.astype(tensor.dtype, copy=False)


def _samples(arrays: Arrays, batched: bool) -> list[Arrays]:
    """One feed per sample: a batch of 1, or unbatched the sample at the input's full shape
    (`a[i, ...]`: a 0-d array for a scalar input, which a plain `a[i]` would make a numpy scalar)."""
    count = len(next(iter(arrays.values())))
    return [{name: a[i : i + 1] if batched else a[i, ...] for name, a in arrays.items()} for i in range(count)]


def _split(arrays: Arrays, max_calibration: int) -> tuple[Arrays, Arrays]:
    count = len(next(iter(arrays.values())))
    if count == 1:  # nothing to hold out: validate on the calibration sample itself
        return arrays, arrays
    held_out = min(MAX_VALIDATION, max(1, count // 4))
    calibration = min(count - held_out, max_calibration)
    return {n: a[:calibration] for n, a in arrays.items()}, {n: a[count - held_out :] for n, a in arrays.items()}
