"""`tensorkiln operator run` as the chart's Deployment runs it: --peering, --all-namespaces."""

import kopf
import pytest
from tensorkiln import cli, incluster, operator_runner


def test_join_peering_turns_kopf_from_standalone_to_mandatory_peering():
    registry = kopf.OperatorRegistry()
    incluster.join_peering("tensorkiln", registry=registry)
    (handler,) = registry._activities.get_all_handlers()  # kopf has no public accessor
    assert handler.activity.value == "startup"
    settings = kopf.OperatorSettings()
    settings.peering.standalone = True  # what the runner passes
    handler.fn(settings=settings)
    assert settings.peering.standalone is False
    assert settings.peering.mandatory is True
    assert settings.peering.name == "tensorkiln"


def test_run_with_peering_joins_it_before_starting(monkeypatch):
    calls = []
    monkeypatch.setattr(incluster, "join_peering", lambda name: calls.append(("peering", name)))
    monkeypatch.setattr(operator_runner, "run", lambda namespaces, *rest: calls.append(("run", namespaces)))
    with pytest.raises(SystemExit) as done:
        cli.main(["operator", "run", "--namespace", "team-a", "--namespace", "team-b", "--peering", "tensorkiln"])
    assert done.value.code == 0
    assert calls == [("peering", "tensorkiln"), ("run", ["team-a", "team-b"])]


def test_run_without_peering_is_the_plain_standalone_run(monkeypatch):
    calls = []
    monkeypatch.setattr(incluster, "join_peering", lambda name: calls.append(("peering", name)))
    monkeypatch.setattr(operator_runner, "run", lambda namespaces, *rest: calls.append(("run", namespaces)))
    with pytest.raises(SystemExit):
        cli.main(["operator", "run", "--all-namespaces"])
    assert calls == [("run", [])]


def test_all_namespaces_and_namespace_exclude_each_other(monkeypatch):
    monkeypatch.setattr(operator_runner, "run", lambda *a: pytest.fail("must not start"))
    with pytest.raises(SystemExit) as done:
        cli.main(["operator", "run", "--all-namespaces", "--namespace", "team-a"])
    assert "exclude each other" in str(done.value.code)
