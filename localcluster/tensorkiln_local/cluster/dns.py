"""Cluster DNS: CoreDNS (built from Go modules, localcluster/go/cluster/cmd/coredns) as a Deployment in
kube-system behind the kube-dns Service at 10.96.0.10, which every kubelet names as clusterDNS.

It answers cluster names only (`*.cluster.local` and reverse lookups of cluster addresses) and
forwards nothing: the Corefile has no `forward`, so any other name fails, and no query leaves
the machine. It runs on the real nodes only (kwok's simulated nodes run nothing).
"""

from __future__ import annotations

from tensorkiln_local.cluster import network, workloads

NAMESPACE = "kube-system"
NAME = "coredns"
PORT = 1053  # unprivileged: the Service maps 53 to it
LABELS = {"k8s-app": "kube-dns"}
ROLE = f"tensorkiln-local:{NAME}"
RESOURCES = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "170Mi"}}
COREFILE = f""".:{PORT} {{
    errors
    health :8080
    ready :8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        pods insecure
        ttl 30
    }}
    cache 30
    loadbalance
}}
"""


def build_objects(image: str, node_selector: dict[str, str]) -> list[dict]:
    """ServiceAccount, RBAC, Corefile, Deployment and the kube-dns Service."""
    meta = {"name": NAME, "namespace": NAMESPACE, "labels": LABELS}
    probe = {"periodSeconds": 5, "timeoutSeconds": 2, "failureThreshold": 3}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": ROLE},
            "rules": [
                {"apiGroups": [""], "resources": ["services", "pods", "namespaces"], "verbs": ["list", "watch"]},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": ROLE},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": f"tensorkiln-local:{NAME}",
            },
            "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
        },
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"Corefile": COREFILE}},
        workloads.deployment(
            NAME,
            NAMESPACE,
            LABELS,
            {
                "serviceAccountName": NAME,
                "nodeSelector": node_selector,
                "priorityClassName": "system-cluster-critical",
                "dnsPolicy": "Default",
                "containers": [
                    {
                        "name": NAME,
                        "image": image,
                        "args": ["-conf", "/etc/coredns/Corefile"],
                        "ports": [
                            {"name": "dns", "containerPort": PORT, "protocol": "UDP"},
                            {"name": "dns-tcp", "containerPort": PORT, "protocol": "TCP"},
                        ],
                        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, **probe},
                        "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}, **probe},
                        "resources": RESOURCES,
                        "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}],
                    }
                ],
                "volumes": [{"name": "config", "configMap": {"name": NAME}}],
            },
        ),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kube-dns", "namespace": NAMESPACE, "labels": LABELS},
            "spec": {
                "selector": LABELS,
                "clusterIP": network.CLUSTER_DNS,
                "ports": [
                    {"name": "dns", "port": 53, "targetPort": "dns", "protocol": "UDP"},
                    {"name": "dns-tcp", "port": 53, "targetPort": "dns-tcp", "protocol": "TCP"},
                ],
            },
        },
    ]
