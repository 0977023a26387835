"""The API calls the operator really makes, read from kube-apiserver's audit log, against rbac.py's table.

The local cluster's API server logs ServiceAccounts' requests at Metadata level (localcluster/
audit-policy.yaml). `observe` turns one user's audit events into the calls RBAC authorized or
refused; `compare` checks them with the table's permissions for one chart configuration
(`rbac.expected_permissions`): a call outside them is refused (403) wherever the chart's RBAC
is all the operator has, and a permission no call used is one this run did not exercise.
tests/integration/test_rbac_audit.py does that for the chart's operator reconciling a model.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from tensorkiln_local.rbac import Permission

# Kubernetes' bootstrap ClusterRole system:discovery grants these paths (`get`) to every
# authenticated user; the chart grants no other non-resource URL. A trailing * is a prefix.
DISCOVERY_PATHS = (
    "/api",
    "/api/*",
    "/apis",
    "/apis/*",
    "/healthz",
    "/livez",
    "/openapi",
    "/openapi/*",
    "/readyz",
    "/version",
    "/version/",
)


@dataclass(frozen=True, order=True)
class NonResourceCall:
    verb: str
    path: str


Call = Permission | NonResourceCall


@dataclass(frozen=True)
class Observed:
    calls: frozenset[Permission]  # resource requests, as the permission each needed
    non_resource: frozenset[NonResourceCall]
    forbidden: frozenset[Call]  # answered 403


@dataclass(frozen=True)
class Comparison:
    not_granted: tuple[Call, ...]  # made, but outside the permissions: refused under the chart's RBAC
    unexercised: tuple[Permission, ...]  # permissions no observed call used


def _field(event: dict, path: str, number: int):
    value = event
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            raise ValueError(f"audit log line {number}: no {path}")
        value = value[key]
    return value


def _calls(event: dict, number: int) -> list[Call]:
    verb = _field(event, "verb", number)
    ref = event.get("objectRef")
    if not ref or "resource" not in ref:
        return [NonResourceCall(verb, _field(event, "requestURI", number).split("?", 1)[0])]
    resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
    call = Permission(ref.get("namespace") or None, ref.get("apiGroup", ""), resource, verb, ref.get("name") or None)
    # A patch or update that created its object (server-side apply of a new one: 201) was also
    # authorized as `create` by the API server.
    if verb in ("patch", "update") and event.get("responseStatus", {}).get("code") == 201:
        return [call, Permission(call.namespace, call.group, call.resource, "create", call.name)]
    return [call]


def observe(lines: Iterable[str], username: str) -> Observed:
    """The calls `username` made, from audit log lines (audit.k8s.io/v1 Events, one JSON object a line).

    An impersonated request counts as the impersonated user's, as RBAC authorizes it."""
    calls: set[Permission] = set()
    non_resource: set[NonResourceCall] = set()
    forbidden: set[Call] = set()
    for number, line in enumerate(lines, 1):
        # Most of a log is other users': skip them unparsed (JSON writes a ServiceAccount's name as is).
        if username not in line:
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"audit log line {number}: not JSON ({exc})") from exc
        user = event.get("impersonatedUser") or _field(event, "user", number)
        if user.get("username") != username:
            continue
        made = _calls(event, number)
        for call in made:
            (calls if isinstance(call, Permission) else non_resource).add(call)
        if event.get("responseStatus", {}).get("code") == 403:
            forbidden.update(made)
    return Observed(frozenset(calls), frozenset(non_resource), frozenset(forbidden))


def grants(permission: Permission, call: Permission) -> bool:
    """Whether the permission covers the call (a cluster-wide one covers every namespace)."""
    return (
        (permission.group, permission.resource, permission.verb) == (call.group, call.resource, call.verb)
        and permission.namespace in (None, call.namespace)
        and permission.name in (None, call.name)
    )


def _discovery(call: NonResourceCall) -> bool:
    return call.verb == "get" and any(
        call.path.startswith(path[:-1]) if path.endswith("*") else call.path == path for path in DISCOVERY_PATHS
    )


def compare(observed: Observed, permissions: set[Permission]) -> Comparison:
    not_granted = [call for call in observed.calls if not any(grants(p, call) for p in permissions)]
    not_granted += [call for call in observed.non_resource if not _discovery(call)]
    unexercised = [p for p in permissions if not any(grants(p, call) for call in observed.calls)]
    return Comparison(tuple(sorted(not_granted, key=repr)), tuple(sorted(unexercised, key=repr)))


def requests_since(
    lines: Iterable[str], username: str, since: datetime, until: datetime | None = None
) -> Counter[tuple[str, str]]:
    """(verb, resource) -> how many requests `username` made from `since` (to `until`), watches
    left out (a watch is the cache being kept, not a read)."""
    counted: Counter[tuple[str, str]] = Counter()
    for number, line in enumerate(lines, 1):
        if username not in line:
            continue
        event = json.loads(line)
        user = event.get("impersonatedUser") or _field(event, "user", number)
        if user.get("username") != username or event.get("stage") != "ResponseComplete":
            continue
        received = datetime.fromisoformat(_field(event, "requestReceivedTimestamp", number))
        if received < since or (until is not None and received > until):
            continue
        call = _calls(event, number)[0]
        if call.verb != "watch":
            counted[(call.verb, call.resource if isinstance(call, Permission) else call.path)] += 1
    return counted
