"""Specs whose derived objects Kubernetes or Triton refuse (found by the fault suite's admission
fuzz, e2e/faults/test_fuzz_admission.py).

The API refuses them at admission (tests/refused_specs.py: pydantic here, the CRD's schema and CEL rules at the
API server, tests/integration/test_admission.py): a uint32 queue size, HPA stabilization windows,
maxSurge 0 beside the operator's maxUnavailable 0, tolerations a Pod refuses, extended resources
that are fractional, requested without a limit, or requested other than their limit.
Should a spec still reach a refusing object (an object stored under an older CRD, or a check the
API lacks), the refusal is the status, not a traceback per resync: Deployed=False reason
ServingRefused (phase Failed) for the serving objects, CompileJob Failed reason JobRefused for the
compile Job; nothing is retried until the spec changes.
"""

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from google.protobuf.json_format import ParseError
from kubernetes import client
from pydantic import ValidationError
from refused_specs import REFUSED
from registry_fixtures import make_engine
from tensorkiln.builders.serving import build_config_map
from tensorkiln.controllers import compilejob
from tensorkiln.controllers.inferencemodel import normalised_spec
from tensorkiln.controllers.plan import refusal
from tensorkiln.hardware.classes import HardwareClass
from tensorkiln.settings import Settings
from tensorkiln.status.inferencemodel import Rollup, inference_model_status
from tensorkiln.status.serving import Rollout
from tensorkiln_api import InferenceModelSpec, field_errors
from tensorkiln_api.registry.filesystem import FilesystemRegistry

TARGET = HardwareClass(name="cpu", kind="CPU", product="cpu", node_selector={}, nodes=("n1",))
MODEL = {
    "apiVersion": "tensorkiln.dev/v1alpha1",
    "kind": "InferenceModel",
    "metadata": {"name": "m", "namespace": "ns", "uid": "u", "generation": 1},
    "spec": {"source": {"uri": "https://models.example/m.onnx"}},
}


def unprocessable(message: str) -> client.ApiException:
    error = client.ApiException(status=422, reason="Unprocessable Entity")
    error.body = json.dumps({"kind": "Status", "message": message})
    return error


def test_a_spec_tritons_config_refuses_is_named(tmp_path):
    spec = normalised_spec(MODEL)
    # Beyond Triton's uint32: the API refuses it (GAPS), so only a check the API lacks gets this far.
    spec["serving"]["dynamicBatching"]["queuePolicy"]["maxQueueSize"] = 2**32
    with pytest.raises(ParseError) as raised:
        build_config_map(MODEL, spec, TARGET, make_engine(tmp_path).manifest)
    why = refusal(raised.value)
    assert why.startswith("Triton's model config refuses spec.serving") and "maxQueueSize" in why


def test_an_api_server_refusal_is_reported_with_its_message_and_other_errors_are_not():
    message = 'Deployment.apps "m-cpu" is invalid: spec.template.spec.containers[0].image: Invalid value: " x"'
    assert refusal(unprocessable(message)) == f"the API server refuses it: {message}"
    assert refusal(client.ApiException(status=500, reason="Internal Server Error")) is None
    assert refusal(RuntimeError("anything")) is None


def test_refused_serving_objects_are_a_deployed_condition_and_a_failed_phase():
    compiled = {"metadata": {"name": "m-cpu"}, "status": {"phase": "Succeeded", "engine": {"digest": "1" * 64}}}
    rollup = Rollup([TARGET], {"cpu": compiled}, refused={"cpu": "the API server refuses it: bad image"})
    status = inference_model_status(MODEL, rollup, lambda d: f"file:///r/{d}", datetime(2026, 11, 30, tzinfo=UTC))
    deployed = next(c for c in status["conditions"] if c["type"] == "Deployed")
    assert (deployed["status"], deployed["reason"]) == ("False", "ServingRefused")
    assert deployed["message"] == "cpu: the API server refuses it: bad image"
    assert status["phase"] == "Failed"


def test_refused_serving_on_one_target_leaves_the_other_serving_degraded():
    other = HardwareClass(name="gpu", kind="GPU", product="L4", node_selector={}, nodes=("n2",))
    ok = {"metadata": {"name": "m-gpu"}, "status": {"phase": "Succeeded", "engine": {"digest": "2" * 64}}}
    rollup = Rollup(
        [TARGET, other], {"cpu": ok, "gpu": ok}, {"gpu": Rollout("2" * 64, 1, 1, True)}, {"gpu": "2" * 64},
        refused={"cpu": "the API server refuses it: x"},
    )  # fmt: skip
    status = inference_model_status(MODEL, rollup, lambda d: d, datetime(2026, 11, 30, tzinfo=UTC))
    assert status["phase"] == "Degraded"


class RefusingState:
    """A cluster whose API server refuses the compile Job."""

    def __init__(self):
        self.applied, self.statuses = [], []

    def jobs(self, namespace, name):
        return []

    def newest_pod(self, namespace, job_name):
        return None

    def get(self, api_version, kind, namespace, name):
        return None  # no Deployment: the model's first compile

    def simulated_nodes(self):
        return set()

    def apply(self, obj):
        self.applied.append(obj)
        raise unprocessable(
            'Job.batch "m-cpu-0123abcd" is invalid: spec.template.spec.tolerations[0].key: Invalid value'
        )

    def apply_status(self, obj, status):
        self.statuses.append(status)


def test_a_refused_compile_job_fails_the_compile_job_once_and_for_all(tmp_path: Path):
    registry = FilesystemRegistry(tmp_path / "registry")
    registry.prepare()
    body = {
        "apiVersion": "tensorkiln.dev/v1alpha1",
        "kind": "CompileJob",
        "metadata": {"name": "m-cpu", "namespace": "ns", "uid": "cj", "generation": 1},
        "spec": {
            "modelName": "m",
            "source": {"uri": "https://models.example/m.onnx"},  # no sha256: no cache lookup
            "optionsHash": "0123abcd0123abcd",
            "hardware": {"className": "cpu", "kind": "CPU", "nodeSelector": {}},
            "registry": {"uri": registry.uri},
            "image": "compiler",
            "retries": 1,
            "deadlineSeconds": 600,
        },
    }
    state = RefusingState()
    _, status = compilejob.reconcile(state, body, registry, Settings(registry_uri=registry.uri))
    assert (status["phase"], status["reason"]) == ("Failed", "JobRefused")
    assert "tolerations[0].key" in status["message"]
    assert next(c for c in status["conditions"] if c["type"] == "Compiled")["reason"] == "JobRefused"
    body["status"] = status
    assert compilejob.reconcile(state, body, registry, Settings(registry_uri=registry.uri))[1] == status
    assert len(state.applied) == 1, "settled: not tried again until the spec changes"


@pytest.mark.parametrize(("spec", "field"), list(REFUSED.values()), ids=list(REFUSED))
def test_specs_kubernetes_or_triton_refuse_are_refused_at_admission_naming_the_field(spec, field):
    with pytest.raises(ValidationError) as refused:
        InferenceModelSpec.model_validate({"source": {"uri": "https://models.example/m.onnx"}, **spec})
    assert any(e.startswith(f"{field}:") for e in field_errors(refused.value)), field_errors(refused.value)
