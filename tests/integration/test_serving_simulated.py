"""Triton rollouts on the simulated GPU pools, with engines seeded as test seeds (see tensorkiln_local.cluster.engine_seeds)."""

import copy
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from tensorkiln.builders.labels import COMPILE_JOB
from tensorkiln.builders.serving import ENGINE_DIGEST, target_name
from tensorkiln.hardware.classes import GPU_PRODUCT, discover
from tensorkiln.hardware.selection import select_targets
from tensorkiln_api import GROUP, VERSION
from tensorkiln_local.cluster.engine_seeds import publish_test_seed

from .helpers import wait_for

pytestmark = pytest.mark.cluster
SAMPLE = yaml.safe_load((Path(__file__).resolve().parents[2] / "manifests/samples/resnet50-gpu.yaml").read_text())


def test_each_gpu_product_gets_triton_on_its_own_nodes(api, operator, namespace, tmp_path):
    custom, apps, core = client.CustomObjectsApi(api), client.AppsV1Api(api), client.CoreV1Api(api)
    model = copy.deepcopy(SAMPLE)
    model["metadata"] = {"name": "resnet50", "namespace": namespace}
    model["spec"]["slo"]["minReplicas"] = 2
    nodes = [api.sanitize_for_serialization(n) for n in core.list_node().items]
    targets = select_targets(model["spec"]["hardware"], discover(nodes), nodes)
    seeded = {t.name: publish_test_seed(operator.registry_uri, model, t, tmp_path) for t in targets}
    assert len(seeded) >= 3

    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", model)

    def ready():
        status = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", "resnet50")
        conditions = {c["type"]: c for c in status.get("status", {}).get("conditions", [])}
        return status if conditions.get("Deployed", {}).get("status") == "True" else None

    status = wait_for(ready, timeout=120, what="every target rolled out")["status"]
    assert status["phase"] == "Ready"
    deployed = next(c for c in status["conditions"] if c["type"] == "Deployed")
    assert "simulated by kwok: no Triton runs there" in deployed["message"]
    assert client.BatchV1Api(api).list_namespaced_job(namespace).items == []  # cache hits: nothing compiled

    for target in targets:
        deployment = apps.read_namespaced_deployment(target_name("resnet50", target), namespace)
        assert deployment.spec.template.metadata.annotations[ENGINE_DIGEST] == seeded[target.name]
        assert deployment.spec.strategy.rolling_update.max_unavailable == 0
        pods = core.list_namespaced_pod(namespace, label_selector=f"tensorkiln.dev/hardware-class={target.name}").items
        assert len(pods) == 2
        for pod in pods:
            assert core.read_node(pod.spec.node_name).metadata.labels[GPU_PRODUCT] == target.product
        assert client.PolicyV1Api(api).read_namespaced_pod_disruption_budget(target_name("resnet50", target), namespace)
        assert core.read_namespaced_service(target_name("resnet50", target), namespace)
    assert core.read_namespaced_service("resnet50", namespace).spec.selector["tensorkiln.dev/model"] == "resnet50"
    assert not core.list_namespaced_pod(namespace, label_selector=COMPILE_JOB).items


def operator_setting(operator, name: str) -> str:
    """A TENSORKILN_* setting of the installed operator, from its container's environment."""
    (container,) = operator.pod().spec.containers
    return next(e.value for e in container.env if e.name == name)


def test_manual_edits_to_owned_deployments_are_put_back(api, operator, namespace, tmp_path):
    custom, apps, core = client.CustomObjectsApi(api), client.AppsV1Api(api), client.CoreV1Api(api)
    model = copy.deepcopy(SAMPLE)
    model["metadata"] = {"name": "resnet50", "namespace": namespace}
    model["spec"]["hardware"] = {"mode": "Auto", "include": ["NVIDIA-L4"]}
    nodes = [api.sanitize_for_serialization(n) for n in core.list_node().items]
    (target,) = select_targets(model["spec"]["hardware"], discover(nodes), nodes)
    publish_test_seed(operator.registry_uri, model, target, tmp_path)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", model)
    name = target_name("resnet50", target)
    wait_for(lambda: _exists(apps, name, namespace), what="the Deployment")
    # The operator's serving image (the chart's servingImage: spec.serving.image is unset here).
    rendered = apps.read_namespaced_deployment(name, namespace).spec.template.spec.containers[0].image
    assert rendered == operator_setting(operator, "TENSORKILN_SERVING_IMAGE")
    apps.patch_namespaced_deployment(
        name, namespace, {"spec": {"template": {"spec": {"containers": [{"name": "triton", "image": "evil:latest"}]}}}}
    )
    wait_for(
        lambda: apps.read_namespaced_deployment(name, namespace).spec.template.spec.containers[0].image == rendered,
        timeout=60,
        what="the operator to restore the Triton image",
    )


def _exists(apps, name, namespace):
    try:
        return apps.read_namespaced_deployment(name, namespace)
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise
