"""A wrong image in the chart's values: the compile pod cannot pull it, and the InferenceModel says so,
naming the image and the registry's answer, instead of "Compiling" (a release of its own, helm_release).
"""

import copy

import pytest
from kubernetes import client
from tensorkiln_api import GROUP, VERSION
from tensorkiln_local.cluster import registry

from . import helm_release
from .helpers import wait_for
from .test_serving_local import SAMPLE

# The shared fixtures, found by pytest as this module's attributes.
registry_volume, release, tools = helm_release.registry_volume, helm_release.release, helm_release.tools

pytestmark = pytest.mark.cluster
WRONG = f"{registry.HOST}/tensorkiln/compiler:no-such-tag"


@pytest.fixture
def chart_values() -> dict:
    return {"compilerImage": WRONG}


def test_a_compiler_image_that_cannot_be_pulled_is_the_models_reason(alone, api, namespace, release):
    helm_release.wait_operator_ready(client.CoreV1Api(api), namespace, release)
    model = copy.deepcopy(SAMPLE)
    model["metadata"] = {"name": "ocr-wrong-image", "namespace": namespace}
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", model)

    def refused() -> dict | None:
        found = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", "ocr-wrong-image")
        ready = next((c for c in found.get("status", {}).get("conditions", []) if c["type"] == "Ready"), {})
        return ready if ready.get("reason") in ("ImagePullBackOff", "ErrImagePull") else None

    ready = wait_for(refused, timeout=180, interval=2, what="the model to name the image pull failure")
    assert WRONG in ready["message"] and "not found" in ready["message"], ready["message"]
    (compile_job,) = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "compilejobs")["items"]
    compiled = next(c for c in compile_job["status"]["conditions"] if c["type"] == "Compiled")
    assert compiled["reason"] in ("ImagePullBackOff", "ErrImagePull") and WRONG in compiled["message"]
