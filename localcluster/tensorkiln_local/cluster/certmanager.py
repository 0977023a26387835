"""cert-manager on the local cluster, in the namespace whose certificates it serves (the chart's
release namespace): its CRDs from the source of the pinned module, its controller and cainjector
(localcluster/go/cluster/cmd/certmanager: the controllers a self-signed Issuer and CA injection into webhook
configurations need) as two Deployments of the cert-manager image, under RBAC for that namespace and
the webhook configurations.

A stand-in for the cert-manager a user's cluster runs (its Helm chart and images from quay.io,
which no registry here serves): the chart's Issuer, Certificate and cainjector annotation are
served as there.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from tensorkiln_local.cluster import paths, workloads

MODULE = "github.com/cert-manager/cert-manager"
NAME = "cert-manager"
COMPONENTS = ("controller", "cainjector")
CLUSTER_ROLE = f"tensorkiln-local:{NAME}"
WEBHOOK_CONFIGURATIONS = ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"]


def crds() -> list[dict]:
    """cert-manager's CRDs, from the source of the module the binary is built from."""
    found = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", MODULE],
        cwd=paths.GO_MODULES_DIR / "cluster",
        env={**os.environ, "GOFLAGS": "-mod=mod"},
        capture_output=True,
        text=True,
        check=True,
    )
    crd_dir = Path(found.stdout.strip()) / "deploy" / "crds"
    return [yaml.safe_load(p.read_text()) for p in sorted(crd_dir.glob("*.yaml"))]


def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> dict:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs}


READ = ["get", "list", "watch"]
WRITE = [*READ, "create", "update", "patch", "delete"]


def build_objects(image: str, namespace: str) -> list[dict]:
    """ServiceAccount, RBAC and a Deployment per component, acting in `namespace` only."""
    meta = {"name": NAME, "namespace": namespace, "labels": {"app.kubernetes.io/name": NAME}}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": meta,
        "rules": [
            _rule(["cert-manager.io"], ["issuers", "certificates", "certificaterequests"], WRITE),
            _rule(
                ["cert-manager.io"],
                [
                    f"{r}/{s}"
                    for r in ("issuers", "certificates", "certificaterequests")
                    for s in ("status", "finalizers")
                ],
                WRITE,
            ),  # fmt: skip
            _rule([""], ["secrets"], WRITE),
            _rule([""], ["events"], ["create", "patch"]),
            _rule(["events.k8s.io"], ["events"], ["create", "patch"]),
        ],
    }
    cluster_role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": CLUSTER_ROLE},
        "rules": [
            # cainjector lists Certificates in every namespace (and reads only its own namespace's Secrets).
            _rule(["cert-manager.io"], ["clusterissuers", "certificates"], READ),
            # cainjector writes the CA into the caBundle of webhook configurations that ask for it.
            _rule(
                ["admissionregistration.k8s.io"],
                ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"],
                [*READ, "update", "patch"],
            ),  # fmt: skip
            _rule(["apiextensions.k8s.io"], ["customresourcedefinitions"], READ),
            _rule(["apiregistration.k8s.io"], ["apiservices"], READ),
        ],
    }
    subjects = [{"kind": "ServiceAccount", "name": NAME, "namespace": namespace}]
    bindings = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
            "subjects": subjects,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": CLUSTER_ROLE},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": cluster_role["metadata"]["name"],
            },
            "subjects": subjects,
        },
    ]
    deployments = [
        workloads.deployment(
            f"{NAME}-{component}",
            namespace,
            {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": component},
            {
                "serviceAccountName": NAME,
                "containers": [
                    {
                        "name": component,
                        "image": image,
                        # Go's flag package stops at the first argument: the flags come first.
                        "args": [f"--namespace={namespace}", component],
                        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
                    }
                ],
            },
        )
        for component in COMPONENTS
    ]
    return [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}, role, cluster_role, *bindings,
            *deployments]  # fmt: skip
