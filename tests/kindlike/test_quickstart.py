"""docs/quickstart-kind.md on the local cluster's kind-like profile (`make kind-like`: TENSORKILN_CLUSTER
tensorkiln-kind, `cluster up --profile kind`, `install`): one real node labelled control-plane as kind's is, no
Node Feature Discovery or GPU Feature Discovery labels, no simulated pools, no registry claim; the engine registry
is the cluster's OCI registry (tensorkiln_local.cluster.engine_registry), standing in for the page's kind-registry.

The page's model is pushed as its `oras push` does (the same file, from the same wheel), and its InferenceModel is
applied as the page writes it, but for the registry's host: it must become Ready on the node, in the hardware class
named by the node's architecture, its engine in the OCI registry, and answer as onnxruntime does.
"""

import copy
import re
import shutil
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import yaml
from integration.helpers import wait_for
from kubernetes import client
from oras import provider as oras_provider
from tensorkiln_api import GROUP, VERSION
from tensorkiln_client.triton import infer_on, new_connection, service_address, until_routed
from tensorkiln_local.cluster import connection, engine_registry, profiles
from tensorkiln_local.cluster.ocr_models import CLS

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1200)]
PAGE = Path(__file__).resolve().parents[2] / "docs" / "quickstart-kind.md"
PAGE_REGISTRY = "kind-registry:5000"  # the page's registry, as pods reach it


def page_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", PAGE.read_text(), re.S)


def page_model() -> dict:
    (model,) = [doc for block in page_blocks("yaml") if (doc := yaml.safe_load(block))["kind"] == "InferenceModel"]
    return model


def page_push_reference() -> str:
    """The reference the page's `oras push` names, as localhost:5001/repository:tag."""
    (found,) = re.findall(r"oras push --plain-http (\S+) ", "".join(page_blocks("sh")))
    return found


@pytest.fixture(scope="module")
def api():
    if profiles.current().name != "kind":
        pytest.skip("the kind-like profile's cluster: make kind-like")
    with connection.api_client() as api_client:
        yield api_client


@pytest.fixture(scope="module")
def served(api, tmp_path_factory):
    # What the page's `oras push` does, to the cluster's registry.
    reference = page_push_reference().replace("localhost:5001", engine_registry.host())
    model_file = tmp_path_factory.mktemp("quickstart") / CLS.path.name
    shutil.copyfile(CLS.path, model_file)
    pushed = oras_provider.Registry(hostname=engine_registry.host(), insecure=True).push(
        reference, files=[str(model_file)], disable_path_validation=True
    )
    pushed.raise_for_status()

    model = copy.deepcopy(page_model())
    assert model["spec"]["source"]["uri"].startswith(f"oci://{PAGE_REGISTRY}/")
    model["spec"]["source"]["uri"] = model["spec"]["source"]["uri"].replace(PAGE_REGISTRY, engine_registry.host())
    meta = model["metadata"]
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(GROUP, VERSION, meta["namespace"], "inferencemodels", model)
    try:

        def ready():
            found = custom.get_namespaced_custom_object(
                GROUP, VERSION, meta["namespace"], "inferencemodels", meta["name"]
            )
            return found if found.get("status", {}).get("phase") == "Ready" else None

        yield wait_for(ready, timeout=1080, interval=5, what=f"{meta['name']} Ready on the kind-like cluster")
    finally:
        custom.delete_namespaced_custom_object(GROUP, VERSION, meta["namespace"], "inferencemodels", meta["name"])


def test_the_cluster_is_shaped_like_kind(api):
    (node,) = client.CoreV1Api(api).list_node().items
    labels = node.metadata.labels
    assert profiles.CONTROL_PLANE_LABEL in labels and not node.spec.taints
    assert not [k for k in labels if k.startswith(("feature.node.kubernetes.io/", "nvidia.com/"))], labels
    claims = client.CoreV1Api(api).list_persistent_volume_claim_for_all_namespaces().items
    assert not claims, "no model namespace needs a registry claim"


def test_the_quickstart_model_is_served_on_the_control_plane_node(api, served):
    (target,) = served["status"]["targets"]
    arch = client.CoreV1Api(api).list_node().items[0].metadata.labels["kubernetes.io/arch"]
    assert target["hardwareClass"] == f"cpu-{arch}"
    assert target["engine"]["uri"].startswith(f"oci://{engine_registry.host()}/{engine_registry.REPOSITORY}:engine-")

    meta = served["metadata"]
    address = service_address(api, meta["namespace"], meta["name"])
    images = CLS.samples(8, seed=5)
    outputs = until_routed(lambda: infer_on(new_connection(address), meta["name"], {"x": images}))
    answer = next(iter(outputs.values()))
    reference = ort.InferenceSession(str(CLS.path)).run(None, {"x": images})[0]
    assert np.max(np.abs(answer - reference)) < 0.05
    assert (answer.argmax(1) == reference.argmax(1)).all()
