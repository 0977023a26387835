"""Shared by the compiler's tests: tiny ONNX models, CompileJob specs, a stand-in registry."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from tensorkiln_compiler import benchmark
from tensorkiln_compiler.candidates import Runner


class FakeClock:
    """The benchmark's perf_counter, advanced only by Sleepers: the timings are exactly what a test says
    whatever the machine's load (on a loaded CI machine a real 1 ms sleep once outlasted a 4 ms one)."""

    def __init__(self, monkeypatch):
        self.now = 0.0
        monkeypatch.setattr(benchmark.time, "perf_counter", lambda: self.now)


class Sleeper(Runner):
    """Takes `seconds` of the clock per call, 0-8% more by the call's number so that repeated
    measurements of one runner differ a little, as real ones do; raises on call `fail_on_call`."""

    def __init__(self, clock: FakeClock, seconds: float, fail_on_call: int | None = None):
        self.clock, self.seconds, self.fail_on_call, self.calls = clock, seconds, fail_on_call, 0

    def run(self, feeds):
        self.calls += 1
        if self.calls == self.fail_on_call:
            raise RuntimeError("device lost")
        self.clock.now += self.seconds * (1 + 0.02 * (self.calls % 5))
        return []


def conv_classifier(path: Path, *, opset: int = 13, batch: str | int = "N", seed: int = 0) -> Path:
    """x[N,3,8,8] -> Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm -> Softmax -> scores[N,5]."""
    rng = np.random.default_rng(seed)
    init = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
        numpy_helper.from_array(rng.standard_normal((4, 5)).astype(np.float32), "fc"),
        numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "fc_b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fc_b"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["scores"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [batch, 5])],
        init,
    )
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), path)


def stateful_model(path: Path, *, seed: int = 0, rate_shape: tuple[int, ...] = ()) -> Path:
    """A streaming model whose batch is not on axis 0 everywhere, and a scalar input:
    chunk[batch,16], state[2,batch,8], sr (rank 0, int64) -> out[batch,8], stateN[2,batch,8].
    rate_shape (1,): sr is [1] instead, as Triton's native backends can feed it in a model Triton does not batch.

    new0 = tanh((chunk @ w_in + state[0] @ w_rec) * sr / 8); new1 = tanh(new0 @ w_mix + state[1]);
    out = new1 @ w_out; stateN = [new0, new1]."""
    rng = np.random.default_rng(seed)
    weights = {"w_in": (16, 8), "w_rec": (8, 8), "w_mix": (8, 8), "w_out": (8, 8)}
    init = [numpy_helper.from_array((rng.standard_normal(s) / 4).astype(np.float32), n) for n, s in weights.items()]
    init += [
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array(1, np.int64), "one"),
        numpy_helper.from_array(np.array([0], np.int64), "axis0"),
        numpy_helper.from_array(np.array(8.0, np.float32), "sr_unit"),
    ]
    nodes = [
        helper.make_node("Gather", ["state", "zero"], ["state0"], axis=0),
        helper.make_node("Gather", ["state", "one"], ["state1"], axis=0),
        helper.make_node("Cast", ["sr"], ["sr_f"], to=TensorProto.FLOAT),
        helper.make_node("Div", ["sr_f", "sr_unit"], ["scale"]),
        helper.make_node("MatMul", ["chunk", "w_in"], ["h"]),
        helper.make_node("MatMul", ["state0", "w_rec"], ["r"]),
        helper.make_node("Add", ["h", "r"], ["a"]),
        helper.make_node("Mul", ["a", "scale"], ["a_scaled"]),
        helper.make_node("Tanh", ["a_scaled"], ["new0"]),
        helper.make_node("MatMul", ["new0", "w_mix"], ["m"]),
        helper.make_node("Add", ["m", "state1"], ["b"]),
        helper.make_node("Tanh", ["b"], ["new1"]),
        helper.make_node("MatMul", ["new1", "w_out"], ["out"]),
        helper.make_node("Unsqueeze", ["new0", "axis0"], ["new0_u"]),
        helper.make_node("Unsqueeze", ["new1", "axis0"], ["new1_u"]),
        helper.make_node("Concat", ["new0_u", "new1_u"], ["stateN"], axis=0),
    ]
    graph = helper.make_graph(
        nodes,
        "stateful",
        [
            helper.make_tensor_value_info("chunk", TensorProto.FLOAT, ["batch", 16]),
            helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, "batch", 8]),
            helper.make_tensor_value_info("sr", TensorProto.INT64, list(rate_shape)),
        ],
        [
            helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 8]),
            helper.make_tensor_value_info("stateN", TensorProto.FLOAT, [2, "batch", 8]),
        ],
        init,
    )
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def single_op_model(path: Path, op_type: str, *, domain: str = "", opset: int = 13) -> Path:
    """x[N,4] -> OP -> y[N,4]: for unsupported operators and opsets."""
    graph = helper.make_graph(
        [helper.make_node(op_type, ["x"], ["y"], domain=domain)],
        "one-op",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
    )
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 8
    return _save(model, path)


