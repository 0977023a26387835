"""The shape every Deployment the local cluster runs for itself shares (CoreDNS, cert-manager, the
model store): one replica on a real node (kwok's nodes run nothing), non-root, its containers with
no privilege, capability or writable root filesystem (pure)."""

from tensorkiln_local.cluster.nodes import LOCAL_NODE_LABEL

RESTRICTED = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}


def deployment(name: str, namespace: str, labels: dict[str, str], pod_spec: dict) -> dict:
    """A Deployment of `pod_spec` (its containers made RESTRICTED) on the real nodes."""
    containers = [
        {**c, "securityContext": {**RESTRICTED, **c.get("securityContext", {})}} for c in pod_spec["containers"]
    ]
    spec = {
        "nodeSelector": {LOCAL_NODE_LABEL: "true"},
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        **pod_spec,
        "containers": containers,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }
