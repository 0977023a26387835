"""The API calls the chart's operator really makes, from kube-apiserver's audit log, against
localcluster/tensorkiln_local/rbac.py: every call is in the table for the release's configuration, and
none was refused. tests/unit/test_chart.py checks that the chart grants exactly the table.

The release (fixtures: helm_release) watches its own namespace with leader election on, a
filesystem registry and the webhook off; its operator reconciles the SIMULATED workload (engine_seeds'
published SIMULATION, a cache hit: no compile runs) to Ready and then finalizes its deletion.
Rows of the table this path does not use (compile Jobs: a cache hit; HPAs: mode Operator; a
PodDisruptionBudget's deletion: replicas never drop below 2) are printed, not failed on.

Between Ready and the deletion, the operator sits a quiet minute (several resync passes) with
the model unchanged: it reads from its watch cache, so it makes no GET or LIST and, with
everything already right, no write (the leader's Lease renewals and Events aside).
"""

import time
from datetime import UTC, datetime

import pytest
from kubernetes import client
from tensorkiln_local import rbac, rbac_audit
from tensorkiln_local.cluster.cluster import AUDIT_LOG, audit_lines
from tensorkiln_local.cluster.slo_workloads import SIMULATED, deploy

from . import helm_release
from .helm_release import wait_operator_ready

chart_values, registry_volume, release, tools = (
    helm_release.chart_values,
    helm_release.registry_volume,
    helm_release.release,
    helm_release.tools,
)

pytestmark = pytest.mark.cluster
QUIET_SECONDS = 60


def test_the_chart_operator_makes_only_calls_the_rbac_table_has(
    alone, api, namespace, registry_volume, release, tmp_path
):
    assert AUDIT_LOG.exists(), f"no {AUDIT_LOG}: the cluster predates its audit policy; run tensorkiln-local cluster up"
    pod = wait_operator_ready(client.CoreV1Api(api), namespace, release)
    deploy(api, registry_volume, namespace, SIMULATED, tmp_path / "engines", ready_within=240)
    user = f"system:serviceaccount:{namespace}:{pod.spec.service_account_name}"
    time.sleep(20)  # the rollout's last status writes and watch events settle
    quiet_from = datetime.now(UTC)
    time.sleep(QUIET_SECONDS)
    quiet = rbac_audit.requests_since(audit_lines(), user, quiet_from)
    operator_log = client.CoreV1Api(api).read_namespaced_pod_log(pod.metadata.name, namespace, container="operator")
    writes_logged = [line for line in operator_log.splitlines() if '"message": "applying ' in line][-6:]
    helm_release._delete_models(api, namespace)  # the operator finalizes the model and its CompileJob

    observed = rbac_audit.observe(audit_lines(), user)
    lease = f"{release}-tensorkiln"
    table = rbac.expected_permissions(release_namespace=namespace, watch_namespaces=[namespace], lease=lease)
    comparison = rbac_audit.compare(observed, table)

    print(f"\n{len(observed.calls)} calls by {user}:")
    for call in sorted({(c.namespace or "", c.group, c.resource, c.verb) for c in observed.calls}):
        print("  ", *call)
    print("non-resource:", *sorted(f"{c.verb} {c.path}" for c in observed.non_resource))
    print("table rows not exercised:", *comparison.unexercised, sep="\n   ")
    print(f"requests in a quiet {QUIET_SECONDS} s (watches left out):", dict(quiet))
    assert not observed.forbidden, f"refused: {sorted(observed.forbidden, key=repr)}"
    assert not comparison.not_granted, (
        f"calls missing from localcluster/tensorkiln_local/rbac.py: {comparison.not_granted}"
    )
    # The run did reach the calls that matter: a model reconciled, applied and deleted.
    assert {("inferencemodels/status", "patch"), ("compilejobs", "create"), ("deployments", "create")} <= {
        (c.resource, c.verb) for c in observed.calls
    }
    steady = {call: n for call, n in quiet.items() if call[1] not in ("leases", "events")}
    assert steady == {}, (
        f"requests in a quiet {QUIET_SECONDS} s besides watches, the Lease and Events: {steady}; "
        f"the operator's last applies: {writes_logged}"
    )
