"""TensorKiln's images as the real node runs them: pulled from the local registry by digest, each as
the numeric user its Dockerfile declares, with no compiler or test dependency inside.

`make test` builds those the local cluster runs (cached by content) and pushes them at
`install`; here a Pod per image runs a probe command in it on local-0 and the test reads its log.
"""

import json

import pytest
from kubernetes import client
from tensorkiln_local.cluster import paths, registry
from tensorkiln_local.images import build as images
from tensorkiln_local.images.catalog import LOCAL_PRODUCT

from .helpers import wait_for

pytestmark = pytest.mark.cluster

# Python: its modules and a compiler on PATH; the shell may be absent from a minimal image.
PROBE = (
    "import os, shutil, importlib.util as u; "
    "print('uid', os.getuid()); "
    "print('compilers', [c for c in ('gcc', 'cc', 'g++', 'clang') if shutil.which(c)]); "
    "print('test-modules', [m for m in ('pytest', 'hypothesis', 'ruff') if u.find_spec(m)]); "
    "print('packages', sorted(m for m in ('tensorkiln_api', 'tensorkiln', 'tensorkiln_compiler', 'tensorkiln_serving', "
    "'tensorkiln_client', 'tensorkiln_local') if u.find_spec(m)))"
)
# The deployables each image holds (its Dockerfile installs their distributions, and no other's).
PACKAGES = {
    "operator": ["tensorkiln", "tensorkiln_api"],
    "compiler": ["tensorkiln_api", "tensorkiln_compiler", "tensorkiln_serving"],
    "serving": [],
    "engine-fetch": ["tensorkiln_api", "tensorkiln_serving"],
}


def _pushed() -> dict[str, images.Pushed]:
    return images.pushed(registry.HOST)


def run_in(api, namespace: str, image: str, name: str, command: list[str]) -> str:
    """Run `command` in a pod of `image` on local-0; its log once it succeeded."""
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "nodeSelector": {"tensorkiln.dev/local-node": "true"},
                "containers": [{"name": "probe", "image": image, "command": command}],
            },
        },
    )

    def finished():
        pod = core.read_namespaced_pod(name, namespace)
        return pod if pod.status.phase in ("Succeeded", "Failed") else None

    pod = wait_for(finished, timeout=180, what=f"pod {name} to finish")
    log = core.read_namespaced_pod_log(name, namespace)
    assert pod.status.phase == "Succeeded", log
    return log


def test_the_compiler_builds_with_the_runtimes_the_serving_image_serves_with(api, namespace):
    """One runtime version from compile to serve: the serving image's native backends and the compiler
    image's Python runtimes are the versions serving/triton_backends/r24.10.json pins."""
    pins = json.loads((paths.REPO_ROOT / "serving" / "triton_backends" / "r24.10.json").read_text())
    pushed = _pushed()
    versions = run_in(api, namespace, pushed["compiler"].pinned, "compiler-runtimes", [
        "python3", "-c", "import onnxruntime, openvino; print(onnxruntime.__version__, openvino.get_version())"])  # fmt: skip
    onnxruntime_version, openvino_version = versions.split()
    assert onnxruntime_version == pins["onnxruntime"]["version"]
    assert openvino_version.startswith(pins["openvino"]["version"])
    backends = run_in(api, namespace, pushed["serving"].pinned, "serving-backends", [
        "python3", "-c", "import os; d = '/opt/tritonserver/backends'; "
        "print(*sorted(f'{b}/{f}' for b in os.listdir(d) for f in os.listdir(f'{d}/{b}')))"])  # fmt: skip
    listed = set(backends.split())
    assert {
        "onnxruntime/libtriton_onnxruntime.so",
        "openvino/libtriton_openvino.so",
        "python/libtriton_python.so",
    } <= listed
    assert f"onnxruntime/libonnxruntime.so.{pins['onnxruntime']['version']}" in listed


@pytest.mark.parametrize("image", LOCAL_PRODUCT, ids=lambda i: i.name)  # what `install` pushes
def test_image_runs_as_its_user_with_its_own_packages_and_no_compilers_or_test_dependencies(api, namespace, image):
    pushed = _pushed().get(image.name)
    assert pushed, f"{image.name} was not pushed to {registry.HOST}: run `tensorkiln-local install`"
    log = run_in(api, namespace, pushed.pinned, f"probe-{image.name}", ["python3", "-c", PROBE])
    pod = client.CoreV1Api(api).read_namespaced_pod(f"probe-{image.name}", namespace)
    assert pod.status.container_statuses[0].image_id.endswith(pushed.digest), "pulled by the pushed digest"
    lines = dict(line.split(" ", 1) for line in log.strip().splitlines())
    assert lines == {"uid": image.user, "compilers": "[]", "test-modules": "[]", "packages": str(PACKAGES[image.name])}
