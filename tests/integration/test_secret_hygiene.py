"""No secret value in logs, Events, status, workload specs, ConfigMaps or /metrics.

Two unique random S3 secret keys are planted: the right one (versitygw's root key, in the
operator's environment and in the registry credentials Secret and the model's source credentials
Secret (spec.source.credentials) of the namespace `good`) and a wrong one (both Secrets of the
namespace `wrong`, and the environment of a second operator that watches only the namespace
`refused`). Each namespace holds one InferenceModel whose source is
an object in the same S3 server, so every path that uses the credentials runs for real:

- good: the operator looks the engine up in the S3 registry; the compile pod on local-0 fetches
  the model from S3 with the source's Secret and publishes the engine with the registry's; the Triton pod's engine-fetch pulls it; Ready.
- wrong: the compile pod's fetch is refused by S3 (AccessDenied); the CompileJob fails, naming
  spec.source.credentials and the source.
- refused: the operator's own registry lookup is refused (SignatureDoesNotMatch); kopf logs the
  exception with its traceback and retries.
- bearer: the model comes from a private HTTP host (a stand-in, BearerServer) that serves it only with the
  planted bearer token of the source's Secret (`token`); the compile pod fetches it and publishes.

Then every place a value could leak to is searched for each planted key, as is and in base64 at
every alignment (inside a longer encoded text too). Pod logs are read from the local node's files
(`kubectl logs` needs a kubelet port, which local-0 does not serve).
"""

import base64
import json
import secrets
import signal
import subprocess
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from tensorkiln_api import GROUP, VERSION
from tensorkiln_local.cluster import network, nodes
from tensorkiln_local.cluster.ocr_models import CLS

from .conftest import Operator
from .helpers import BearerServer, namespace_exists, wait_for
from .test_registry_s3 import VersityGateway

pytestmark = [pytest.mark.cluster, pytest.mark.s3]

REGISTRY_SECRET = "registry-credentials"
SOURCE_SECRET = "model-credentials"
ENGINES, MODELS = "engines", "models"
SAMPLE = yaml.safe_load((Path(__file__).resolve().parents[2] / "manifests/samples/ocr-cls-cpu.yaml").read_text())
MODEL_FILE = CLS.path
# S3's answer to a request signed with the wrong secret key; minio names a refused HEAD (no body) by its status.
REFUSALS = ("SignatureDoesNotMatch", "AccessDenied")