def zipmap_classifier(path: Path) -> Path:
    """skl2onnx's default classifier head: label[N] and a ZipMap output_probability (a sequence of maps)."""
    probabilities = helper.make_sequence_type_proto(
        helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, []))
    )
    graph = helper.make_graph(
        [
            helper.make_node("ArgMax", ["x"], ["label"], axis=1, keepdims=0),
            helper.make_node("ZipMap", ["x"], ["output_probability"], domain="ai.onnx.ml", classlabels_int64s=[0, 1]),
        ],
        "zipmap",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])],
        [
            helper.make_tensor_value_info("label", TensorProto.INT64, ["N"]),
            helper.make_value_info("output_probability", probabilities),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9), helper.make_opsetid("ai.onnx.ml", 1)])
    model.ir_version = 4
    return _save(model, path)


def compile_spec(model: Path, registry: Path, **overrides) -> dict:
    """A CompileJobSpec body (camelCase) for a CPU class; overrides replace top-level fields."""
    spec = {
        "modelName": "tiny",
        "source": {"uri": f"file://{model}"},
        "hardware": {"className": "cpu-test", "kind": "CPU", "nodeSelector": {}},
        "compilers": ["OnnxRuntime"],
        "precisions": ["FP32"],
        "shapes": {"batch": {"min": 1, "opt": 2, "max": 4}},
        "objective": {"metric": "LatencyP95", "batchSize": 2},
        "registry": {"uri": f"file://{registry}"},
        "optionsHash": "0123456789abcdef",
    }
    return {**spec, **overrides}


class StandInRegistry:
    """The registry interface the compiler uses (lookup/publish/engine_uri) over a directory: unit tests pin
    the compiler's side of the contract without depending on tensorkiln_api.registry's storage layout."""

    def __init__(self, root: Path):
        self.root = root

    def open(self, uri: str) -> StandInRegistry:
        return self

    def lookup(self, key) -> str | None:
        path = self.root / "keys" / key.id()
        return path.read_text() if path.exists() else None

    def publish(self, manifest, files_dir: Path) -> str:
        digest = manifest.digest()
        shutil.copytree(files_dir, self.root / "engines" / digest)
        (self.root / "engines" / digest / "manifest.json").write_text(json.dumps(manifest.to_json_dict()))
        (self.root / "keys").mkdir(exist_ok=True)
        (self.root / "keys" / manifest.key.id()).write_text(digest)
        return digest

    def engine_uri(self, digest: str) -> str:
        return f"file://{self.root}/engines/{digest}"

    def engines(self) -> list[str]:
        return sorted(p.name for p in (self.root / "engines").iterdir()) if (self.root / "engines").exists() else []

    def manifest(self, digest: str) -> dict:
        return json.loads((self.root / "engines" / digest / "manifest.json").read_text())


def serve_registry(root: Path, monkeypatch) -> StandInRegistry:
    """Make tensorkiln_api.registry.open_registry (what the compiler calls) return a stand-in over `root`."""
    stand_in = StandInRegistry(root)
    monkeypatch.setattr("tensorkiln_api.registry.open_registry", stand_in.open, raising=False)
    return stand_in


