"""Real Triton serving real engines: the Triton pod's two containers, run by hand on a loopback address.

The OCR classifier from the rapidocr wheel is compiled here (tensorkiln-compile's main) into an OpenVINO
and an onnxruntime engine; the operator's renderer (builders.tritonconfig, the one every cluster gets)
writes their config.pbtxt for Triton's native backends; tensorkiln-engine-fetch lays them out as the init
container does; the nvidia-pytriton wheel's tritonserver with the serving image's native onnxruntime and
openvino backends (the serving image's server, as a process of this machine:
tensorkiln_local.triton_process) serves them with the triton container's arguments. No cluster needed:
the same engines on the real node are test_serving_local's.
"""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from PIL import Image
from tensorkiln.builders.tritonconfig import config_dict, render
from tensorkiln.controllers.inferencemodel import normalised_spec
from tensorkiln_api.registry import open_registry
from tensorkiln_client import cli
from tensorkiln_client.request import ServedTensor, image_array
from tensorkiln_client.triton import infer, settled_counters
from tensorkiln_compiler import pipeline
from tensorkiln_compiler.cli import SPEC_ENV, main
from tensorkiln_compiler.selection import select as by_measurement
from tensorkiln_local import triton_process
from tensorkiln_local.cluster.ocr_models import CLS
from tritonclient.grpc import InferenceServerClient

pytestmark = pytest.mark.serving

BIN = Path(sys.executable).parent
TRITON_ARGS = [
    "--model-repository=/models", "--model-control-mode=none", "--strict-readiness=true", "--allow-metrics=true",
    "--metrics-config=summary_latencies=true", "--http-port=8000", "--grpc-port=8001", "--metrics-port=8002",
]  # fmt: skip
OUTPUT = "save_infer_model/scale_0.tmp_1"  # the classifier's only output: [N, 2] probabilities
ENGINES = {"cls-openvino": "OpenVINO", "cls-onnxruntime": "OnnxRuntime"}  # Triton model -> compiler
BACKENDS = {"cls-openvino": "openvino", "cls-onnxruntime": "onnxruntime_onnx"}  # what serves each natively
FAST_BENCHMARK = ["--warmup", "1", "--runs", "3"]
CONCURRENT_CLIENTS, CONCURRENT_REQUESTS, SEQUENTIAL_REQUESTS = 16, 208, 100


def model_config(name: str, registry: str, digest: str) -> str:
    """The config.pbtxt the operator renders for the engine, on any cluster, for a spec with batches up to 32 and
    the dynamic batcher set as the assertions expect it (the instance count is the compile's choice)."""
    manifest = open_registry(registry).manifest(digest)
    batcher = {"enabled": True, "preferredBatchSizes": [8, 16], "maxQueueDelayMicroseconds": 2000}
    spec = {"source": {"uri": f"file://{CLS.path}"}, "shapes": CLS.shapes(batch_max=32),
            "serving": {"dynamicBatching": batcher}}  # fmt: skip
    return render(config_dict(name, manifest, normalised_spec({"spec": spec})["serving"]))


