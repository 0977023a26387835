"""`tensorkiln-operator run` as the chart's Deployment runs it: leader election, --all-namespaces."""

import pytest
from tensorkiln import cli, operator_runner
from tensorkiln.leadership import Timings


def recorded(monkeypatch) -> list:
    calls = []
    monkeypatch.setattr(operator_runner, "run", lambda *args: calls.append(args))
    return calls


def test_run_with_leader_election_passes_the_namespaces_the_lease_and_its_timings(monkeypatch):
    calls = recorded(monkeypatch)
    with pytest.raises(SystemExit) as done:
        cli.main(["run", "--namespace", "team-a", "--namespace", "team-b", "--leader-election-lease", "tk",
                  "--leader-election-namespace", "tk-system", "--lease-duration", "15", "--renew-deadline", "10"])  # fmt: skip
    assert done.value.code == 0
    assert calls == [(["team-a", "team-b"], None, "tk", "tk-system", Timings(15, 10, 2))]


def test_run_without_leader_election_is_the_plain_standalone_run(monkeypatch):
    calls = recorded(monkeypatch)
    with pytest.raises(SystemExit):
        cli.main(["run", "--all-namespaces", "--log-format", "plain"])
    assert calls == [([], "plain", None, None, Timings())]


def test_timings_the_election_cannot_keep_are_refused_by_name(monkeypatch):
    monkeypatch.setattr(operator_runner, "run", lambda *a: pytest.fail("must not start"))
    with pytest.raises(SystemExit) as done:
        cli.main(["run", "--leader-election-lease", "tk", "--lease-duration", "6", "--renew-deadline", "6"])
    assert "leaseDurationSeconds must exceed renewDeadlineSeconds" in str(done.value.code)


def test_all_namespaces_and_namespace_exclude_each_other(monkeypatch):
    monkeypatch.setattr(operator_runner, "run", lambda *a: pytest.fail("must not start"))
    with pytest.raises(SystemExit) as done:
        cli.main(["run", "--all-namespaces", "--namespace", "team-a"])
    assert "exclude each other" in str(done.value.code)