def _save(model: onnx.ModelProto, path: Path) -> Path:
    """Saved with the oldest IR version its opsets allow, not this onnx's newest: the compiler images built for
    older Triton releases (onnxruntime 1.19.2 reads IR versions up to 10) load it, as they load users' models."""
    try:
        model.ir_version = min(model.ir_version, helper.find_min_ir_version_for(list(model.opset_import)))
    except ValueError:  # an opset no onnx release knows (a model made to be refused): left as it is
        pass
    onnx.save(model, str(path))
    return path


def picking_model(path: Path) -> Path:
    """x[N,4] float and k[N,1] int64 -> y[N,1] = x[n, k[n]] (GatherElements): k must lie in 0..3, as a
    model's index, rate or size input accepts only some values; onnxruntime refuses any other."""
    node = helper.make_node("GatherElements", ["x", "k"], ["y"], axis=1)
    graph = helper.make_graph(
        [node],
        "picking",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4]),
            helper.make_tensor_value_info("k", TensorProto.INT64, ["N", 1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return _save(model, path)


def ml_only_model(path: Path) -> Path:
    """x[N,4] -> ai.onnx.ml LinearRegressor -> y[N,1], importing ai.onnx.ml only (no default-domain opset)."""
    node = helper.make_node(
        "LinearRegressor", ["x"], ["y"], domain="ai.onnx.ml", coefficients=[0.5, -1.0, 2.0, 0.25], intercepts=[0.1]
    )
    graph = helper.make_graph(
        [node],
        "ml-only",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("ai.onnx.ml", 1)])
    model.ir_version = 8
    return _save(model, path)


def tokenizer_model(path: Path) -> Path:
    """text[N] (STRING) -> ai.onnx.contrib::SentencepieceTokenizer inside an If branch -> ids[N]: a custom
    operator (onnxruntime-extensions) that onnx.checker accepts and plain onnxruntime cannot load."""
    branch = helper.make_graph(
        [helper.make_node("SentencepieceTokenizer", ["text"], ["tokens"], domain="ai.onnx.contrib")],
        "branch",
        [],
        [helper.make_tensor_value_info("tokens", TensorProto.INT64, ["N"])],
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["always"], ["ids"], then_branch=branch, else_branch=branch)],
        "tokenizer",
        [helper.make_tensor_value_info("text", TensorProto.STRING, ["N"])],
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N"])],
        [numpy_helper.from_array(np.array(True), "always")],
    )
    imports = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.contrib", 1)]
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 8
    return _save(model, path)


