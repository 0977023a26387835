"""`tensorkiln-operator run` as the chart's Deployment runs it: --peering, --all-namespaces."""

import pytest
from tensorkiln import cli, operator_runner


def recorded(monkeypatch) -> list:
    calls = []
    monkeypatch.setattr(operator_runner, "run", lambda *args: calls.append(args))
    return calls


def test_run_with_peering_passes_the_namespaces_and_the_peering_object(monkeypatch):
    calls = recorded(monkeypatch)
    with pytest.raises(SystemExit) as done:
        cli.main(["run", "--namespace", "team-a", "--namespace", "team-b", "--peering", "tensorkiln"])
    assert done.value.code == 0
    assert calls == [(["team-a", "team-b"], None, "tensorkiln")]


def test_run_without_peering_is_the_plain_standalone_run(monkeypatch):
    calls = recorded(monkeypatch)
    with pytest.raises(SystemExit):
        cli.main(["run", "--all-namespaces", "--log-format", "plain"])
    assert calls == [([], "plain", None)]


def test_all_namespaces_and_namespace_exclude_each_other(monkeypatch):
    monkeypatch.setattr(operator_runner, "run", lambda *a: pytest.fail("must not start"))
    with pytest.raises(SystemExit) as done:
        cli.main(["run", "--all-namespaces", "--namespace", "team-a"])
    assert "exclude each other" in str(done.value.code)
