"""rbac_audit on events recorded from the local cluster's audit log (rbac_audit_events.jsonl):
the chart's operator (t-5720452f) reconciling a model, and two refusals made on purpose: a
ServiceAccount listing Secrets, and one impersonating another that may not list ConfigMaps."""

from datetime import UTC, datetime
from pathlib import Path

import pytest
from tensorkiln_local import rbac
from tensorkiln_local.rbac import Permission
from tensorkiln_local.rbac_audit import NonResourceCall, Observed, compare, grants, observe, requests_since

LINES = (Path(__file__).parent / "rbac_audit_events.jsonl").read_text().splitlines()
NS = "t-5720452f"
OPERATOR = f"system:serviceaccount:{NS}:tk-{NS}-tensorkiln"
CJ = "simulated-gpu-engine-cpu-amd64-amd-avx512vnni"


def test_the_operators_calls_as_the_permissions_they_needed():
    observed = observe(LINES, OPERATOR)
    assert observed.calls == {
        Permission(NS, "tensorkiln.dev", "inferencemodels", "watch"),
        Permission(None, "", "nodes", "list"),
        Permission(NS, "", "persistentvolumeclaims", "get", "tensorkiln-registry"),
        # server-side apply of a new CompileJob: a patch answered 201, authorized as create too
        Permission(NS, "tensorkiln.dev", "compilejobs", "patch", CJ),
        Permission(NS, "tensorkiln.dev", "compilejobs", "create", CJ),
        Permission(NS, "tensorkiln.dev", "inferencemodels/status", "patch", "simulated-gpu-engine"),
        Permission(NS, "apps", "deployments/scale", "patch", CJ),
    }
    assert observed.non_resource == {NonResourceCall("get", "/api")}
    assert not observed.forbidden


def test_requests_since_count_by_verb_and_resource_without_watches():
    everything = requests_since(LINES, OPERATOR, datetime(2000, 1, 1, tzinfo=UTC))
    assert ("watch", "inferencemodels") not in everything
    assert everything[("list", "nodes")] >= 1 and everything[("patch", "inferencemodels/status")] >= 1
    assert everything[("get", "/api")] >= 1
    assert requests_since(LINES, OPERATOR, datetime(2100, 1, 1, tzinfo=UTC)) == {}


def test_refusals_are_kept_and_an_impersonated_request_is_the_impersonated_users():
    probe = observe(LINES, "system:serviceaccount:h-audit-28445:probe")
    assert probe.forbidden == probe.calls == {Permission("h-audit-28445", "", "secrets", "list")}
    assert not observe(LINES, "system:serviceaccount:h-audit-19357:probe").calls
    other = observe(LINES, "system:serviceaccount:h-audit-19357:other")
    assert other.forbidden == {Permission("h-audit-19357", "", "configmaps", "list")}


def test_compare_with_the_table_for_the_release_configuration():
    table = rbac.expected_permissions(release_namespace=NS, watch_namespaces=[NS], lease=f"tk-{NS}-tensorkiln")
    comparison = compare(observe(LINES, OPERATOR), table)
    assert comparison.not_granted == ()
    assert Permission(NS, "tensorkiln.dev", "compilejobs", "create") not in comparison.unexercised
    assert Permission(NS, "batch", "jobs", "create") in comparison.unexercised
    assert len(comparison.unexercised) == len(table) - 7  # each observed call used one permission


def test_calls_outside_the_table_and_urls_beyond_discovery_are_not_granted():
    observed = observe(LINES, OPERATOR)
    observed = Observed(observed.calls, observed.non_resource | {NonResourceCall("get", "/metrics")}, frozenset())
    table = rbac.expected_permissions(release_namespace="other", watch_namespaces=["other"], lease="tensorkiln")
    not_granted = compare(observed, table).not_granted
    assert Permission(NS, "apps", "deployments/scale", "patch", CJ) in not_granted  # another namespace's
    assert Permission(None, "", "nodes", "list") not in not_granted  # cluster-scoped
    assert NonResourceCall("get", "/metrics") in not_granted
    assert NonResourceCall("get", "/api") not in not_granted  # system:discovery grants it


def test_a_permission_covers_its_namespace_or_all_and_its_name_or_any():
    call = Permission("a", "", "secrets", "get", "s3")
    assert grants(Permission(None, "", "secrets", "get"), call)
    assert grants(Permission("a", "", "secrets", "get", "s3"), call)
    assert not grants(Permission("b", "", "secrets", "get"), call)
    assert not grants(Permission("a", "", "secrets", "get", "other"), call)
    assert not grants(Permission("a", "", "secrets", "list"), call)
    assert not grants(Permission("a", "", "secrets", "get"), Permission(None, "", "secrets", "get"))


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ('{"user": {"username": "u"}', "not JSON"),
        ('{"user": {"username": "u"}, "requestURI": "/api"}', "no verb"),
        ('{"user": {"username": "u"}, "verb": "get"}', "no requestURI"),
        ('{"verb": "get", "requestURI": "/api", "note": "u"}', "no user"),
    ],
)
def test_bad_lines_are_refused_naming_the_line_and_field(line, field):
    with pytest.raises(ValueError, match=f"audit log line 2: {field}"):
        observe(["", line], "u")
