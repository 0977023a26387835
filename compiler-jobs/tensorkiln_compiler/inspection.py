"""Inspect step: read the ONNX graph and resolve its dynamic dimensions against spec.shapes.

Batched (spec.batched, the InferenceModel's serving.maxBatchSize > 0), axis 0 of every input and
output is the batch axis: Triton batches only so ("If the model's batch dimension is the first
dimension, and all inputs and outputs to the model have this batch dimension", model_configuration.md,
Maximum Batch Size). A tensor of rank 0, or with its batch on another axis, cannot be batched by
Triton, so it is refused by name with the alternative: serving.maxBatchSize 0. Unbatched, shapes are
full and every dynamic axis, axis 0 included, takes its range from spec.shapes.dynamicDims. Any
contradiction between the spec and the model is bad input whose message names the spec field.

Sequence batching (spec.sequenceBatching, the InferenceModel's serving.sequenceBatching): the state
pairs and control inputs it names must be in the graph, each pair's output of its input's element type
and shape. Without it, a batched model with a state pair (an input and an output alike in type and
shape whose names say so, see state_pairs) is refused by name: the dynamic batcher would mix the
requests of one stream with others' and keep none of them in order, so the fix it proposes is
serving.sequenceBatching (or serving.maxBatchSize 0, where each request carries its own state).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper
from tensorkiln_api import ModelIO, SequenceBatching, Shapes
from tensorkiln_api.registry.manifest import TensorInfo

from . import text
from .errors import InvalidInput

MIN_OPSET = 7  # the oldest opset onnxruntime runs
MODEL_FIELD = "spec.source.uri"
_TRITON_TYPES = {"FLOAT": "FP32", "FLOAT16": "FP16", "BFLOAT16": "BF16", "DOUBLE": "FP64", "STRING": "BYTES"}
UNBATCHED = "set spec.serving.maxBatchSize: 0 to serve full shapes"

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Tensor:
    name: str
    elem_type: int  # onnx.TensorProto data type
    dims: tuple[int | None, ...]  # None where the ONNX leaves the size open
    profile: tuple[Shape, Shape, Shape] | None = None  # inputs only: min, opt, max shapes
    symbols: tuple[str, ...] | None = None  # each axis's dim_param ("" if none); None: the graph gives no shape

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(helper.tensor_dtype_to_np_dtype(self.elem_type))

    def shape(self, batch: int) -> Shape:
        """The opt shape at another batch size: what benchmarks and synthetic data use."""
        return (batch, *self.profile[1][1:])

    def written(self) -> str:
        """The shape as the graph writes it: [2, batch, 8], '?' for an unnamed open size."""
        symbols = self.symbols or ("",) * len(self.dims)
        axes = [name or ("?" if size is None else str(size)) for size, name in zip(self.dims, symbols)]
        return f"[{', '.join(axes)}]"

    def info(self) -> TensorInfo:
        name = TensorProto.DataType.Name(self.elem_type)
        return TensorInfo(
            name=self.name, data_type=_TRITON_TYPES.get(name, name), dims=[-1 if d is None else d for d in self.dims]
        )


@dataclass(frozen=True)
class ModelInfo:
    path: Path
    opset: int | None  # the default domain's; None when the model imports only other domains
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    batched: bool = True  # axis 0 of every input and output is the batch axis
    # A text encoder's id inputs -> rows of the table each indexes (text.table_rows): what synthetic ids stay below.
    table_rows: dict[str, int] = dataclasses.field(default_factory=dict)


def inspect_model(
    path: Path,
    shapes: Shapes,
    batch_size: int,
    io: ModelIO | None = None,
    *,
    batched: bool = True,
    sequence: SequenceBatching | None = None,
) -> ModelInfo:
    model = load(path)
    opset = default_opset(model)  # None: only other domains (ai.onnx.ml), no opset to check
    if opset is not None and not MIN_OPSET <= opset <= onnx.defs.onnx_opset_version():
        raise InvalidInput(
            "UnsupportedOpset",
            f"{MODEL_FIELD}: {path.name} uses opset {opset}; supported: {MIN_OPSET}..{onnx.defs.onnx_opset_version()}",
        )
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        reason = "UnsupportedOperator" if "No Op registered" in str(e) else "ModelMalformed"
        raise InvalidInput(reason, f"{MODEL_FIELD}: {path.name}: {_first_line(e)}") from e
    initializers = {t.name for t in model.graph.initializer}
    check_tensor_types(model.graph, initializers)
    inputs = [_tensor(v) for v in model.graph.input if v.name not in initializers]
    outputs = [_tensor(v) for v in model.graph.output]
    if sequence is not None:
        check_sequence_tensors(sequence, inputs, outputs)
    elif batched:
        check_no_state_pair(inputs, outputs)
    if batched:
        check_batch_axes(inputs, outputs)
    _check_dynamic_dims(inputs, shapes, batched)
    if batched and not shapes.batch.min <= batch_size <= shapes.batch.max:
        raise InvalidInput(
            "ShapeMismatch",
            f"spec.objective.batchSize: {batch_size} is outside spec.shapes.batch "
            f"[{shapes.batch.min}, {shapes.batch.max}]",
        )
    if io is not None:
        check_declared_io(io, inputs, outputs, batched)
    return ModelInfo(
        path=path,
        opset=opset,
        inputs=tuple(_with_profile(t, shapes, batched) for t in inputs),
        outputs=tuple(outputs),
        batched=batched,
        table_rows=text.table_rows(model, inputs),
    )


def check_batch_axes(inputs: list[Tensor], outputs: list[Tensor]) -> None:
    """Every tensor has its batch on axis 0, or ShapeMismatch naming the first that does not. Its batch
    is elsewhere when another axis carries the symbol of some input's axis 0 and its own axis 0 does not."""
    batch_symbols = {t.symbols[0] for t in inputs if t.symbols and t.symbols[0]}
    for kind, tensors in (("input", inputs), ("output", outputs)):
        for tensor in tensors:
            if tensor.symbols is None:  # the graph does not say: nothing to hold against it
                continue
            if not tensor.dims:
                raise InvalidInput(
                    "ShapeMismatch",
                    f"spec.serving.maxBatchSize: {kind} {tensor.name!r} is a scalar (rank 0) and has no batch axis; "
                    f"axis 0 of every input and output must be the batch when serving.maxBatchSize > 0; {UNBATCHED}",
                )
            axis = next((a for a, s in enumerate(tensor.symbols[1:], 1) if s in batch_symbols), None)
            if axis is not None and tensor.symbols[0] != tensor.symbols[axis]:
                raise InvalidInput(
                    "ShapeMismatch",
                    f"spec.serving.maxBatchSize: {kind} {tensor.name!r} has batch on axis {axis} "
                    f"({tensor.written()}); axis 0 must be the batch when serving.maxBatchSize > 0; {UNBATCHED}",
                )


