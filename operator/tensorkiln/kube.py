"""Kubernetes API access shared by the operator and the local-cluster CLI.

All writes go through server-side apply under one field manager, so ownership of every
field we set is recorded by the API server and a re-apply is idempotent.
"""

import os
from pathlib import Path

from kubernetes import client, config
from kubernetes.config.incluster_config import InClusterConfigLoader
from kubernetes.dynamic import DynamicClient

FIELD_MANAGER = "tensorkiln"
# Where a pod's ServiceAccount token, CA and namespace are.
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def service_account_dir() -> Path:
    return SERVICE_ACCOUNT_DIR


def load_incluster(configuration: client.Configuration | None = None) -> None:
    """kubernetes.config.load_incluster_config, reading the token and CA from service_account_dir()
    (the token is re-read every minute, so a renewed one is used); ConfigException outside a pod.
    Without a configuration it sets the client's default, as load_incluster_config does."""
    directory = service_account_dir()
    loader = InClusterConfigLoader(token_filename=str(directory / "token"), cert_filename=str(directory / "ca.crt"))
    loader.load_and_set(configuration)


def api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """A client from the given kubeconfig, else in-cluster (the pod's ServiceAccount), else
    $KUBECONFIG / ~/.kube/config."""
    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    try:
        load_incluster()
        return client.ApiClient()
    except config.ConfigException:  # $KUBECONFIG read now: the library reads it once, when imported
        return config.new_client_from_config(config_file=os.environ.get("KUBECONFIG"))


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
