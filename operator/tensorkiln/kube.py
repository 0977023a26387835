"""Kubernetes API access shared by the operator and the local-cluster CLI.

All writes go through server-side apply under one field manager, so ownership of every
field we set is recorded by the API server and a re-apply is idempotent.
"""

from kubernetes import client, config
from kubernetes.dynamic import DynamicClient

FIELD_MANAGER = "tensorkiln"


def api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """A client from the given kubeconfig, else $KUBECONFIG / ~/.kube/config, else in-cluster."""
    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    try:
        config.load_incluster_config()
        return client.ApiClient()
    except config.ConfigException:
        return config.new_client_from_config()


def apply(dynamic: DynamicClient, obj: dict, *, subresource: str | None = None, field_manager: str = FIELD_MANAGER):
    """Server-side apply `obj` (or its status with subresource="status"); force: we own these fields."""
    resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    if subresource:
        resource = resource.subresources[subresource]
    return resource.server_side_apply(
        body=obj,
        name=obj["metadata"]["name"],
        namespace=obj["metadata"].get("namespace"),
        field_manager=field_manager,
        force_conflicts=True,
    )
