"""The output shapes an onnxruntime engine's config gives are those onnxruntime gives its file: Triton's
onnxruntime backend refuses a config's -1 against a size onnxruntime fixes, and its shape inference fixes sizes
a file declares symbolic (the coverage matrix's minilm-l3 crash-looped so on 12-07), the more so at the
optimisation level the backend opens it with (akiki-vad crash-looped so)."""

import numpy as np
import onnx
import onnx.helper as h
import onnxruntime as ort
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


def behind_a_constant_if(path):
    """y = Sigmoid(If(true, x [1, 4], concat(x, x) [2, 4])): [?, 4] to shape inference, [1, 4] once constant
    folding takes the branch (akiki-vad's 'probability' is so)."""
    fp32 = onnx.TensorProto.FLOAT

    def branch(name, node, shape):
        return h.make_graph([node], name, [], [h.make_tensor_value_info(node.output[0], fp32, shape)])

    graph = h.make_graph(
        [
            h.make_node("Constant", [], ["c"], value=onnx.numpy_helper.from_array(np.array(True))),
            h.make_node(
                "If", ["c"], ["i"],
                then_branch=branch("then", h.make_node("Identity", ["x"], ["a"]), [1, 4]),
                else_branch=branch("else", h.make_node("Concat", ["x", "x"], ["b"], axis=0), [2, 4]),
            ),
            h.make_node("Sigmoid", ["i"], ["y"]),
        ],
        "g",
        [h.make_tensor_value_info("x", fp32, [1, 4])],
        [h.make_tensor_value_info("y", fp32, None)],
    )  # fmt: skip
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_the_shapes_are_those_of_the_level_triton_opens_the_file_at(tmp_path):
    model = behind_a_constant_if(tmp_path / "m.onnx")
    assert output_dims(model) == {"y": [1, 4]}  # ORT_ENABLE_ALL: the onnxruntime backend's default level
    assert output_dims(model, ort.GraphOptimizationLevel.ORT_DISABLE_ALL) == {"y": [-1, 4]}