SEQUENCE_FIELD = "spec.serving.sequenceBatching"
_CONTROL_TYPES = {"correlationId": ("UINT64", "INT64", "UINT32", "INT32")}
_FLAG_TYPES = ("FP32", "INT32", "BOOL")  # Triton's fp32_false_true, int32_false_true, bool_false_true
# Name pairs that say "state in, state out": the output is the input's name with one of these changes.
_STATE_SUFFIXES = ("n", "N", "_n", "_out", "_next", "_new", ".out", "_output", "out", "Out")
_STATE_SWAPS = (("_in", "_out"), ("in_", "out_"), ("input", "output"), ("Input", "Output"), ("past", "present"),
                ("prev", "next"), ("0", "n"))  # fmt: skip


def check_sequence_tensors(sequence: SequenceBatching, inputs: list[Tensor], outputs: list[Tensor]) -> None:
    """Every state pair and control input serving.sequenceBatching names is in the graph, a pair's output
    of its input's element type and shape, a control of a type Triton can fill; else IOMismatch naming it."""
    found_inputs, found_outputs = {t.name: t for t in inputs}, {t.name: t for t in outputs}
    for index, pair in enumerate(sequence.state):
        field = f"{SEQUENCE_FIELD}.state[{index}]"
        state_in, state_out = found_inputs.get(pair.input), found_outputs.get(pair.output)
        if state_in is None:
            raise InvalidInput(
                "IOMismatch",
                f"{field}.input: the model has no input {pair.input!r} (inputs: {', '.join(found_inputs)}); a "
                "sequence-batched model takes its state as an input and gives the next as an output",
            )
        if state_out is None:
            raise InvalidInput(
                "IOMismatch",
                f"{field}.output: the model has no output {pair.output!r} (outputs: {', '.join(found_outputs)})",
            )
        if state_in.info().data_type != state_out.info().data_type or state_in.dims != state_out.dims:
            raise InvalidInput(
                "IOMismatch",
                f"{field}: output {pair.output!r} is {state_out.info().data_type} {state_out.written()}, but input "
                f"{pair.input!r} is {state_in.info().data_type} {state_in.written()}; the state output of one "
                "request is the state input of the next",
            )
    for field, name in sequence.tensor_names():
        if not field.startswith("controlInputs."):
            continue
        control = field.removeprefix("controlInputs.")
        tensor = found_inputs.get(name)
        if tensor is None:
            raise InvalidInput(
                "IOMismatch",
                f"{SEQUENCE_FIELD}.{field}: the model has no input {name!r} (inputs: {', '.join(found_inputs)})",
            )
        allowed = _CONTROL_TYPES.get(control, _FLAG_TYPES)
        if tensor.info().data_type not in allowed:
            raise InvalidInput(
                "IOMismatch",
                f"{SEQUENCE_FIELD}.{field}: input {name!r} is {tensor.info().data_type}; Triton fills this control "
                f"in {', '.join(allowed)} only",
            )


