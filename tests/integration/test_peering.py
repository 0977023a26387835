"""Two operators joined to one kopf peering object (what the chart's Deployment does with
--peering) never act at once, and the one left takes over when the other stops.

kopf freezes every operator that sees a live peer of the same priority; the operator's own resync
loop reads the same peering object and freezes with it (tensorkiln.peering). Both operators watch
only this test's namespace; the session's cluster-wide test operator is stopped meanwhile (`alone`).
"""

import os
import signal
import time

import pytest
from kubernetes import client
from tensorkiln_api import GROUP, VERSION
from tensorkiln_local.cluster import paths

from .conftest import Operator
from .helpers import wait_for

pytestmark = pytest.mark.cluster
PEERING = "tensorkiln"
STAGED = paths.SAMPLE_MODELS / "rapidocr" / "ch_ppocr_mobile_v2.0_cls_infer.onnx"


def model(namespace: str, name: str) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "InferenceModel",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"source": {"uri": f"file://{STAGED}"}, "hardware": {"mode": "Auto", "include": ["NVIDIA-H100*"]}},
    }


@pytest.fixture
def peered(api, namespace, kopf_peering_crds, tmp_path):
    """Two operators for `namespace`, both joined to its KopfPeering; models deleted before they stop."""
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(
        "kopf.dev",
        "v1",
        namespace,
        "kopfpeerings",
        {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": PEERING}},
    )
    operators = [
        Operator(
            tmp_path / f"operator-{which}.log",
            f"file://{tmp_path / 'registry'}",
            args=["--namespace", namespace, "--peering", PEERING],
            env={"TENSORKILN_LOG_FORMAT": "full"},
        )
        for which in "ab"
    ]
    yield operators
    try:
        for item in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels")["items"]:
            custom.delete_namespaced_custom_object(
                GROUP, VERSION, namespace, "inferencemodels", item["metadata"]["name"]
            )
        wait_for(
            lambda: not custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels")["items"],
            timeout=120,
            what="the models' finalizers removed by the operator left",
        )
    finally:
        for operator in operators:
            operator.kill()


def peers(api, namespace) -> dict:
    body = client.CustomObjectsApi(api).get_namespaced_custom_object(
        "kopf.dev", "v1", namespace, "kopfpeerings", PEERING
    )
    return body.get("status") or {}


def logged(operator: Operator, text: str, timeout: float = 60) -> None:
    try:
        wait_for(lambda: text in operator.log(), timeout=timeout, what=text)
    except pytest.fail.Exception:
        pytest.fail(f"{operator.log_path.name} never said {text!r}:\n{operator.log()[-4000:]}")


def status_of(api, namespace, name) -> dict:
    body = client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", name)
    return body.get("status") or {}


def test_two_peered_operators_never_act_at_once_and_the_one_left_takes_over(alone, api, namespace, peered):
    custom = client.CustomObjectsApi(api)
    first, second = peered
    first.start()
    wait_for(
        lambda: len(peers(api, namespace)) == 1,
        timeout=60,
        what="the first operator in the peering object",
    )
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", model(namespace, "before"))
    wait_for(
        lambda: status_of(api, namespace, "before").get("observedGeneration"),
        timeout=60,
        what="the first operator to act alone",
    )

    second.start()
    wait_for(
        lambda: len(peers(api, namespace)) == 2,
        timeout=60,
        what="the second operator in the peering object",
    )
    for operator in peered:
        logged(operator, "Possibly conflicting operators with the same priority")  # kopf pauses its handlers
        logged(operator, "resync paused in favour of")

    # While both run, neither acts: not kopf's handlers, not the resync loop (5 s passes).
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", model(namespace, "during"))
    time.sleep(20)
    assert status_of(api, namespace, "during") == {}, "an operator acted while its peer was alive"
    assert not [
        j
        for j in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "compilejobs")["items"]
        if j["spec"]["modelName"] == "during"
    ]

    # A clean stop leaves the peering object; the second operator resumes and converges the model.
    os.killpg(first.proc.pid, signal.SIGTERM)
    first.proc.wait(timeout=60)
    wait_for(
        lambda: len(peers(api, namespace)) == 1, timeout=30, what="the stopped operator to leave the peering object"
    )
    wait_for(
        lambda: status_of(api, namespace, "during").get("observedGeneration"),
        timeout=60,
        what="the second operator to take over",
    )
    logged(second, "Resuming operations after the pause")  # kopf's handlers
    logged(second, "resync resumed")