def encodings(value: str) -> dict[str, str]:
    """The value, and its base64 at each of the three byte alignments it can have inside a longer
    encoded text, less the characters that mix in neighbouring bytes."""
    raw = value.encode()
    found = {"plain": value}
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + raw).decode()
        found[f"base64, offset {shift}"] = encoded[-(-8 * shift // 6) : 8 * (shift + len(raw)) // 6]
    return found


def leaks(places: dict[str, str], planted: dict[str, str]) -> list[str]:
    return [
        f"the {label} secret key ({how}) in {place}"
        for place, text in places.items()
        for label, value in planted.items()
        for how, form in encodings(value).items()
        if form in text
    ]


@dataclass
class Scenario:
    planted: dict[str, str]  # label -> planted secret key
    namespaces: dict[str, str]  # role (good, wrong, refused) -> namespace
    objects: dict[str, dict]  # "Kind ns/name" -> the object as the API server returns it
    places: dict[str, dict[str, str]] = field(default_factory=dict)  # kind of place -> where -> text
    authorizations: list[str] = field(default_factory=list)  # what the bearer host was sent


def model_body(namespace: str, name: str, key: str, retries: int) -> dict:
    """The sample's real model, read from S3; FP32 only and one replica: the cheapest full path."""
    spec = json.loads(json.dumps(SAMPLE["spec"]))
    spec["source"] = {**spec["source"], "uri": f"s3://{MODELS}/{key}", "credentials": {"secretName": SOURCE_SECRET}}
    spec["compile"] = {**spec["compile"], "precisions": ["FP32"], "retries": retries}
    del spec["compile"]["calibration"]
    spec["slo"] |= {"minReplicas": 1, "maxReplicas": 1}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceModel",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def serialise(api, obj) -> dict:
    return obj if isinstance(obj, dict) else api.sanitize_for_serialization(obj)


def namespaced_objects(api, namespace: str) -> dict[str, dict]:
    """Everything the operator and the controllers make in a namespace; Secrets left out."""
    core, apps, batch = client.CoreV1Api(api), client.AppsV1Api(api), client.BatchV1Api(api)
    policy, scaling = client.PolicyV1Api(api), client.AutoscalingV2Api(api)
    custom = client.CustomObjectsApi(api)
    lists = {
        "InferenceModel": custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels")["items"],
        "CompileJob": custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "compilejobs")["items"],
        "Event": core.list_namespaced_event(namespace).items,
        "ConfigMap": core.list_namespaced_config_map(namespace).items,
        "Job": batch.list_namespaced_job(namespace).items,
        "Deployment": apps.list_namespaced_deployment(namespace).items,
        "ReplicaSet": apps.list_namespaced_replica_set(namespace).items,
        "Pod": core.list_namespaced_pod(namespace).items,
        "Service": core.list_namespaced_service(namespace).items,
        "PodDisruptionBudget": policy.list_namespaced_pod_disruption_budget(namespace).items,
        "HorizontalPodAutoscaler": scaling.list_namespaced_horizontal_pod_autoscaler(namespace).items,
    }
    found = {}
    for kind, items in lists.items():
        for item in items:
            obj = serialise(api, item)
            found[f"{kind} {namespace}/{obj['metadata']['name']}"] = obj
    return found


def pod_log_files(core: client.CoreV1Api, pod: dict) -> dict[str, str]:
    """Every container's log (`kubectl logs`) and termination message, by container."""
    found = {}
    meta, status = pod["metadata"], pod.get("status", {})
    for container in status.get("initContainerStatuses", []) + status.get("containerStatuses", []):
        try:
            found[f"{container['name']} log"] = core.read_namespaced_pod_log(
                meta["name"], meta["namespace"], container=container["name"]
            )
        except client.ApiException:
            pass  # never started
        for state in ("state", "lastState"):
            terminated = container.get(state, {}).get("terminated") or {}
            if terminated.get("message"):
                found[f"{container['name']} termination message"] = terminated["message"]
    return found


def node_log_sizes() -> dict:
    """Where local-0's kubelet and containerd log, and how far: what the scenario adds is read after."""
    node = nodes.RealNode(nodes.FIRST)
    files = [node.log("kubelet"), node.log("containerd")]
    return {path: path.stat().st_size if path.exists() else 0 for path in files}


def metrics_text(op: Operator) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{op.metrics_port}/metrics", timeout=10) as response:
        return response.read().decode()


def stop(op: Operator) -> None:
    """SIGTERM, so the operator stops as in a rollout; SIGKILL if it hangs."""
    if op.proc and op.proc.poll() is None:
        op.proc.send_signal(signal.SIGTERM)
        try:
            op.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            op.kill()


def custom_object(api, namespace: str, plural: str, name: str) -> dict | None:
    try:
        return client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def compile_job_of(api, namespace: str) -> dict | None:
    items = client.CustomObjectsApi(api).list_namespaced_custom_object(GROUP, VERSION, namespace, "compilejobs")
    return items["items"][0] if items["items"] else None


def phase(obj: dict | None) -> str | None:
    return (obj or {}).get("status", {}).get("phase")


@pytest.fixture(scope="module")
def scenario(api, operator, tmp_path_factory):
    # The session's cluster-wide operator would reconcile these namespaces too, with its own registry and no
    # credentials, racing the paths under test: it is stopped meanwhile. Three operators run instead, as
    # processes of this machine: each with credentials of its own (right, wrong, refused), which one
    # installed operator cannot be.
    operator.stop()
    planted = {role: f"planted-{secrets.token_hex(20)}" for role in ("right", "wrong", "token")}
    access_key = f"tk-{uuid.uuid4().hex[:12]}"
    server = VersityGateway(
        tmp_path_factory.mktemp("hygiene-s3") / "data", access_key, planted["right"], network.node_gateway(0)
    )
    core = client.CoreV1Api(api)
    suffix = uuid.uuid4().hex[:8]
    namespaces = {role: f"t-sec-{role}-{suffix}" for role in ("good", "wrong", "refused", "bearer")}
    keys = {
        "good": planted["right"],
        "wrong": planted["wrong"],
        "refused": planted["wrong"],
        "bearer": planted["right"],
    }
    bearer = BearerServer(network.node_gateway(0), planted["token"], MODEL_FILE.read_bytes())
    node_logs_start = node_log_sizes()
    created, operators = [], {}

    def start_operator(name: str, watched: list[str], secret_key: str) -> Operator:
        op = Operator(
            tmp_path_factory.mktemp(f"hygiene-{name}") / "operator.log",
            f"s3://{ENGINES}/{suffix}",
            args=[arg for ns in watched for arg in ("--namespace", ns)],
            env={
                "TENSORKILN_S3_ENDPOINT": server.endpoint,
                "AWS_ACCESS_KEY_ID": access_key,
                "AWS_SECRET_ACCESS_KEY": secret_key,
                "TENSORKILN_REGISTRY_SECRET": REGISTRY_SECRET,
                "TENSORKILN_LOG_FORMAT": "json",
            },
        )
        operators[name] = op
        op.start()
        return op

    try:
        s3 = server.client()
        for bucket in (ENGINES, MODELS):
            s3.make_bucket(bucket)
        for role in namespaces:
            s3.fput_object(MODELS, f"{role}/cls.onnx", str(MODEL_FILE))
        for role, namespace in namespaces.items():
            core.create_namespace({"metadata": {"name": namespace}})
            created.append(namespace)
            credentials = {
                "AWS_ACCESS_KEY_ID": access_key,
                "AWS_SECRET_ACCESS_KEY": keys[role],
                "TENSORKILN_S3_ENDPOINT": server.endpoint,
            }
            secret = {"metadata": {"name": REGISTRY_SECRET}, "stringData": credentials}
            core.create_namespaced_secret(namespace, secret)
            source_keys = {
                "AWS_ACCESS_KEY_ID": access_key,
                "AWS_SECRET_ACCESS_KEY": keys[role],
                "AWS_ENDPOINT_URL": server.endpoint,
            }
            if role == "bearer":
                source_keys = {"token": planted["token"]}
            core.create_namespaced_secret(namespace, {"metadata": {"name": SOURCE_SECRET}, "stringData": source_keys})

        watched = [namespaces[role] for role in ("good", "wrong", "bearer")]
        main = start_operator("main", watched, planted["right"])
        refused = start_operator("refused", [namespaces["refused"]], planted["wrong"])
        custom = client.CustomObjectsApi(api)
        for role, namespace in namespaces.items():
            body = model_body(namespace, f"ocr-{role}", f"{role}/cls.onnx", retries=0 if role == "wrong" else 2)
            if role == "bearer":  # other compile options than good's: a compile of its own, never good's cache hit
                body["spec"]["source"]["uri"] = bearer.url
                body["spec"]["compile"]["compilers"] = {"cpu": ["OnnxRuntime"]}
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", body)

        # The refused operator first: once S3 has refused its lookup, it has nothing more to show.
        wait_for(
            lambda: any(code in refused.log() for code in REFUSALS),
            timeout=120,
            what=f"S3 to refuse the lookup\n{refused.log()[-3000:]}",
        )
        refused_metrics = metrics_text(refused)
        stop(refused)
        wait_for(
            lambda: phase(compile_job_of(api, namespaces["wrong"])) == "Failed",
            timeout=240,
            interval=2,
            what=f"the compile with the wrong key to fail\n{main.log()[-3000:]}",
        )
        wait_for(
            lambda: phase(custom_object(api, namespaces["good"], "inferencemodels", "ocr-good")) == "Ready",
            timeout=420,
            interval=3,
            what=f"the model to be Ready\n{main.log()[-3000:]}",
        )
        wait_for(
            lambda: phase(compile_job_of(api, namespaces["bearer"])) == "Succeeded",
            timeout=300,
            interval=3,
            what=f"the compile of the bearer-token source\n{main.log()[-3000:]}",
        )
        main_metrics = metrics_text(main)

        objects = {}
        for namespace in namespaces.values():
            objects |= namespaced_objects(api, namespace)
        result = Scenario(planted, namespaces, objects, authorizations=list(bearer.authorizations))
        result.places["operator logs"] = {f"the {name} operator's output": op.log() for name, op in operators.items()}
        result.places["operator /metrics"] = {
            "the main operator's /metrics": main_metrics,
            "the refused operator's /metrics": refused_metrics,
        }
        pod_logs = {
            f"{where}: {container}": text
            for where, obj in objects.items()
            if where.startswith("Pod ")
            for container, text in pod_log_files(core, obj).items()
        }
        for path, start in node_logs_start.items():
            pod_logs[f"local-0's {path.stem} log"] = path.read_bytes()[start:].decode(errors="replace")
        result.places["pod logs"] = pod_logs
        for place, kinds in (
            ("Events", ("Event",)),
            ("InferenceModel and CompileJob objects", ("InferenceModel", "CompileJob")),
            ("workloads", ("Job", "Deployment", "ReplicaSet", "Pod", "Service", "PodDisruptionBudget")),
            ("ConfigMaps", ("ConfigMap",)),
        ):
            result.places[place] = {
                where: json.dumps(obj) for where, obj in objects.items() if where.split(" ")[0] in kinds
            }
        yield result
    finally:
        for op in operators.values():
            stop(op)
        for namespace in created:
            core.delete_namespace(namespace)
        for namespace in created:
            wait_for(
                lambda n=namespace: not namespace_exists(core, n), timeout=180, what=f"namespace {namespace} deleted"
            )
        server.stop()
        bearer.stop()
        operator.start()


def test_every_path_used_the_planted_credentials(scenario):
    objects, ns = scenario.objects, scenario.namespaces
    good_cj, wrong_cj = (
        next(o for w, o in objects.items() if w.startswith(f"CompileJob {ns[r]}/")) for r in ("good", "wrong")
    )
    assert good_cj["status"]["phase"] == "Succeeded"
    assert good_cj["status"]["cacheHit"] is False, "the compile pod must have fetched from and published to S3"
    assert good_cj["status"]["engine"]["uri"].startswith(f"s3://{ENGINES}/")
    fetch = [w for w in scenario.places["pod logs"] if w.startswith(f"Pod {ns['good']}/") and "engine-fetch" in w]
    assert fetch, "the Triton pod's engine-fetch, which reads the Secret, must have run"

    assert any(code in wrong_cj["status"]["message"] for code in REFUSALS), wrong_cj["status"]
    assert wrong_cj["status"]["reason"] == "ModelAccessDenied", wrong_cj["status"]
    source = f"spec.source.uri: s3://{MODELS}/wrong/cls.onnx"
    assert source in wrong_cj["status"]["message"], wrong_cj["status"]
    assert f"spec.source.credentials.secretName '{SOURCE_SECRET}'" in wrong_cj["status"]["message"]
    bearer_cj = next(o for w, o in objects.items() if w.startswith(f"CompileJob {ns['bearer']}/"))
    assert bearer_cj["status"]["phase"] == "Succeeded", bearer_cj["status"]
    assert scenario.authorizations and set(scenario.authorizations) == {f"Bearer {scenario.planted['token']}"}
    refused_log = scenario.places["operator logs"]["the refused operator's output"]
    assert any(code in refused_log for code in REFUSALS)


@pytest.mark.parametrize(
    "place",
    [
        "operator logs",
        "operator /metrics",
        "pod logs",
        "Events",
        "InferenceModel and CompileJob objects",
        "workloads",
        "ConfigMaps",
    ],
)
def test_no_planted_secret_key_appears(scenario, place):
    texts = scenario.places[place]
    assert texts, f"nothing collected from {place}: the search would prove nothing"
    found = leaks(texts, scenario.planted)
    assert not found, f"planted credentials leaked into {place}:\n" + "\n".join(found)


def _containers(pod_spec: dict) -> list[dict]:
    return pod_spec.get("initContainers", []) + pod_spec.get("containers", [])


def test_workloads_take_the_credentials_by_reference(scenario):
    """The compiler and engine-fetch containers name the Secret; no env entry carries a value
    for a credential variable."""
    specs = {}
    for where, obj in scenario.objects.items():
        kind = where.split(" ")[0]
        if kind == "Pod":
            specs[where] = obj["spec"]
        elif kind in ("Job", "Deployment"):
            specs[where] = obj["spec"]["template"]["spec"]
    users = {"compiler", "engine-fetch"}
    referencing = 0
    for where, spec in specs.items():
        for container in _containers(spec):
            inline = [e["name"] for e in container.get("env", []) if e["name"].startswith("AWS_") and "value" in e]
            assert not inline, f"{where} container {container['name']} carries {inline} inline"
            if container["name"] in users:
                assert {"secretRef": {"name": REGISTRY_SECRET}} in container.get("envFrom", []), (where, container)
                referencing += 1
    assert referencing >= 4, "a compile Job and Pod, a Deployment and a Triton Pod at least"


def readable_secrets(pod_spec: dict) -> dict[str, set[str]]:
    """Each container's Secrets: those of its environment (envFrom, secretKeyRef) and of the volumes it mounts
    (secret, projected)."""
    volumes = {}
    for volume in pod_spec.get("volumes", []):
        names = {volume["secret"]["secretName"]} if "secret" in volume else set()
        for projected in volume.get("projected", {}).get("sources", []):
            names |= {projected["secret"]["name"]} if "secret" in projected else set()
        volumes[volume["name"]] = names
    found = {}
    for container in _containers(pod_spec):
        names = {ref["secretRef"]["name"] for ref in container.get("envFrom", []) if "secretRef" in ref}
        names |= {
            e["valueFrom"]["secretKeyRef"]["name"]
            for e in container.get("env", [])
            if "secretKeyRef" in e.get("valueFrom", {})
        }
        for mount in container.get("volumeMounts", []):
            names |= volumes.get(mount["name"], set())
        found[container["name"]] = names
    return found


def test_each_pod_reads_only_the_secrets_of_its_part(scenario):
    """The compile pod: the registry's Secret (it publishes) and the source's (it fetches); a Triton pod's
    engine-fetch: the registry's alone; Triton: none."""
    expected = {
        "compiler": {REGISTRY_SECRET, SOURCE_SECRET},
        "engine-fetch": {REGISTRY_SECRET},
        "triton": set(),
    }
    pods = {where: obj["spec"] for where, obj in scenario.objects.items() if where.startswith("Pod ")}
    seen = {}
    for where, spec in pods.items():
        for container, names in readable_secrets(spec).items():
            assert names == expected[container], (where, container, names)
            seen[container] = seen.get(container, 0) + 1
    assert seen.get("compiler") and seen.get("engine-fetch") and seen.get("triton"), seen
