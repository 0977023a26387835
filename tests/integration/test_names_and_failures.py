"""Names, ownership and failures on the real API server: two models whose old derived names met,
an object another owner holds, names no derived object can carry, an API error in an apply, and an
owned object dropped when the spec no longer wants it.

The models serve the SIMULATED fixed-service-time engine (slo_workloads.SIMULATED, published to the
registry first, so no compile runs): a simulation of a GPU-bound engine that computes nothing.
"""

import dataclasses
import time

import pytest
from kubernetes import client
from tensorkiln.builders.serving import target_name
from tensorkiln_api import GROUP, VERSION
from tensorkiln_local.cluster.slo_workloads import SIMULATED, Workload, deploy, start

from .helpers import wait_for
from .workloads import condition, model_object

pytestmark = [pytest.mark.cluster, pytest.mark.serving]


def named(name: str) -> Workload:
    return dataclasses.replace(SIMULATED, name=name)


def ready(api, namespace, name) -> dict:
    return condition(model_object(api, namespace, name), "Ready")


def test_the_models_whose_derived_names_met_now_serve_side_by_side(api, operator, namespace, tmp_path):
    # Before the naming scheme, model `x`'s per-target Service was `x-<class>`, the model Service
    # of a second model named `x-<class>`: the two rewrote it in turn, each resync.
    first = named("x")
    target = start(api, operator.registry_uri, namespace, first, tmp_path / "x")
    second = named(f"x-{target.name}")
    deploy(api, operator.registry_uri, namespace, second, tmp_path / "second", ready_within=240)
    wait_for(lambda: ready(api, namespace, "x").get("status") == "True", timeout=240, what="x Ready")
    core = client.CoreV1Api(api)
    services = {s.metadata.name: s for s in core.list_namespaced_service(namespace).items}
    assert set(services) == {"x", target_name("x", target), second.name, target_name(second.name, target)}
    versions = {name: s.metadata.resource_version for name, s in services.items()}
    time.sleep(15)  # three resyncs of the test operator (5 s)
    again = {s.metadata.name: s.metadata.resource_version for s in core.list_namespaced_service(namespace).items}
    assert again == versions  # nothing rewritten in a loop
    for name in ("x", second.name):  # each model Service selects its own model's pods only
        assert services[name].spec.selector["tensorkiln.dev/model"] == name


def test_an_object_another_owner_holds_is_never_overwritten(api, operator, namespace, tmp_path):
    core = client.CoreV1Api(api)
    squatter = {
        "metadata": {"name": "squatted", "labels": {"team": "other"}},
        "spec": {"selector": {"team": "other"}, "ports": [{"port": 80}]},
    }
    core.create_namespaced_service(namespace, squatter)
    before = core.read_namespaced_service("squatted", namespace).metadata.resource_version
    start(api, operator.registry_uri, namespace, named("squatted"), tmp_path)
    found = wait_for(
        lambda: (c := ready(api, namespace, "squatted")).get("reason") == "NameConflict" and c,
        timeout=240,
        what="Ready=False NameConflict",
    )
    assert found["status"] == "False"
    assert f"Service {namespace}/squatted is controlled by no controller" in found["message"], found
    time.sleep(10)
    assert core.read_namespaced_service("squatted", namespace).metadata.resource_version == before
    # The name freed, the model takes it and serves.
    core.delete_namespaced_service("squatted", namespace)
    wait_for(lambda: ready(api, namespace, "squatted").get("status") == "True", timeout=120, what="Ready")


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("m" * 45, "metadata.name: must be at most 44 characters"),
        ("resnet.v2", "metadata.name: must be a DNS-1035 label"),
        ("a--b", "metadata.name: must not contain '--'"),
    ],
)
def test_names_no_derived_object_can_carry_are_refused_by_the_api_server(api, namespace, name, says):
    custom = client.CustomObjectsApi(api)
    with pytest.raises(client.ApiException) as refused:
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, "inferencemodels", named(name).manifest(namespace)
        )
    assert refused.value.status == 422 and says in refused.value.body, refused.value.body


def test_an_api_error_in_an_apply_reaches_status_once_and_the_model_recovers(api, operator, namespace, tmp_path):
    core = client.CoreV1Api(api)
    quota = {"metadata": {"name": "no-services"}, "spec": {"hard": {"services": "0"}}}
    core.create_namespaced_resource_quota(namespace, quota)
    wait_for(lambda: core.read_namespaced_resource_quota("no-services", namespace).status.hard, what="quota")
    log_before = len(operator.log())
    start(api, operator.registry_uri, namespace, named("quota-bound"), tmp_path)
    found = wait_for(
        lambda: (c := ready(api, namespace, "quota-bound")).get("reason") == "ReconcileError" and c,
        timeout=240,
        what="Ready=False ReconcileError",
    )
    # The API's own words, and the object it refused.
    assert f"Service {namespace}/quota-bound--" in found["message"], found
    assert "403 Forbidden" in found["message"] and "exceeded quota: no-services" in found["message"], found
    time.sleep(30)  # six resyncs: backoff, one line per try, the traceback at most once
    grown = operator.log()[log_before:]
    about = [line for line in grown.splitlines() if "quota-bound" in line]
    assert sum("Traceback" in line for line in about) <= 1, about[-5:]  # other tests' failures are theirs
    assert grown.count("reconcile of InferenceModel " + f"{namespace}/quota-bound failed") <= 6, grown[-3000:]
    warnings = [
        e
        for e in core.list_namespaced_event(namespace, field_selector="involvedObject.name=quota-bound").items
        if e.reason == "ReconcileError"
    ]
    assert len(warnings) == 1 and warnings[0].type == "Warning", [e.message for e in warnings]
    core.delete_namespaced_resource_quota("no-services", namespace)
    wait_for(lambda: ready(api, namespace, "quota-bound").get("status") == "True", timeout=360, what="recovered")


def test_the_hpa_goes_when_the_mode_no_longer_wants_it(api, operator, namespace, tmp_path):
    workload = named("moded")
    deployment = deploy(api, operator.registry_uri, namespace, workload, tmp_path, ready_within=240, mode="HPA")
    autoscaling = client.AutoscalingV2Api(api)
    assert autoscaling.read_namespaced_horizontal_pod_autoscaler(deployment, namespace).spec.max_replicas == 8
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "inferencemodels", "moded", {"spec": {"slo": {"mode": "Operator"}}}
    )

    def gone():
        try:
            autoscaling.read_namespaced_horizontal_pod_autoscaler(deployment, namespace)
        except client.ApiException as error:
            return error.status == 404
        return False

    wait_for(gone, timeout=60, what="the HPA deleted")
