"""A model that accepts only some values of an input, compiled without a dataset on local-0: the compile
fails naming the input, how it was synthesised and the field to set; with that field set, the same
model compiles, and the CompileJob says how each input was synthesised."""

import hashlib
import uuid

import pytest
from kubernetes import client
from tensorkiln_api import GROUP, VERSION
from tensorkiln_local import install
from tensorkiln_local.cluster import paths
from unit.compiler_support import picking_model

from .helpers import wait_for
from .test_compile_on_cluster import compile_job, finished
from .workloads import condition, model_object

pytestmark = pytest.mark.cluster
NAME = "picking"


@pytest.fixture
def staged_model():
    """The picking model (k must lie in 0..3) in the local model store, under a name of this test's own."""
    directory = paths.SAMPLE_MODELS / "tests"
    directory.mkdir(parents=True, exist_ok=True)
    path = picking_model(directory / f"picking-{uuid.uuid4().hex[:8]}.onnx")
    path.chmod(0o644)  # the model store reads as uid 1000
    yield f"{install.MODEL_STORE_URL}/tests/{path.name}", hashlib.sha256(path.read_bytes()).hexdigest()
    path.unlink()


def body(namespace: str, uri: str, sha256: str) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceModel",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": {
            "source": {"uri": uri, "sha256": sha256},
            "shapes": {"batch": {"min": 1, "opt": 2, "max": 4}},
            "hardware": {"mode": "Auto", "includeCPU": True, "exclude": ["*"]},
            "serving": {"maxBatchSize": 4},
            "compile": {"precisions": ["FP32"], "compilers": {"cpu": ["OnnxRuntime"]}},
        },
    }


def test_a_refused_synthetic_input_is_named_with_the_field_and_compiles_once_given(
    api, operator, namespace, staged_model
):
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", body(namespace, *staged_model))
    failed = wait_for(lambda: finished(api, namespace, NAME), timeout=300, interval=2, what="the compile to finish")
    status = failed["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "SyntheticInputRefused"), status
    assert status["message"].startswith("spec.compile.syntheticInputs: the model refused the inputs")
    assert "k (int64 [None, 1]): integers 0 to 15" in status["message"]
    assert "Out of range value in index tensor" in status["message"] and "\x1b" not in status["message"]
    compiled = wait_for(
        lambda: (c := condition(model_object(api, namespace, NAME), "Compiled")).get("reason") == "CompileFailed" and c,
        what="the InferenceModel's Compiled condition",
    )
    assert "SyntheticInputRefused" in compiled["message"] and "spec.compile.syntheticInputs" in compiled["message"]

    patch = {"spec": {"compile": {"syntheticInputs": {"k": {"min": 0, "max": 3}}}}}
    custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", NAME, patch)

    def succeeded():
        cj = compile_job(api, namespace, NAME)
        return cj if cj.get("status", {}).get("phase") == "Succeeded" else None

    done = wait_for(succeeded, timeout=300, interval=2, what="the compile with spec.compile.syntheticInputs")
    assert done["spec"]["syntheticInputs"] == {"k": {"min": 0.0, "max": 3.0}}
    assert done["status"]["selection"]["syntheticInputs"] == {
        "x": "standard normal",
        "k": "integers 0 to 3 (spec.compile.syntheticInputs.k)",
    }
