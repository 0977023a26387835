"""kopf peering as the resync loop reads it: the same rule kopf applies to its own handlers."""

import os
from datetime import UTC, datetime, timedelta

import kopf
from tensorkiln import peering

NOW = datetime(2026, 11, 30, 20, 0, tzinfo=UTC)


def entry(seconds_ago: float, priority: int = 0, lifetime: int = 60) -> dict:
    """A peer as kopf writes it into the peering object's status."""
    return {"priority": priority, "lifetime": lifetime, "lastseen": (NOW - timedelta(seconds=seconds_ago)).isoformat()}


def test_join_turns_kopf_from_standalone_to_mandatory_peering():
    registry = kopf.OperatorRegistry()
    peering.join("tensorkiln", registry=registry)
    (handler,) = registry._activities.get_all_handlers()  # kopf has no public accessor
    assert handler.activity.value == "startup"
    settings = kopf.OperatorSettings()
    settings.peering.standalone = True  # what the runner passes
    handler.fn(settings=settings)
    assert (settings.peering.standalone, settings.peering.mandatory) == (False, True)
    assert (settings.peering.name, settings.peering.priority) == ("tensorkiln", peering.PRIORITY)


def test_a_live_peer_of_the_same_priority_pauses_and_self_does_not():
    status = {"me": entry(1), "other": entry(5)}
    assert peering.blocking_peers(status, "me", 0, NOW) == ["other"]
    assert peering.blocking_peers({"me": entry(1)}, "me", 0, NOW) == []


def test_a_peer_of_higher_priority_pauses_and_one_of_lower_does_not():
    status = {"high": entry(1, priority=10), "low": entry(1, priority=-1)}
    assert peering.blocking_peers(status, "me", 0, NOW) == ["high"]


def test_a_peer_not_seen_for_its_lifetime_is_dead_and_pauses_nobody():
    # A killed operator never leaves the object: its entry expires instead.
    assert peering.blocking_peers({"killed": entry(61, lifetime=60)}, "me", 0, NOW) == []
    assert peering.blocking_peers({"alive": entry(59, lifetime=60)}, "me", 0, NOW) == ["alive"]


def test_an_empty_or_foreign_status_pauses_nobody():
    assert peering.blocking_peers({}, "me", 0, NOW) == []
    assert peering.blocking_peers({"kopf": "not a peer"}, "me", 0, NOW) == []


def test_identity_is_unique_to_this_process_and_named_after_its_host():
    identity = peering.new_identity()
    host, started, suffix = identity.rsplit("/", 2)
    assert "@" in host and len(started) == 14 and len(suffix) == 4
    assert peering.new_identity() != identity


def test_identity_of_a_user_without_a_passwd_entry(monkeypatch):
    """The operator image's uid 65532 has no passwd entry: getpass raises, the uid stands in."""

    def no_entry():
        raise KeyError("getpwuid(): uid not found: 65532")

    monkeypatch.delenv("POD_ID", raising=False)
    monkeypatch.setattr(peering.getpass, "getuser", no_entry)
    assert peering.new_identity().startswith(f"{os.getuid()}@")
