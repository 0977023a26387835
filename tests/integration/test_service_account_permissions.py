"""`kubectl auth can-i --list` for the operator's ServiceAccount (the session's installed release:
`tensorkiln` in tensorkiln-system, watching every namespace, leader election on, the webhook off)
and for the ServiceAccount compile and Triton pods run as, against the tables of docs/permissions.md.

Each answer is compared as a set of (resource, non-resource URL, resource name, verb) grants: the
operator's, less what every authenticated user may do, must be the operator's tables exactly; a
workload namespace's `default` ServiceAccount must have what every authenticated user has, no more.
"""

import os
import re
import subprocess
from pathlib import Path

import pytest
from tensorkiln_local import install
from tensorkiln_local.cluster import binaries

pytestmark = pytest.mark.cluster
DOC = Path(__file__).resolve().parents[2] / "docs" / "permissions.md"
Grant = tuple[str, str, str, str]


def doc_tables() -> dict[str, set[Grant]]:
    """docs/permissions.md's tables, by the heading above each, as grants."""
    tables: dict[str, set[Grant]] = {}
    heading = None
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            heading = line[3:].strip()
        elif line.startswith("| ") and not line.startswith("| Resource ") and heading:
            resource, urls, names, verbs = (cell.strip() for cell in line.strip("|").split("|"))
            tables.setdefault(heading, set()).update(
                (resource, url, name, verb)
                for url in (urls.split(", ") if urls else [""])
                for name in (names.split(", ") if names else [""])
                for verb in verbs.split()
            )
    return tables


def can_i(namespace: str, account_namespace: str, account: str) -> set[Grant]:
    """The API server's `kubectl auth can-i --list` in `namespace` for a ServiceAccount, with the
    groups its token would carry."""
    kubectl = str(binaries.ensure(("kube",)) / "kubectl")
    user = f"system:serviceaccount:{account_namespace}:{account}"
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{account_namespace}", "system:authenticated"]
    command = [kubectl, "--kubeconfig", os.environ["KUBECONFIG"], "auth", "can-i", "--list", "-n", namespace,
               f"--as={user}", *(f"--as-group={g}" for g in groups)]  # fmt: skip
    lines = subprocess.run(command, capture_output=True, text=True, check=True).stdout.splitlines()
    header = lines[0]
    starts = [header.index(title) for title in ("Non-Resource URLs", "Resource Names", "Verbs")]
    grants = set()
    for line in lines[1:]:
        resource, urls, names, verbs = (line[a:b].strip() for a, b in zip([0, *starts], [*starts, None]))
        listed = [re.fullmatch(r"\[(.*)\]", cell).group(1) for cell in (urls, names, verbs)]
        grants |= {
            (resource, url, name, verb)
            for url in (listed[0].split() or [""])
            for name in (listed[1].split() or [""])
            for verb in listed[2].split()
        }
    return grants


def test_what_each_service_account_may_do_is_the_documented_table(operator, namespace):
    tables = doc_tables()
    everyone = tables["Every authenticated user"]
    watched = tables["The operator, in a namespace it watches"]
    own = tables["The operator, in its own namespace"]
    account = install.RELEASE  # the chart's ServiceAccount is the release's full name: "tensorkiln"

    in_watched = can_i(namespace, install.NAMESPACE, account)
    assert everyone <= in_watched
    assert sorted(in_watched - everyone) == sorted(watched), "the operator in a watched namespace"
    in_own = can_i(install.NAMESPACE, install.NAMESPACE, account)
    assert sorted(in_own - everyone) == sorted(watched | own), "the operator in its own namespace"
    # Compile and Triton pods: their namespace's default ServiceAccount, granted nothing of its own.
    assert sorted(can_i(namespace, namespace, "default")) == sorted(everyone), "a workload namespace's default"
