"""The chart's rendered manifests are accepted by the real API server (`kubectl apply --dry-run=server`),
in a namespace under Pod Security admission's `restricted` level.

Nothing of the chart is created.
"""

import os
import subprocess

import pytest
import yaml
from kubernetes import client
from tensorkiln_local import installmanifests
from tensorkiln_local.cluster import binaries, paths

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def kubectl(api):
    return [str(binaries.ensure(("kube",)) / "kubectl"), "--kubeconfig", os.environ["KUBECONFIG"]]


@pytest.fixture
def restricted_namespace(api, namespace):
    """The test namespace under Pod Security admission's `restricted` level (warn: workloads are checked too)."""
    labels = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn")}
    client.CoreV1Api(api).patch_namespace(namespace, {"metadata": {"labels": labels}})
    return namespace


def dry_run(kubectl, rendered: str) -> str:
    result = subprocess.run(
        [*kubectl, "apply", "--dry-run=server", "-f", "-"], input=rendered, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    # Pod Security admission warns about a Deployment whose pods the namespace's level would refuse.
    assert "PodSecurity" not in result.stderr, result.stderr
    return result.stdout


def rendered_kinds(rendered: str) -> list[str]:
    return [d["kind"] for d in yaml.safe_load_all(rendered) if d]


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"webhook": {"enabled": True}},
        {
            "registry": {"kind": "s3", "s3": {"bucket": "engines", "existingSecret": "s3-credentials"}},
            "webhook": {"enabled": True, "failurePolicy": "Fail"},
        },
    ],
    ids=["defaults", "webhook", "s3-webhook"],
)
def test_chart_is_accepted_by_the_api_server(kubectl, restricted_namespace, values):
    rendered = installmanifests.template(values, namespace=restricted_namespace, include_crds=True)
    out = dry_run(kubectl, rendered)
    assert out.count("(server dry run)") == len(rendered_kinds(rendered)), out


def test_chart_watching_namespaces_is_accepted_by_the_api_server(kubectl, restricted_namespace):
    values = {"watchNamespaces": [restricted_namespace, "default"], "webhook": {"enabled": True}}
    rendered = installmanifests.template(values, namespace=restricted_namespace)
    kinds = rendered_kinds(rendered)
    assert kinds.count("Role") == 4  # the 2 watched, the webhook certificate's and the Lease's
    out = dry_run(kubectl, rendered)
    assert out.count("(server dry run)") == len(kinds), out


def test_install_manifests_are_accepted_by_the_api_server(kubectl):
    # The namespace of manifests/install does not exist here (dry-run creates nothing), so the
    # cluster-scoped part is checked: CRDs, ClusterRole, ClusterRoleBinding.
    cluster_scoped = [
        d
        for p in sorted((paths.MANIFESTS_DIR / "install").glob("*.yaml"))
        if p.name != "kustomization.yaml"
        for d in yaml.safe_load_all(p.read_text())
        if d and "namespace" not in d["metadata"]
    ]
    out = dry_run(kubectl, yaml.safe_dump_all(cluster_scoped))
    assert out.count("(server dry run)") == len(cluster_scoped), out
