"""tensorkiln-engine-fetch (the Triton pod's init container) and the python-backend runner of the simulation it
installs."""

import hashlib
import importlib.util
import json
import sys
import types

import numpy as np
import pytest
from google.protobuf import text_format
from registry_fixtures import flip_byte, make_engine
from tensorkiln_api.registry import open_registry
from tensorkiln_api.registry.base import artifact_key
from tensorkiln_api.registry.manifest import Candidate, Selection, TensorInfo
from tensorkiln_serving import enginefetch
from tritonclient.grpc import model_config_pb2

OPENVINO_FILES = {"model.xml": b"<net/>" * 100, "model.bin": bytes(range(256)) * 16}
OPENVINO_SETTINGS = {
    "device": "CPU",
    "config": {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": "2", "INFERENCE_PRECISION_HINT": "f32"},
    "inferencePrecision": "f32",
}
# The SimulatedServiceTime SIMULATION: the one engine the python-backend runner serves.
SIMULATION_FILES = {"simulation.json": b'{"serviceMilliseconds": 2}'}
SIMULATION_SETTINGS = {"serviceMilliseconds": 2}
PROFILES = {
    "batch": {"min": 1, "opt": 2, "max": 4},
    "inputs": {"x": {"min": [1, 3, 8, 8], "opt": [2, 3, 8, 8], "max": [4, 3, 8, 8]}},
}
CONFIG = """
name: "tiny"
backend: "python"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ 3, 8, 8 ] } ]
output [ { name: "scores" data_type: TYPE_FP32 dims: [ 5 ] } ]
dynamic_batching { preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 2000 }
instance_group [ { kind: KIND_CPU count: 1 } ]
"""


def publish(tmp_path, compiler: str, files: dict[str, bytes], settings: dict, **fields) -> str:
    """A CPU engine of the tiny classifier (x[N,3,8,8] -> scores[N,5]) in a filesystem registry;
    `fields` replace the manifest's own (another model's tensors and profiles)."""
    engine = make_engine(tmp_path / "built", files, hardware_class="cpu-test")
    winner = Candidate(id=f"{compiler.lower()}-fp32", compiler=compiler, precision="FP32", status="Selected",
                       settings=settings)  # fmt: skip
    baseline = Candidate(id="baseline", compiler="OnnxRuntime", precision="FP32", baseline=True, status="Passed")
    manifest = engine.manifest.model_copy(
        update={
            "model_name": "tiny",
            "hardware_kind": "CPU",
            "compiler": compiler,
            "precision": "FP32",
            "inputs": [TensorInfo(name="x", data_type="FP32", dims=[-1, 3, 8, 8])],
            "outputs": [TensorInfo(name="scores", data_type="FP32", dims=[-1, 5])],
            "profiles": PROFILES,
            "candidates": [baseline, winner],
            "selection": Selection(objective={"metric": "LatencyP95"}, winner=winner.id, reason="fastest"),
            **fields,
        }
    )
    return open_registry(f"file://{tmp_path}/registry").publish(manifest, engine.files_dir)


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "etc" / "config.pbtxt"
    path.parent.mkdir()
    path.write_text(CONFIG)
    text_format.Parse(CONFIG, model_config_pb2.ModelConfig())  # the field names are Triton's
    return path


@pytest.fixture
def fetch(tmp_path, config):
    """Run the init container's command; returns (exit code, termination message)."""

    def run(digest: str, *extra: str) -> tuple[int, dict]:
        log = tmp_path / "termination-log"
        code = enginefetch.main(
            ["--registry", f"file://{tmp_path}/registry", "--digest", digest, "--model-name", "tiny",
             "--config", str(config), "--repository", str(tmp_path / "models"), "--termination-log", str(log), *extra]
        )  # fmt: skip
        return code, json.loads(log.read_text())

    return run


def tree(root) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_lays_out_a_triton_model_repository(tmp_path, fetch, config):
    digest = publish(tmp_path, "OpenVINO", OPENVINO_FILES, OPENVINO_SETTINGS)

    code, message = fetch(digest)

    assert code == 0, message
    assert tree(tmp_path / "models") == {
        "tiny/config.pbtxt": config.read_bytes(),
        "tiny/1/model.xml": OPENVINO_FILES["model.xml"],
        "tiny/1/model.bin": OPENVINO_FILES["model.bin"],
    }
    assert message == {
        "model": "tiny",
        "engine": {"digest": digest, "compiler": "OpenVINO", "precision": "FP32"},
        "files": ["tiny/1/model.bin", "tiny/1/model.xml", "tiny/config.pbtxt"],
    }


def test_python_backend_adds_the_runner_and_engine_json(tmp_path, fetch):
    digest = publish(tmp_path, "SimulatedServiceTime", SIMULATION_FILES, SIMULATION_SETTINGS)

    code, message = fetch(digest, "--python-backend")

    assert code == 0, message
    version_dir = tmp_path / "models" / "tiny" / "1"
    assert (version_dir / "model.py").read_bytes() == enginefetch.RUNNER.read_bytes()
    assert json.loads((version_dir / "engine.json").read_text()) == {
        "digest": digest,
        "modelName": "tiny",
        "compiler": "SimulatedServiceTime",
        "precision": "FP32",
        "candidate": "simulatedservicetime-fp32",
        "settings": SIMULATION_SETTINGS,
        "inputs": [{"name": "x", "dataType": "FP32", "dims": [-1, 3, 8, 8]}],
        "outputs": [{"name": "scores", "dataType": "FP32", "dims": [-1, 5]}],
        "maxBatchSize": 4,
        "profiles": PROFILES,
    }


def test_running_again_replaces_the_model_and_clears_what_a_killed_run_left(tmp_path, fetch):
    digest = publish(tmp_path, "OpenVINO", OPENVINO_FILES, OPENVINO_SETTINGS)
    assert fetch(digest)[0] == 0
    models = tmp_path / "models"
    (models / ".tiny.abc123.partial" / "1").mkdir(parents=True)  # as a run killed midway leaves it
    (models / "tiny" / "1" / "stale.txt").write_text("from an older engine")
    (models / "other" / "1").mkdir(parents=True)

    code, message = fetch(digest, "--python-backend")

    assert code == 0, message
    assert sorted(p.name for p in models.iterdir()) == ["other", "tiny"]
    assert sorted(tree(models / "tiny")) == [
        "1/engine.json", "1/model.bin", "1/model.py", "1/model.xml", "config.pbtxt",
    ]  # fmt: skip


def test_a_tampered_artifact_exits_1_naming_the_file_and_leaves_nothing(tmp_path, fetch):
    digest = publish(tmp_path, "OpenVINO", OPENVINO_FILES, OPENVINO_SETTINGS)
    stored = tmp_path / "registry" / artifact_key(digest, "model.bin")
    tampered = flip_byte(OPENVINO_FILES["model.bin"])
    stored.write_bytes(tampered)

    code, message = fetch(digest, "--python-backend")

    assert code == 1
    assert message["error"]["reason"] == "ArtifactIntegrityError"
    for detail in (
        f"engines/{digest}/files/model.bin",
        hashlib.sha256(OPENVINO_FILES["model.bin"]).hexdigest(),
        hashlib.sha256(tampered).hexdigest(),
    ):
        assert detail in message["error"]["message"]
    assert list((tmp_path / "models").iterdir()) == []


def test_an_unknown_digest_exits_1(tmp_path, fetch):
    code, message = fetch("0" * 64)
    assert code == 1
    assert message["error"]["reason"] == "EngineNotFound"
    assert list((tmp_path / "models").iterdir()) == []


# -- the python-backend runner of the simulation, with a stand-in for Triton's triton_python_backend_utils ---------


class Tensor:
    def __init__(self, name, array):
        self.name, self.array = name, array

    def as_numpy(self):
        return self.array


class Response:
    def __init__(self, output_tensors=(), error=None):
        self.outputs = {t.name: t.array for t in output_tensors}
        self.error = error


@pytest.fixture
def runner(monkeypatch):
    """python_backend/model.py as Triton's stub imports it."""
    utils = types.SimpleNamespace(
        Tensor=Tensor, InferenceResponse=Response, TritonError=str,
        get_input_tensor_by_name=lambda request, name: request[name],
        triton_string_to_numpy=lambda t: {"TYPE_FP32": np.float32, "TYPE_INT64": np.int64}[t],
    )  # fmt: skip
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", utils)
    spec = importlib.util.spec_from_file_location("tensorkiln_runner", enginefetch.RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load(runner, tmp_path, **config):
    model = runner.TritonPythonModel()
    model_config = {"max_batch_size": 4, **config}
    model.initialize(
        {
            "model_config": json.dumps(model_config),
            "model_repository": str(tmp_path / "models" / "tiny"),
            "model_version": "1",
        }
    )
    return model


def counting_sleeps(runner, monkeypatch) -> list[float]:
    slept = []
    monkeypatch.setattr(runner.time, "sleep", slept.append)
    return slept


def test_the_simulation_sleeps_once_per_dynamic_batch_and_answers_zeros_of_each_request_s_size(
    tmp_path, fetch, runner, monkeypatch
):
    digest = publish(tmp_path, "SimulatedServiceTime", SIMULATION_FILES, SIMULATION_SETTINGS)
    assert fetch(digest, "--python-backend")[0] == 0
    model = load(runner, tmp_path, parameters={"engine": {"string_value": digest}})
    slept = counting_sleeps(runner, monkeypatch)
    batches = [np.ones((n, 3, 8, 8), np.float32) for n in (1, 3)]

    responses = model.execute([{"x": Tensor("x", batch)} for batch in batches])

    assert slept == [0.002]  # one execution for the batch Triton formed, whatever its size
    assert [r.outputs["scores"].shape for r in responses] == [(1, 5), (3, 5)]
    assert all(not r.outputs["scores"].any() and r.error is None for r in responses)


def test_the_simulation_unbatched_takes_each_request_alone_at_full_shapes(tmp_path, fetch, runner, monkeypatch):
    digest = publish(
        tmp_path, "SimulatedServiceTime", SIMULATION_FILES, SIMULATION_SETTINGS,
        inputs=[TensorInfo(name="chunk", data_type="FP32", dims=[1, 16])],
        outputs=[TensorInfo(name="out", data_type="FP32", dims=[1, 8])],
        profiles={"batched": False, "dynamicDims": [], "inputs": {}},
    )  # fmt: skip
    assert fetch(digest, "--python-backend")[0] == 0
    engine_json = json.loads((tmp_path / "models" / "tiny" / "1" / "engine.json").read_text())
    assert engine_json["maxBatchSize"] is None  # no batch axis, so no batch limit
    model = load(runner, tmp_path, max_batch_size=0)
    slept = counting_sleeps(runner, monkeypatch)

    responses = model.execute([{"chunk": Tensor("chunk", np.ones((1, 16), np.float32))} for _ in range(2)])

    assert len(slept) == 2 and [r.outputs["out"].shape for r in responses] == [(1, 8), (1, 8)]
    with pytest.raises(ValueError, match=r"takes full shapes \(compiled unbatched\): max_batch_size must be 0"):
        load(runner, tmp_path, max_batch_size=4)


@pytest.mark.parametrize(
    ("compiler", "model_config", "refusal"),
    [
        ("OpenVINO", {}, "serves only the SimulatedServiceTime simulation. Triton's native backends serve OpenVINO"),
        ("TensorRT", {}, "Triton's native backends serve TensorRT engines"),
        ("SimulatedServiceTime", {"parameters": {"engine": {"string_value": "f" * 64}}},
         f"config.pbtxt is for engine {'f' * 64}"),
        ("SimulatedServiceTime", {"max_batch_size": 8}, "max_batch_size 8 exceeds the engine's profile maximum batch of 4"),
    ],
)  # fmt: skip
def test_runner_refuses_what_it_cannot_serve_as_configured(tmp_path, fetch, runner, compiler, model_config, refusal):
    files = {"model.plan": b"plan", **OPENVINO_FILES, **SIMULATION_FILES}
    assert fetch(publish(tmp_path, compiler, files, SIMULATION_SETTINGS), "--python-backend")[0] == 0
    with pytest.raises(ValueError) as refused:
        load(runner, tmp_path, **model_config)
    assert refusal in str(refused.value)


def test_default_termination_log_is_written_only_where_the_kubelet_made_it(tmp_path, config, monkeypatch, capsys):
    digest = publish(tmp_path, "OpenVINO", OPENVINO_FILES, OPENVINO_SETTINGS)
    log = tmp_path / "dev" / "termination-log"
    monkeypatch.setattr(enginefetch, "TERMINATION_LOG", log)
    args = ["--registry", f"file://{tmp_path}/registry", "--digest", digest, "--model-name", "tiny",
            "--config", str(config), "--repository", str(tmp_path / "models")]  # fmt: skip

    assert enginefetch.main(args) == 0
    assert not log.parent.exists()  # a host's /dev is left alone
    assert json.loads(capsys.readouterr().out)["engine"]["digest"] == digest

    log.parent.mkdir()
    log.touch()
    assert enginefetch.main(args) == 0
    assert json.loads(log.read_text())["engine"]["digest"] == digest
