"""The API calls the chart's operator really makes, from kube-apiserver's audit log, against
operator/tensorkiln/rbac.py: every call is in the table for the release's configuration, and
none was refused. tests/unit/test_chart.py checks that the chart grants exactly the table.

The release (fixtures: helm_release) watches its own namespace with peering on, a filesystem
registry and the webhook off; its operator reconciles the SIMULATED workload (engine_seeds'
published SIMULATION, a cache hit: no compile runs) to Ready and then finalizes its deletion.
Rows of the table this path does not use (compile Jobs: a cache hit; HPAs: mode Operator; a
PodDisruptionBudget's deletion: replicas never drop below 2) are printed, not failed on.
"""

import pytest
from kubernetes import client
from tensorkiln import rbac, rbac_audit
from tensorkiln.localcluster.cluster import AUDIT_LOG
from tensorkiln.localcluster.slo_workloads import SIMULATED, deploy

from . import helm_release
from .helm_release import wait_operator_ready

chart_values, registry_volume, release, tools = (
    helm_release.chart_values,
    helm_release.registry_volume,
    helm_release.release,
    helm_release.tools,
)

pytestmark = pytest.mark.cluster


def audit_lines() -> list[str]:
    """Complete lines of the audit log and its rotated backup (the last line may be mid-write)."""
    lines = []
    for path in sorted(AUDIT_LOG.parent.glob("audit*.log")):
        text = path.read_text()
        lines += text[: text.rfind("\n") + 1].splitlines()
    return lines


def test_the_chart_operator_makes_only_calls_the_rbac_table_has(
    alone, api, namespace, registry_volume, release, tmp_path
):
    assert AUDIT_LOG.exists(), f"no {AUDIT_LOG}: the cluster predates its audit policy; run tensorkiln cluster up"
    pod = wait_operator_ready(client.CoreV1Api(api), namespace, release)
    deploy(api, f"file://{registry_volume}/engines", namespace, SIMULATED, tmp_path / "engines", ready_within=240)
    helm_release._delete_models(api, namespace)  # the operator finalizes the model and its CompileJob

    user = f"system:serviceaccount:{namespace}:{pod.spec.service_account_name}"
    observed = rbac_audit.observe(audit_lines(), user)
    table = rbac.expected_permissions(release_namespace=namespace, watch_namespaces=[namespace], peering=True)
    comparison = rbac_audit.compare(observed, table)

    print(f"\n{len(observed.calls)} calls by {user}:")
    for call in sorted({(c.namespace or "", c.group, c.resource, c.verb) for c in observed.calls}):
        print("  ", *call)
    print("non-resource:", *sorted(f"{c.verb} {c.path}" for c in observed.non_resource))
    print("table rows not exercised:", *comparison.unexercised, sep="\n   ")
    assert not observed.forbidden, f"refused: {sorted(observed.forbidden, key=repr)}"
    assert not comparison.not_granted, f"calls missing from operator/tensorkiln/rbac.py: {comparison.not_granted}"
    # The run did reach the calls that matter: a model reconciled, applied and deleted.
    assert {("inferencemodels/status", "patch"), ("compilejobs", "create"), ("deployments", "create")} <= {
        (c.resource, c.verb) for c in observed.calls
    }
