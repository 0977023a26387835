"""Inspect step: read the ONNX graph and resolve its dynamic dimensions against spec.shapes.

Axis 0 of every input is the batch axis (Triton's max_batch_size convention). Every other
dynamic axis needs a spec.shapes.dynamicDims entry; any contradiction between the spec and
the model is bad input whose message names the spec field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper
from tensorkiln.api import ModelIO, Shapes
from tensorkiln.registry.manifest import TensorInfo

from .errors import InvalidInput

MIN_OPSET = 7  # the oldest opset onnxruntime runs
MODEL_FIELD = "spec.source.uri"
_TRITON_TYPES = {"FLOAT": "FP32", "FLOAT16": "FP16", "BFLOAT16": "BF16", "DOUBLE": "FP64", "STRING": "BYTES"}

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Tensor:
    name: str
    elem_type: int  # onnx.TensorProto data type
    dims: tuple[int | None, ...]  # None where the ONNX leaves the size open
    profile: tuple[Shape, Shape, Shape] | None = None  # inputs only: min, opt, max shapes

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(helper.tensor_dtype_to_np_dtype(self.elem_type))

    def shape(self, batch: int) -> Shape:
        """The opt shape at another batch size: what benchmarks and synthetic data use."""
        return (batch, *self.profile[1][1:])

    def info(self) -> TensorInfo:
        name = TensorProto.DataType.Name(self.elem_type)
        return TensorInfo(
            name=self.name, data_type=_TRITON_TYPES.get(name, name), dims=[-1 if d is None else d for d in self.dims]
        )


@dataclass(frozen=True)
class ModelInfo:
    path: Path
    opset: int
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]


def inspect_model(path: Path, shapes: Shapes, batch_size: int, io: ModelIO | None = None) -> ModelInfo:
    model = load(path)
    opset = default_opset(model)
    if not MIN_OPSET <= opset <= onnx.defs.onnx_opset_version():
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
    inputs = [_tensor(v) for v in model.graph.input if v.name not in initializers]
    _check_dynamic_dims(inputs, shapes)
    if not shapes.batch.min <= batch_size <= shapes.batch.max:
        raise InvalidInput(
            "ShapeMismatch",
            f"spec.objective.batchSize: {batch_size} is outside spec.shapes.batch "
            f"[{shapes.batch.min}, {shapes.batch.max}]",
        )
    outputs = [_tensor(v) for v in model.graph.output]
    if io is not None:
        check_declared_io(io, inputs, outputs)
    return ModelInfo(
        path=path,
        opset=opset,
        inputs=tuple(_with_profile(t, shapes) for t in inputs),
        outputs=tuple(outputs),
    )


def check_declared_io(io: ModelIO, inputs: list[Tensor], outputs: list[Tensor]) -> None:
    """spec.io as the graph has it: the same names, element types and dims (without the batch
    axis; a declared -1 matches any size, a declared size one the graph leaves open), or
    IOMismatch naming what the spec declares and what the graph has."""
    for field, declared, graph in (("inputs", io.inputs, inputs), ("outputs", io.outputs, outputs)):
        found = {t.name: t.info() for t in graph}
        if sorted(d.name for d in declared) != sorted(found):
            raise InvalidInput(
                "IOMismatch",
                f"spec.io.{field} declares {sorted(d.name for d in declared)}; the graph's {field} are {sorted(found)}",
            )
        for index, tensor in enumerate(declared):
            actual = found[tensor.name]
            graph_dims = actual.dims[1:]  # axis 0 is the batch axis, which dims leave out
            agree = len(tensor.dims) == len(graph_dims) and all(
                want in (-1, have) or have == -1 for want, have in zip(tensor.dims, graph_dims)
            )
            if tensor.data_type != actual.data_type or not agree:
                raise InvalidInput(
                    "IOMismatch",
                    f"spec.io.{field}[{index}] ({tensor.name!r}) declares {tensor.data_type} {tensor.dims}; the graph "
                    f"has {actual.data_type} {graph_dims} (dims without the batch axis, -1 where open)",
                )


def load(path: Path) -> onnx.ModelProto:
    try:
        return onnx.load(str(path))
    except Exception as e:  # protobuf raises DecodeError, RuntimeWarning or ValueError on garbage
        raise InvalidInput("ModelMalformed", f"{MODEL_FIELD}: {path.name} is not an ONNX model: {e}") from e


def default_opset(model: onnx.ModelProto) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return entry.version
    raise InvalidInput("ModelMalformed", f"{MODEL_FIELD}: the model imports no default-domain opset")


def _check_dynamic_dims(inputs: list[Tensor], shapes: Shapes) -> None:
    """Entries must name an existing input and a non-batch axis inside its rank."""
    by_name = {t.name: t for t in inputs}
    for i, entry in enumerate(shapes.dynamic_dims):
        field = f"spec.shapes.dynamicDims[{i}]"
        tensor = by_name.get(entry.input)
        if tensor is None:
            raise InvalidInput(
                "ShapeMismatch", f"{field}.input: the model has no input {entry.input!r} (inputs: {', '.join(by_name)})"
            )
        if entry.axis == 0:
            raise InvalidInput("ShapeMismatch", f"{field}.axis: axis 0 is the batch axis; set spec.shapes.batch")
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


def _with_profile(tensor: Tensor, shapes: Shapes) -> Tensor:
    batch = shapes.batch
    if not tensor.dims:
        raise InvalidInput("ShapeMismatch", f"{MODEL_FIELD}: input {tensor.name!r} is a scalar and has no batch axis")
    static_batch = tensor.dims[0]
    if static_batch is not None and (batch.min, batch.max) != (static_batch, static_batch):
        raise InvalidInput(
            "ShapeMismatch",
            f"spec.shapes.batch: {batch.min}..{batch.max}, but input {tensor.name!r} has a static batch "
            f"dimension of {static_batch}; set min=opt=max={static_batch} or export a dynamic batch axis",
        )
    entries = {e.axis: e for e in shapes.dynamic_dims if e.input == tensor.name}
    low, opt, high = [batch.min], [batch.opt], [batch.max]
    for axis, size in enumerate(tensor.dims[1:], start=1):
        entry = entries.get(axis)
        if size is None and entry is None:
            raise InvalidInput(
                "ShapeMismatch",
                f"spec.shapes.dynamicDims: axis {axis} of input {tensor.name!r} is dynamic;"
                " add an entry with its min/opt/max",
            )
        low.append(size or entry.min)
        opt.append(size or entry.opt)
        high.append(size or entry.max)
    return Tensor(tensor.name, tensor.elem_type, tensor.dims, (tuple(low), tuple(opt), tuple(high)))


def _tensor(value: onnx.ValueInfoProto) -> Tensor:
    tensor_type = value.type.tensor_type
    dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tensor_type.shape.dim)
    return Tensor(value.name, tensor_type.elem_type, dims)


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
