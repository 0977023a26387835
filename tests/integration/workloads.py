"""Reading what the operator did to an SLO workload (tensorkiln_local.cluster.slo_workloads)."""

from kubernetes import client
from tensorkiln_api import GROUP, VERSION


def model_object(api, namespace: str, name: str) -> dict:
    return client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, namespace, "inferencemodels", name)


def condition(model: dict, type_: str) -> dict:
    return next((c for c in model.get("status", {}).get("conditions", []) if c["type"] == type_), {})


def scale_events(api, namespace: str, name: str) -> list:
    """The operator's ScaledUp/ScaledDown Events on the model, oldest first."""
    events = client.CoreV1Api(api).list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    found = [e for e in events if e.reason in ("ScaledUp", "ScaledDown")]
    return sorted(found, key=lambda e: e.first_timestamp or e.event_time)
