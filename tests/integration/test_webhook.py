"""The admission webhook on the local cluster, called by the real API server, and the same checks
in the reconciler when no webhook runs.

Each operator here is conftest's Operator limited to this module's namespaces (--namespace), so it
runs beside any other operator on the cluster. The one with the webhook registers its own
ValidatingWebhookConfiguration (TENSORKILN_WEBHOOK_MANAGED: https://127.0.0.1:<free port>,
failurePolicy Ignore, a namespaceSelector for these namespaces only), deleted at the end whatever
happens. Admission requests are server-side dry runs: the webhook is called, nothing is stored.
"""

import copy
import json
import os
import signal
import subprocess
import uuid

import pytest
import yaml
from kubernetes import client
from tensorkiln.admission import webhook
from tensorkiln.controllers.inferencemodel import normalised_spec
from tensorkiln.review import checks
from tensorkiln_api import GROUP, VERSION
from tensorkiln_api.registry.manifest import Benchmark, Candidate, TensorInfo
from tensorkiln_local.cluster import binaries, engine_seeds, paths

from .conftest import Operator, free_port
from .helpers import namespace_exists, wait_for

pytestmark = pytest.mark.cluster

STAGED = paths.SAMPLE_MODELS / "rapidocr" / "ch_ppocr_mobile_v2.0_cls_infer.onnx"
REGISTRY_SECRET = "registry-credentials"
H100_ONLY = {"mode": "Auto", "include": ["NVIDIA-H100*"]}


def model(namespace: str, name: str, uri: str = f"file://{STAGED}", hardware: dict | None = None) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceModel",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"source": {"uri": uri}, "hardware": copy.deepcopy(hardware or H100_ONLY)},
    }


