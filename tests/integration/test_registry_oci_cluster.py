"""Issue 45's acceptance on the real node: with an OCI engine registry, a model applied in a brand-new namespace,
with no registry claim and no copied Secret, its source an oci:// artifact, compiles and serves; the registry's tag
listing names the engine, and its manifest's annotations say what it is.

The registry is the local cluster's engine registry (tensorkiln_local.cluster.engine_registry: Debian's
docker-registry, the CNCF distribution registry, at local-0's gateway, where pods reach this machine, on plain HTTP
without credentials), the one `make demo` installs the operator with; a repository of this run's. It stands in for a
user's (ECR, GHCR, Harbor) only in being a real distribution registry. The model is pushed beside it as an ORAS
artifact (its one layer titled *.onnx), as `oras push` does. The session's installed operator is stopped meanwhile
(it would reconcile the namespace with its pvc:// registry); an operator process of this machine runs instead, with
the installed one's settings but TENSORKILN_REGISTRY_URI=oci://<gateway>:5001/tensorkiln/engines-<run> and
TENSORKILN_OCI_INSECURE=true, watching only the test's namespace.
"""

import copy
import shutil
import uuid
from contextlib import ExitStack
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort
import pytest
import requests
from kubernetes import client
from oras import provider as oras_provider
from tensorkiln_api import GROUP, VERSION
from tensorkiln_api.registry import oci
from tensorkiln_api.registry.manifest import CacheKey
from tensorkiln_client.triton import infer_on, new_connection, service_address, until_routed
from tensorkiln_local import install
from tensorkiln_local.cluster import engine_registry
from tensorkiln_local.cluster.ocr_models import CLS

from .conftest import Operator
from .helpers import wait_for
from .test_serving_local import NAME, SAMPLE, condition, model_object

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]  # the first setup: stop, compile, roll out (<= 600 s)


@dataclass
class Served:
    namespace: str
    repository: str  # the engines', in the cluster's engine registry
    before: list[str]  # the namespace's claims and Secrets once created
    after: list[str]  # ... once the model was Ready
    model: dict
    pod: client.V1Pod  # the Triton pod


def claims_and_secrets(core: client.CoreV1Api, namespace: str) -> list[str]:
    """The namespace's PersistentVolumeClaims and Secrets, less the service-account tokens Kubernetes may make."""
    claims = core.list_namespaced_persistent_volume_claim(namespace).items
    secrets = core.list_namespaced_secret(namespace).items
    return [f"PersistentVolumeClaim {c.metadata.name}" for c in claims] + [
        f"Secret {s.metadata.name}" for s in secrets if s.type != "kubernetes.io/service-account-token"
    ]


def push_model(repository: str, tmp) -> str:
    """The model pushed to the engine registry as `oras push host/repository:v1 cls.onnx` does; its oci://
    reference, pinned by the manifest's digest."""
    model = tmp / "cls.onnx"
    shutil.copyfile(CLS.path, model)
    registry = oras_provider.Registry(hostname=engine_registry.host(), insecure=True)
    pushed = registry.push(
        f"{engine_registry.host()}/{repository}:v1", files=[str(model)], disable_path_validation=True
    )
    pushed.raise_for_status()
    return f"oci://{engine_registry.host()}/{repository}@{pushed.headers['Docker-Content-Digest']}"


def ready(api, namespace: str) -> dict | None:
    model = model_object(api, namespace)
    return model if condition(model, "Ready").get("status") == "True" else None