def state_pairs(inputs: list[Tensor], outputs: list[Tensor]) -> list[tuple[Tensor, Tensor]]:
    """(input, output) pairs that look like recurrent state: the same element type and shape as the graph
    writes it (rank 1 or more), and the output's name the input's with a state suffix or swap
    (state/stateN, h_in/h_out, past/present, h0/hn)."""
    pairs = []
    for tensor in inputs:
        if not tensor.dims or tensor.symbols is None:
            continue
        names = {tensor.name + suffix for suffix in _STATE_SUFFIXES}
        names |= {tensor.name.replace(a, b) for a, b in _STATE_SWAPS if a in tensor.name}
        for output in outputs:
            alike = output.elem_type == tensor.elem_type and output.written() == tensor.written()
            if alike and output.name in names:
                pairs.append((tensor, output))
    return pairs


def check_no_state_pair(inputs: list[Tensor], outputs: list[Tensor]) -> None:
    """Batched without sequence batching: a state pair is refused by name, with the fix."""
    for state_in, state_out in state_pairs(inputs, outputs):
        raise InvalidInput(
            "ShapeMismatch",
            f"{SEQUENCE_FIELD}: input {state_in.name!r} and output {state_out.name!r} look like a recurrent state "
            f"({state_in.written()}), but the model is served batched without sequence batching: the dynamic "
            "batcher would mix one stream's requests with others' and not keep them in order. Set "
            f"spec.serving.sequenceBatching.state: [{{input: {state_in.name}, output: {state_out.name}}}] "
            f"(Triton keeps the state per sequence), or, if each request carries its own state, {UNBATCHED}",
        )


def check_tensor_types(graph: onnx.GraphProto, initializers: set[str] = frozenset()) -> None:
    """Every input and output is a tensor, or UnsupportedTensorType naming the first that is not
    (skl2onnx's ZipMap output is a sequence of maps): Triton serves tensors only."""
    for kind, values in (("input", graph.input), ("output", graph.output)):
        for value in values:
            if value.name in initializers or value.type.WhichOneof("value") == "tensor_type":
                continue
            what = _type_name(value.type)
            hint = ""
            if what == "a sequence of maps":
                hint = "; export with zipmap=False (skl2onnx options={id(model): {'zipmap': False}})"
            raise InvalidInput(
                "UnsupportedTensorType",
                f"{MODEL_FIELD}: {kind} {value.name!r} is {what}, not a tensor; Triton serves tensors only{hint}",
            )


def _type_name(type_proto: onnx.TypeProto, plural: bool = False) -> str:
    """'a sequence of maps', 'a map', 'an optional': what a non-tensor value is, for messages."""
    kind = type_proto.WhichOneof("value")
    if kind == "sequence_type":
        return f"{'sequences' if plural else 'a sequence'} of {_type_name(type_proto.sequence_type.elem_type, True)}"
    singular, many = _TYPE_NAMES.get(kind, ("an untyped value", "untyped values"))
    return many if plural else singular


_TYPE_NAMES = {
    "tensor_type": ("a tensor", "tensors"),
    "sparse_tensor_type": ("a sparse tensor", "sparse tensors"),
    "map_type": ("a map", "maps"),
    "optional_type": ("an optional", "optionals"),
    "opaque_type": ("an opaque value", "opaque values"),
}


def check_declared_io(io: ModelIO, inputs: list[Tensor], outputs: list[Tensor], batched: bool = True) -> None:
    """spec.io as the graph has it: the same names, element types and dims (batched, without the batch
    axis; unbatched, the full shape; a declared -1 matches any size, a declared size one the graph
    leaves open), or IOMismatch naming what the spec declares and what the graph has."""
    layout = "dims without the batch axis" if batched else "full shape"
    for field, declared, graph in (("inputs", io.inputs, inputs), ("outputs", io.outputs, outputs)):
        found = {t.name: t.info() for t in graph}
        if sorted(d.name for d in declared) != sorted(found):
            raise InvalidInput(
                "IOMismatch",
                f"spec.io.{field} declares {sorted(d.name for d in declared)}; the graph's {field} are {sorted(found)}",
            )
        for index, tensor in enumerate(declared):
            actual = found[tensor.name]
            graph_dims = actual.dims[1:] if batched else actual.dims  # batched, dims leave the batch axis out
            agree = len(tensor.dims) == len(graph_dims) and all(
                want in (-1, have) or have == -1 for want, have in zip(tensor.dims, graph_dims)
            )
            if tensor.data_type != actual.data_type or not agree:
                raise InvalidInput(
                    "IOMismatch",
                    f"spec.io.{field}[{index}] ({tensor.name!r}) declares {tensor.data_type} {tensor.dims}; the graph "
                    f"has {actual.data_type} {graph_dims} ({layout}, -1 where open)",
                )


