"""The output shapes an onnxruntime engine's config gives are those onnxruntime gives its file: Triton's
onnxruntime backend refuses a config's -1 against a size onnxruntime fixes, and its shape inference fixes sizes
a file declares symbolic (the coverage matrix's minilm-l3 crash-looped so on 12-07)."""

import onnx
from tensorkiln_api import CompileJobSpec, Precision
from tensorkiln_compiler.candidates import BuildContext, onnxruntime
from tensorkiln_compiler.candidates.onnxruntime import output_dims
from tensorkiln_compiler.inspection import inspect_model

from .compiler_support import compile_spec, conv_classifier


def with_symbolic_classes(path):
    """conv_classifier with its output declared [N, C]: the class count left symbolic."""
    model = onnx.load(str(conv_classifier(path)))
    dim = model.graph.output[0].type.tensor_type.shape.dim[1]
    dim.ClearField("dim_value")
    dim.dim_param = "C"
    onnx.save(model, str(path))
    return path


def test_onnxruntime_infers_the_size_a_file_leaves_symbolic_and_a_symbolic_batch_stays_minus_one(tmp_path):
    assert output_dims(with_symbolic_classes(tmp_path / "m.onnx")) == {"scores": [-1, 5]}  # declared [N, C]
    assert output_dims(conv_classifier(tmp_path / "fixed.onnx")) == {"scores": [-1, 5]}


def test_every_build_and_the_baseline_record_the_shapes_onnxruntime_gives(tmp_path):
    model = with_symbolic_classes(tmp_path / "m.onnx")
    spec = CompileJobSpec.model_validate(compile_spec(model, tmp_path / "registry"))
    info = inspect_model(model, spec.shapes, 1)
    ctx = BuildContext(spec=spec, model=info, dataset=None, fingerprint={}, threads=1, work_dir=tmp_path / "work")
    assert onnxruntime.build(ctx, Precision.FP32).output_dims == {"scores": [-1, 5]}
    assert onnxruntime.baseline(ctx).output_dims == {"scores": [-1, 5]}  # the unmodified file declares [N, C]
    assert list(info.outputs[0].dims) == [None, None]  # what the manifest gave before: the declared shape