def compile_engine(root: Path, compiler: str) -> str:
    """tensorkiln-compile, FP32 with batches up to 32, publishing `compiler`'s engine; returns its digest.

    Selection is by measured latency, and on a small model the onnxruntime baseline can beat
    OpenVINO: the winner is overridden so that each test serves the engine kind it names.
    """
    spec = {
        "modelName": "ocr-cls",
        "source": {"uri": f"file://{CLS.path}"},
        "hardware": {"className": "cpu-local", "kind": "CPU", "nodeSelector": {}},
        "compilers": [compiler],
        "precisions": ["FP32"],
        "shapes": CLS.shapes(batch_max=32),
        "objective": {"metric": "LatencyP95", "batchSize": CLS.batch_size},
        "registry": {"uri": f"file://{root}/registry"},
        "optionsHash": f"serving-{compiler.lower()}",
    }
    wanted = f"{compiler.lower()}-fp32"

    def select(candidates, objective):
        measured = by_measurement(candidates, objective)
        return measured.model_copy(update={"winner": wanted, "reason": f"{measured.reason}; test serves {wanted}"})

    log = root / f"compile-{compiler}.json"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(SPEC_ENV, json.dumps(spec))
        patch.setattr(pipeline, "select", select)
        code = main(["--termination-log", str(log), "--work-dir", str(root / f"work-{compiler}"), *FAST_BENCHMARK])
    message = json.loads(log.read_text())
    assert code == 0 and message["selected"] == wanted, message
    return message["engine"]["digest"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """Compile, fetch and serve both engines; yields (pod IP, {model: digest})."""
    root = tmp_path_factory.mktemp("triton")
    digests, registry = {}, f"file://{root}/registry"
    if triton_process.native_backends() is None:
        pytest.fail("the serving image is not built, so its native backends are not here: make images")
    for model, compiler in ENGINES.items():
        digests[model] = compile_engine(root, compiler)
        config = root / "etc" / model / "config.pbtxt"
        config.parent.mkdir(parents=True)
        config.write_text(model_config(model, registry, digests[model]))
        subprocess.run(
            [BIN / "tensorkiln-engine-fetch", "--registry", registry, "--digest", digests[model],
             "--model-name", model, "--config", config, "--repository", root / "models"],
            check=True, capture_output=True,
        )  # fmt: skip

    ip = triton_process.free_loopback_address()
    args = [arg.replace("=/models", f"={root}/models") for arg in TRITON_ARGS]  # the pod's volume, here
    argv, env = triton_process.command(
        triton_process.local_tritonserver(root / "backends"),
        args,
        ip,
        {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"},
    )
    log_path = root / "tritonserver.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_ready(ip, process, log_path)
        yield ip, digests
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def wait_ready(ip: str, process: subprocess.Popen, log_path: Path) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"tritonserver exited with {process.returncode}:\n{log_path.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(f"http://{ip}:8000/v2/health/ready", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"tritonserver not ready after 90 s:\n{log_path.read_text()[-4000:]}")


def counters(ip: str, model: str) -> dict[str, float]:
    return settled_counters(ip, model)


@pytest.fixture(scope="module")
def samples():
    """Rendered text lines and what the original ONNX says about them on onnxruntime, FP32."""
    x = CLS.samples(16, seed=11)
    return x, ort.InferenceSession(str(CLS.path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("model", ENGINES)
def test_engine_answers_like_the_original_onnx(server, samples, model):
    ip, _ = server
    x, expected = samples
    config = InferenceServerClient(f"{ip}:8001").get_model_config(model).config
    assert (config.platform or config.backend) == BACKENDS[model]  # a native backend, as on any cluster
    assert config.max_batch_size == 32 and list(config.dynamic_batching.preferred_batch_size) == [8, 16]

    for rows in (slice(0, 1), slice(1, 6), slice(0, 16)):
        outputs = infer(f"{ip}:8001", model, {"x": x[rows]})
        assert list(outputs) == [OUTPUT]
        np.testing.assert_allclose(outputs[OUTPUT], expected[rows], atol=1e-4)


@pytest.mark.parametrize("model", ENGINES)
def test_dynamic_batcher_batches_concurrent_requests(server, samples, model):
    ip, _ = server
    address = f"{ip}:8001"
    x, expected = samples

    def one(i: int) -> None:  # every request sends its own line: a wrong split would show
        output = infer(address, model, {"x": x[i % 16 : i % 16 + 1]})[OUTPUT]
        np.testing.assert_allclose(output, expected[i % 16 : i % 16 + 1], atol=1e-4)

    started = time.perf_counter()
    for i in range(SEQUENTIAL_REQUESTS):
        one(i)
    sequential_rate = SEQUENTIAL_REQUESTS / (time.perf_counter() - started)

    before = counters(ip, model)
    started = time.perf_counter()
    with ThreadPoolExecutor(CONCURRENT_CLIENTS) as pool:
        list(pool.map(one, range(CONCURRENT_REQUESTS)))
    concurrent_rate = CONCURRENT_REQUESTS / (time.perf_counter() - started)
    after = counters(ip, model)

    inferences = after["nv_inference_count"] - before["nv_inference_count"]
    executions = after["nv_inference_exec_count"] - before["nv_inference_exec_count"]
    print(
        f"\n{model}: {sequential_rate:.0f} req/s at 1 client, {concurrent_rate:.0f} req/s at {CONCURRENT_CLIENTS} "
        f"clients; {inferences:.0f} inferences in {executions:.0f} executions (mean batch {inferences / executions:.1f})"
    )
    assert inferences == CONCURRENT_REQUESTS
    assert executions < inferences  # the dynamic batcher formed batches, and the backend ran each once
    assert after["nv_inference_request_success"] >= SEQUENTIAL_REQUESTS + CONCURRENT_REQUESTS
    assert after.get("nv_inference_request_failure", 0) == 0


def top_class(line: str) -> tuple[int, float]:
    """`  class 1: 0.9731` -> (1, 0.9731)."""
    index, score = line.strip().removeprefix("class ").split(": ")
    return int(index), float(score)


def test_tensorkiln_infer_answers_as_onnxruntime_and_names_a_wrong_input(server, samples, tmp_path, capsys):
    """`tensorkiln infer` with an image and with a .npy, against the real server, and a mistake."""
    ip, _ = server
    reference = ort.InferenceSession(str(CLS.path), providers=["CPUExecutionProvider"])
    line = (np.clip(CLS.samples(1, seed=3)[0].transpose(1, 2, 0) * 0.5 + 0.5, 0, 1) * 255).astype(np.uint8)
    Image.fromarray(line).save(tmp_path / "line.png")
    sent = image_array(tmp_path / "line.png", ServedTensor("x", "FP32", (-1, 3, CLS.height, CLS.width)))
    (expected,) = reference.run(None, {"x": sent})
    with pytest.raises(SystemExit) as done:
        cli.main(["infer", "cls-onnxruntime", "--address", f"{ip}:8001", "--input", str(tmp_path / "line.png")])
    assert done.value.code == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith(f"default/cls-onnxruntime at {ip}:8001: ") and printed[0].endswith("client side)")
    assert printed[1] == f"{OUTPUT}: shape [1, 2] float32"
    assert top_class(printed[2]) == (int(expected[0].argmax()), pytest.approx(expected[0].max(), abs=1e-3))

    x, probabilities = samples
    clearest = int(np.abs(probabilities[:, 0] - probabilities[:, 1]).argmax())  # no tie to flip
    np.save(tmp_path / "x.npy", x[clearest])  # no batch axis: one is added
    with pytest.raises(SystemExit):
        cli.main(["infer", "cls-openvino", "--address", f"{ip}:8001", "--input", str(tmp_path / "x.npy")])
    ranked = probabilities[clearest]
    assert top_class(capsys.readouterr().out.splitlines()[2]) == (
        int(ranked.argmax()),
        pytest.approx(ranked.max(), abs=1e-3),
    )

    np.save(tmp_path / "wrong.npy", x[0, :, :, :100])
    with pytest.raises(SystemExit) as refused:
        cli.main(["infer", "cls-openvino", "--address", f"{ip}:8001", "--input", str(tmp_path / "wrong.npy")])
    assert refused.value.code == (
        f"tensorkiln infer: input 'x': expected shape [-1, 3, {CLS.height}, {CLS.width}] of FP32 (float32), "
        f"got [1, 3, {CLS.height}, 100]"
    )