def load(path: Path) -> onnx.ModelProto:
    try:
        return onnx.load(str(path))
    except Exception as e:  # protobuf raises DecodeError, RuntimeWarning or ValueError on garbage
        raise InvalidInput("ModelMalformed", f"{MODEL_FIELD}: {path.name} is not an ONNX model: {e}") from e


def default_opset(model: onnx.ModelProto) -> int | None:
    """The default domain's opset; None when the model imports none (valid ONNX: a classic-ML model of
    ai.onnx.ml operators only, such as a skl2onnx LinearClassifier)."""
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return entry.version
    return None


def _check_dynamic_dims(inputs: list[Tensor], shapes: Shapes, batched: bool) -> None:
    """Entries must name an existing input and an axis inside its rank, not the batch axis."""
    by_name = {t.name: t for t in inputs}
    for i, entry in enumerate(shapes.dynamic_dims):
        field = f"spec.shapes.dynamicDims[{i}]"
        tensor = by_name.get(entry.input)
        if tensor is None:
            raise InvalidInput(
                "ShapeMismatch", f"{field}.input: the model has no input {entry.input!r} (inputs: {', '.join(by_name)})"
            )
        if batched and entry.axis == 0:
            raise InvalidInput(
                "ShapeMismatch",
                f"{field}.axis: axis 0 is the batch axis; set spec.shapes.batch, or, if input {entry.input!r} has "
                f"no batch axis, {UNBATCHED}",
            )
        if entry.axis >= len(tensor.dims):
            raise InvalidInput(
                "ShapeMismatch",
                f"{field}.axis: {entry.axis} is out of range for input {entry.input!r} of rank {len(tensor.dims)}",
            )
        static = tensor.dims[entry.axis]
        if static is not None and (entry.min, entry.max) != (static, static):
            raise InvalidInput(
                "ShapeMismatch",
                f"{field}: axis {entry.axis} of input {entry.input!r} is static ({static}), "
                f"but the entry asks for {entry.min}..{entry.max}",
            )


def _with_profile(tensor: Tensor, shapes: Shapes, batched: bool) -> Tensor:
    """The tensor with its min/opt/max shapes: batched, axis 0 from spec.shapes.batch; every other
    axis (unbatched, every axis) static or from its spec.shapes.dynamicDims entry."""
    if tensor.symbols is None:
        raise InvalidInput("ShapeMismatch", f"{MODEL_FIELD}: input {tensor.name!r} has no shape in the graph")
    low, opt, high = [], [], []
    if batched:
        batch = shapes.batch
        if tensor.dims[0] is not None:
            # Even a static 1: Triton's backends batch along a dynamic axis 0 only, and refuse to load a model
            # whose axis 0 is static under max_batch_size > 0 ("the first dimension must be -1").
            raise InvalidInput(
                "ShapeMismatch",
                f"spec.serving.maxBatchSize: input {tensor.name!r} has a static batch dimension of {tensor.dims[0]} "
                f"({tensor.written()}), and Triton batches only along a dynamic axis 0; {UNBATCHED} (axis 0 "
                "included, as the model has it), or export the model with a dynamic batch axis",
            )
        low, opt, high = [batch.min], [batch.opt], [batch.max]
    entries = {e.axis: e for e in shapes.dynamic_dims if e.input == tensor.name}
    for axis in range(len(low), len(tensor.dims)):
        size, entry = tensor.dims[axis], entries.get(axis)
        if size is None and entry is None:
            raise InvalidInput(
                "ShapeMismatch",
                f"spec.shapes.dynamicDims: axis {axis} of input {tensor.name!r} is dynamic in {tensor.written()};"
                " add an entry with its min/opt/max",
            )
        low.append(size or entry.min)
        opt.append(size or entry.opt)
        high.append(size or entry.max)
    return Tensor(tensor.name, tensor.elem_type, tensor.dims, (tuple(low), tuple(opt), tuple(high)), tensor.symbols)


def _tensor(value: onnx.ValueInfoProto) -> Tensor:
    tensor_type = value.type.tensor_type
    dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tensor_type.shape.dim)
    symbols = tuple(d.dim_param for d in tensor_type.shape.dim) if tensor_type.HasField("shape") else None
    return Tensor(value.name, tensor_type.elem_type, dims, symbols=symbols)


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
