"""`tensorkiln operator run` as the chart's Deployment runs it: --peering, --all-namespaces."""

import pytest
from tensorkiln import cli, operator_runner, peering


def test_run_with_peering_joins_it_before_starting(monkeypatch):
    calls = []
    monkeypatch.setattr(peering, "join", lambda name: calls.append(("peering", name)))
    monkeypatch.setattr(operator_runner, "run", lambda namespaces, *rest: calls.append(("run", namespaces)))
    with pytest.raises(SystemExit) as done:
        cli.main(["operator", "run", "--namespace", "team-a", "--namespace", "team-b", "--peering", "tensorkiln"])
    assert done.value.code == 0
    assert calls == [("peering", "tensorkiln"), ("run", ["team-a", "team-b"])]


def test_run_without_peering_is_the_plain_standalone_run(monkeypatch):
    calls = []
    monkeypatch.setattr(peering, "join", lambda name: calls.append(("peering", name)))
    monkeypatch.setattr(operator_runner, "run", lambda namespaces, *rest: calls.append(("run", namespaces)))
    with pytest.raises(SystemExit):
        cli.main(["operator", "run", "--all-namespaces"])
    assert calls == [("run", [])]


def test_all_namespaces_and_namespace_exclude_each_other(monkeypatch):
    monkeypatch.setattr(operator_runner, "run", lambda *a: pytest.fail("must not start"))
    with pytest.raises(SystemExit) as done:
        cli.main(["operator", "run", "--all-namespaces", "--namespace", "team-a"])
    assert "exclude each other" in str(done.value.code)