def nms_model(path: Path) -> Path:
    """boxes[N,8,4], scores[N,1,8] -> NonMaxSuppression -> selected_indices[detections, 3]: one row per kept
    box (image, class, box), so axis 0 is the detections, not the batch, though the graph cannot say so."""
    graph = helper.make_graph(
        [helper.make_node("NonMaxSuppression", ["boxes", "scores", "keep"], ["selected_indices"])],
        "nms",
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["N", 8, 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", 1, 8]),
        ],
        [helper.make_tensor_value_info("selected_indices", TensorProto.INT64, ["detections", 3])],
        [numpy_helper.from_array(np.array([100], np.int64), "keep")],
    )
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def batch_sum_model(path: Path) -> Path:
    """x[N,4] -> ReduceSum over the batch (keepdims) -> total[1,4]: axis 0 is 1 whatever the batch."""
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["x", "axes"], ["total"], keepdims=1)],
        "batch-sum",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("total", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(np.array([0], np.int64), "axes")],
    )
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def text_encoder(
    path: Path,
    *,
    vocab: int = 50,
    hidden: int = 4,
    token_types: bool = False,
    int8_table: bool = False,
    garbage_padding: bool = False,
    mask_name: str = "attention_mask",
    pooled: bool = True,
) -> Path:
    """A transformer-text-encoder-shaped graph: input_ids[batch, seq], attention_mask[batch, seq] (INT64)
    [, token_type_ids[batch, seq]] -> last_hidden_state[batch, seq, hidden] = tanh(word[ids] (+ type[types]))
    [, pooled[batch, hidden]: its mean over the tokens]. Without `mask_name`, no mask input (nor pooled).

    int8_table: the word table dequantised in the graph (Cast of int8, Mul by a scale), as int8 exports do,
    so its rows are known from shape inference only. garbage_padding: a stand-in for a low-precision
    engine, the same on tokens and 1000 + 100 * ids where the mask is 0."""
    rng = np.random.default_rng(0)
    init = [
        numpy_helper.from_array(np.array([2], np.int64), "axis2"),
        numpy_helper.from_array(np.array([1], np.int64), "axis1"),
    ]
    nodes = []
    if int8_table:
        init += [
            numpy_helper.from_array(rng.integers(-127, 128, (vocab, hidden)).astype(np.int8), "word_q"),
            numpy_helper.from_array(np.full((vocab, 1), 1 / 127, np.float32), "word_scale"),
        ]
        nodes += [
            helper.make_node("Cast", ["word_q"], ["word_f"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["word_f", "word_scale"], ["word"]),
        ]
    else:
        init.append(numpy_helper.from_array(rng.standard_normal((vocab, hidden)).astype(np.float32), "word"))
    nodes.append(helper.make_node("Gather", ["word", "input_ids"], ["embedded"], axis=0))
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])]
    if token_types:
        init.append(numpy_helper.from_array(rng.standard_normal((2, hidden)).astype(np.float32), "types"))
        nodes += [
            helper.make_node("Gather", ["types", "token_type_ids"], ["typed"], axis=0),
            helper.make_node("Add", ["embedded", "typed"], ["summed"]),
            helper.make_node("Tanh", ["summed"], ["states"]),
        ]
        inputs.append(helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, ["batch", "seq"]))
    else:
        nodes.append(helper.make_node("Tanh", ["embedded"], ["states"]))
    outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "seq", hidden])]
    if not mask_name:
        nodes.append(helper.make_node("Identity", ["states"], ["last_hidden_state"]))
        graph = helper.make_graph(nodes, "text-encoder", inputs, outputs, init)
        return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    inputs.insert(1, helper.make_tensor_value_info(mask_name, TensorProto.INT64, ["batch", "seq"]))
    if pooled:
        nodes += [
            helper.make_node("Cast", [mask_name], ["mask_f"], to=TensorProto.FLOAT),
            helper.make_node("Unsqueeze", ["mask_f", "axis2"], ["mask_3d"]),
            helper.make_node("Mul", ["states", "mask_3d"], ["masked"]),
            helper.make_node("ReduceSum", ["masked", "axis1"], ["total"], keepdims=0),
            helper.make_node("ReduceSum", ["mask_3d", "axis1"], ["count"], keepdims=0),
            helper.make_node("Div", ["total", "count"], ["pooled"]),
        ]
        outputs.append(helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", hidden]))
    if garbage_padding:  # where(mask, states, 1000 + 100 * ids)
        init += [
            numpy_helper.from_array(np.array(100.0, np.float32), "hundred"),
            numpy_helper.from_array(np.array(1000.0, np.float32), "thousand"),
        ]
        nodes += [
            helper.make_node("Cast", [mask_name], ["mask_b"], to=TensorProto.BOOL),
            helper.make_node("Unsqueeze", ["mask_b", "axis2"], ["mask_b3"]),
            helper.make_node("Cast", ["input_ids"], ["ids_f"], to=TensorProto.FLOAT),
            helper.make_node("Unsqueeze", ["ids_f", "axis2"], ["ids_3d"]),
            helper.make_node("Mul", ["ids_3d", "hundred"], ["ids_scaled"]),
            helper.make_node("Add", ["ids_scaled", "thousand"], ["junk_1"]),
            helper.make_node("Add", ["junk_1", "states"], ["junk"]),  # broadcast to [batch, seq, hidden]
            helper.make_node("Where", ["mask_b3", "states", "junk"], ["last_hidden_state"]),
        ]
    else:
        nodes.append(helper.make_node("Identity", ["states"], ["last_hidden_state"]))
    graph = helper.make_graph(nodes, "text-encoder", inputs, outputs, init)
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