@pytest.fixture(scope="module")
def served(api, operator, tmp_path_factory):
    core = client.CoreV1Api(api)
    tmp = tmp_path_factory.mktemp("oci-cluster")
    run = uuid.uuid4().hex[:8]
    namespace, repository = f"t-oci-{run}", f"tensorkiln/engines-{run}"
    with ExitStack() as cleanup:  # in reverse, each step even when an earlier one failed
        cleanup.callback(operator.start)
        operator.stop()
        source = push_model(f"models/ocr-cls-{run}", tmp)
        core.create_namespace({"metadata": {"name": namespace}})  # not install.create_namespace: no claim
        cleanup.callback(install.delete_namespace, core, namespace, until_gone=True)
        before = claims_and_secrets(core, namespace)

        process = Operator(
            tmp / "operator.log",
            f"oci://{engine_registry.host()}/{repository}",
            args=["--namespace", namespace],
            # No credentials: an empty docker config, whatever this machine's says.
            env={"TENSORKILN_OCI_INSECURE": "true", "DOCKER_CONFIG": str(tmp / "no-docker-config")},
        )
        process.start()
        cleanup.callback(process.kill)

        model = copy.deepcopy(SAMPLE)
        model["metadata"] = {"name": NAME, "namespace": namespace}
        model["spec"]["source"] = {**model["spec"]["source"], "uri": source}
        model["spec"]["compile"] = {  # one quick compile, as test_prometheus's
            "precisions": ["FP32"],
            "compilers": {"cpu": ["OnnxRuntime"]},
            "objective": SAMPLE["spec"]["compile"]["objective"],
        }
        model["spec"]["slo"] |= {"minReplicas": 1, "maxReplicas": 1}
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP, VERSION, namespace, "inferencemodels", model
        )
        try:
            model = wait_for(lambda: ready(api, namespace), timeout=600, interval=3, what="compile, rollout, Ready")
        except pytest.fail.Exception as error:
            registry_log = engine_registry.LOGFILE.read_text()[-4000:]
            pytest.fail(f"{error}\noperator process:\n{process.log()[-4000:]}\nregistry:\n{registry_log}")
        (pod,) = core.list_namespaced_pod(namespace, label_selector="app.kubernetes.io/component=serving").items
        yield Served(namespace, repository, before, claims_and_secrets(core, namespace), model, pod)


def test_a_brand_new_namespace_compiles_and_serves_with_no_claim_nor_secret(api, served):
    assert served.before == [] and served.after == [], "nothing but the model was put in the namespace"
    assert not [v.name for v in served.pod.spec.volumes or [] if v.persistent_volume_claim], "Triton mounts no claim"

    address = service_address(api, served.namespace, NAME)
    images = CLS.samples(8, seed=11)
    outputs = until_routed(lambda: infer_on(new_connection(address), NAME, {"x": images}))
    answer = next(iter(outputs.values()))
    reference = ort.InferenceSession(str(CLS.path)).run(None, {"x": images})[0]
    assert answer.shape == reference.shape
    assert np.max(np.abs(answer - reference)) < 0.05
    assert (answer.argmax(1) == reference.argmax(1)).all()


def test_the_registry_lists_the_engine_by_its_tags_with_its_annotations(api, served):
    (target,) = [t for t in served.model["status"]["targets"] if t.get("engine")]
    digest, hardware_class = target["engine"]["digest"], target["hardwareClass"]
    assert target["engine"]["uri"] == f"oci://{engine_registry.host()}/{served.repository}:{oci.engine_tag(digest)}"
    compile_job = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, served.namespace, "compilejobs", target["compileJob"]
    )

    base = f"http://{engine_registry.host()}/v2/{served.repository}"
    listing = requests.get(f"{base}/tags/list", timeout=10)
    listing.raise_for_status()
    response = requests.get(
        f"{base}/manifests/{oci.engine_tag(digest)}", headers={"Accept": oci.OCI_MANIFEST_MEDIA_TYPE}, timeout=10
    )
    response.raise_for_status()
    artifact = response.json()
    notes = artifact["annotations"]

    assert artifact["artifactType"] == oci.ARTIFACT_TYPE
    assert notes[oci.ENGINE_DIGEST] == digest
    assert notes["dev.tensorkiln.key.model-digest"] == SAMPLE["spec"]["source"]["sha256"]
    assert notes["dev.tensorkiln.key.hardware-class"] == hardware_class
    assert notes["dev.tensorkiln.key.options-hash"] == compile_job["spec"]["optionsHash"]
    key = CacheKey(
        model_digest=notes["dev.tensorkiln.key.model-digest"],
        options_hash=notes["dev.tensorkiln.key.options-hash"],
        hardware_class=hardware_class,
        compiler_version=notes["dev.tensorkiln.key.compiler-version"],
    )
    assert notes["dev.tensorkiln.key.id"] == key.id()
    # Linked to the model's own artifact (the oci:// source), which the referrers fallback index names.
    source_digest = served.model["spec"]["source"]["uri"].rpartition("@")[2]
    assert artifact["subject"]["digest"] == source_digest
    fallback = source_digest.replace(":", "-")
    index = requests.get(
        f"{base}/manifests/{fallback}", headers={"Accept": oci.OCI_INDEX_MEDIA_TYPE}, timeout=10
    ).json()
    assert [m["annotations"][oci.ENGINE_DIGEST] for m in index["manifests"]] == [digest]
    # One engine published: its tag, its cache key's and the referrers index's, nothing else.
    assert sorted(listing.json()["tags"]) == sorted([oci.engine_tag(digest), oci.cache_tag(key), fallback])