@pytest.fixture(scope="module")
def namespaces(api):
    """(with the registry Secret and a claim `models`, without either), for the webhook's operator."""
    core = client.CoreV1Api(api)
    names = [f"t-wh-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for name in names:
        core.create_namespace({"metadata": {"name": name}})
    core.create_namespaced_secret(names[0], {"metadata": {"name": REGISTRY_SECRET}, "stringData": {"k": "v"}})
    claim = {
        "metadata": {"name": "models"},
        "spec": {"accessModes": ["ReadOnlyMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    core.create_namespaced_persistent_volume_claim(names[0], claim)
    yield names
    for name in names:
        core.delete_namespace(name)
    for name in names:
        wait_for(lambda n=name: not namespace_exists(core, n), timeout=180, what=f"namespace {name} to be deleted")


def _delete_configuration(api, name: str) -> None:
    try:
        client.AdmissionregistrationV1Api(api).delete_validating_webhook_configuration(name)
    except client.ApiException as error:
        if error.status != 404:
            raise


@pytest.fixture(scope="module")
def webhook_operator(api, namespaces, tmp_path_factory):
    configuration = f"tensorkiln-test-{namespaces[0]}"
    op = Operator(
        tmp_path_factory.mktemp("wh-operator") / "operator.log",
        f"file://{tmp_path_factory.mktemp('wh-registry')}",
        args=[arg for ns in namespaces for arg in ("--namespace", ns)],
        env={
            "TENSORKILN_WEBHOOK_PORT": str(free_port()),
            "TENSORKILN_WEBHOOK_MANAGED": configuration,
            "TENSORKILN_MODEL_FILE_ROOTS": str(paths.SAMPLE_MODELS),
            "TENSORKILN_REGISTRY_SECRET": REGISTRY_SECRET,
            "TENSORKILN_LOG_FORMAT": "full",
        },
    )
    op.configuration = configuration
    op.start()
    try:
        # Serving once a request the CRD admits is refused by the webhook (a claim that is missing).
        probe = model(namespaces[0], "probe", uri="pvc://no-such-claim/model.onnx")
        wait_for(lambda: refusal(api, probe) is not None, timeout=90, what=f"the webhook to answer\n{op.log()[-3000:]}")
        yield op
    finally:
        if op.proc and op.proc.poll() is None:  # a clean stop: kopf's cleanup deletes the configuration
            os.killpg(op.proc.pid, signal.SIGTERM)
            try:
                op.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                op.kill()
        _delete_configuration(api, configuration)  # whatever happened


def refusal(api, body) -> client.ApiException | None:
    """Create `body` as a server-side dry run; the error if refused, None if admitted."""
    try:
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP, VERSION, body["metadata"]["namespace"], "inferencemodels", body, dry_run="All"
        )
    except client.ApiException as error:
        return error
    return None


@pytest.fixture(scope="module")
def kubectl(api):
    return [str(binaries.ensure(("kube",)) / "kubectl"), "--kubeconfig", os.environ["KUBECONFIG"]]


def kubectl_apply(kubectl, body) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*kubectl, "apply", "--dry-run=server", "-f", "-"], input=yaml.safe_dump(body), capture_output=True, text=True
    )


def test_the_configuration_points_at_the_operator_and_fails_open(api, webhook_operator, namespaces):
    config = client.AdmissionregistrationV1Api(api).read_validating_webhook_configuration(
        webhook_operator.configuration
    )
    (hook,) = config.webhooks
    assert hook.failure_policy == "Ignore"
    assert hook.client_config.url.startswith("https://127.0.0.1:")
    assert hook.client_config.url.endswith(f"/{webhook.HANDLER_ID}")
    assert hook.namespace_selector.match_expressions[0].values == namespaces


def test_missing_claim_is_refused_naming_the_field(api, webhook_operator, namespaces):
    error = refusal(api, model(namespaces[0], "missing-claim", uri="pvc://no-such-claim/model.onnx"))
    assert error is not None and error.status == 422, error
    message = json.loads(error.body)["message"]
    assert webhook.WEBHOOK_NAME in message
    assert (
        f"spec.source.uri: PersistentVolumeClaim no-such-claim does not exist in namespace {namespaces[0]}" in message
    )


def test_existing_claim_is_admitted(api, webhook_operator, namespaces):
    assert refusal(api, model(namespaces[0], "with-claim", uri="pvc://models/cls.onnx")) is None


def test_missing_registry_secret_is_refused_naming_the_setting(api, webhook_operator, namespaces):
    error = refusal(api, model(namespaces[1], "no-secret"))
    assert error is not None, "admitted without the registry Secret in the namespace"
    message = json.loads(error.body)["message"]
    assert f"Secret {REGISTRY_SECRET} does not exist in namespace {namespaces[1]}" in message
    assert "TENSORKILN_REGISTRY_SECRET" in message


def test_file_uri_outside_the_allowed_roots_is_refused(api, webhook_operator, namespaces):
    error = refusal(api, model(namespaces[0], "host-path", uri="file:///etc/tensorkiln/model.onnx"))
    assert error is not None, "file:///etc/... was admitted"
    message = json.loads(error.body)["message"]
    assert "spec.source.uri: file:///etc/tensorkiln/model.onnx is outside the directories" in message
    assert str(paths.SAMPLE_MODELS) in message


def test_dot_dot_is_refused_by_the_crd_itself(api, webhook_operator, namespaces):
    error = refusal(api, model(namespaces[0], "dot-dot", uri=f"file://{paths.SAMPLE_MODELS}/../registry/x"))
    assert error is not None and "spec.source.uri" in error.body and "'..' path segment" in error.body


def test_hardware_matching_no_node_is_admitted_with_a_warning(kubectl, webhook_operator, namespaces):
    result = kubectl_apply(kubectl, model(namespaces[0], "nowhere", hardware={"include": ["NVIDIA-B200*"]}))
    assert result.returncode == 0, result.stderr
    assert "Warning: spec.hardware matches no node (GPU products in the cluster:" in result.stderr, result.stderr
    assert "created (server dry run)" in result.stdout


def test_valid_model_is_admitted_without_warnings(kubectl, webhook_operator, namespaces):
    result = kubectl_apply(kubectl, model(namespaces[0], "valid"))
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr


def test_slo_target_below_the_cached_engines_p95_is_admitted_with_the_figure(
    api, kubectl, webhook_operator, namespaces, tmp_path
):
    body = model(namespaces[0], "too-fast")
    body["spec"]["source"]["sha256"] = "ab" * 32  # a known digest: the registry cache key exists before any compile
    body["spec"]["slo"] = {"targetMilliseconds": 5}
    nodes = [api.sanitize_for_serialization(n) for n in client.CoreV1Api(api).list_node().items]
    (target,) = checks.targets_with_nodes(normalised_spec(body), nodes)
    measured = Benchmark(
        batch_size=1, p50_ms=15, p95_ms=20, p99_ms=22, throughput_per_s=60, threads=1, warmup_runs=1, runs=10
    )
    winner = Candidate(
        id="tensorrt-fp16", compiler="TensorRT", precision="FP16", status="Selected", benchmarks=[measured]
    )
    engine_seeds._publish(
        webhook_operator.registry_uri, body, target, tmp_path, {"model.plan": b"seed"}, winner,
        origin="test-seed", hardware_kind="GPU", fingerprint={"simulated": True},
        inputs=[TensorInfo(name="x", data_type="FP32", dims=[-1, 3])], outputs=[TensorInfo(name="y", data_type="FP32", dims=[-1])],
    )  # fmt: skip
    result = kubectl_apply(kubectl, body)
    assert result.returncode == 0, result.stderr
    expected = f"Warning: spec.slo.targetMilliseconds: 5 ms is below the engine's measured single-request p95 ({target.name} 20 ms)"
    assert expected in result.stderr, result.stderr


def test_unwatched_namespaces_are_not_sent_to_this_webhook(api, webhook_operator, namespace):
    # `namespace` (conftest) is outside the operator's namespaces: the CRD alone decides there.
    assert refusal(api, model(namespace, "elsewhere", uri="pvc://no-such-claim/model.onnx")) is None


# --- no webhook: the reconciler reports the same findings --------------------------------------


@pytest.fixture
def plain_operator(api, namespace, tmp_path):
    op = Operator(
        tmp_path / "operator.log",
        f"file://{tmp_path / 'registry'}",
        args=["--namespace", namespace],
        env={"TENSORKILN_LOG_FORMAT": "full", "TENSORKILN_MODEL_FILE_ROOTS": str(paths.SAMPLE_MODELS)},
    )
    op.start()
    yield op
    op.kill()


def conditions(api, namespace, name) -> dict:
    body = client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", name)
    return {c["type"]: c for c in body.get("status", {}).get("conditions", [])}, body.get("status", {})


def test_without_the_webhook_the_reconciler_sets_spec_valid(api, plain_operator, namespace):
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "inferencemodels", model(namespace, "waits", uri="pvc://models/cls.onnx")
    )

    def spec_valid(status_, reason):
        found, status = conditions(api, namespace, "waits")
        condition = found.get("SpecValid", {})
        return (found, status) if (condition.get("status"), condition.get("reason")) == (status_, reason) else None

    found, status = wait_for(
        lambda: spec_valid("False", "MissingPVC"),
        timeout=90,
        what=f"SpecValid False/MissingPVC\n{plain_operator.log()[-3000:]}",
    )
    assert f"PersistentVolumeClaim models does not exist in namespace {namespace}" in found["SpecValid"]["message"]
    assert (found["Ready"]["status"], found["Ready"]["reason"]) == ("False", "MissingPVC")
    assert status["phase"] == "Pending"
    # The claim appears: nothing to edit, the next reconcile goes on.
    claim = {
        "metadata": {"name": "models"},
        "spec": {"accessModes": ["ReadOnlyMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    client.CoreV1Api(api).create_namespaced_persistent_volume_claim(namespace, claim)
    wait_for(lambda: spec_valid("True", "Valid"), timeout=90, what="SpecValid True/Valid once the claim exists")
