"""The open-loop load generator's own behaviour (serving.loadgen): what a benchmark's figures rest on."""

import time

from tensorkiln_local.load import loadgen
from tensorkiln_local.load.loadgen import OpenLoopLoad, Phase
from tritonclient.utils import InferenceServerException


class Connection:
    """A stand-in for a gRPC client: which address it was opened to, and whether it was closed."""

    opened: list["Connection"] = []

    def __init__(self, address: str):
        self.address, self.closed = address, False
        Connection.opened.append(self)

    def close(self) -> None:
        self.closed = True


def test_the_first_requests_find_the_service_and_each_goes_over_a_connection_of_its_own(monkeypatch):
    """The Service is looked up before the clock starts (looked up late, a slow first lookup, 0.5 s on the
    local cluster, failed every request before it). Each request has a connection of its own, closed after:
    kube-proxy routes per connection, so only that spreads requests over the pods."""

    def slow_lookup(api_client, namespace, service):
        time.sleep(0.3)
        return "10.96.0.20:8001"

    Connection.opened = []
    monkeypatch.setattr(loadgen, "service_address", slow_lookup)
    monkeypatch.setattr(loadgen, "new_connection", Connection)
    monkeypatch.setattr(loadgen, "infer_on", lambda connection, model, inputs, timeout_s: {})
    results = OpenLoopLoad(None, "ns", "svc", "model", {}, seed=1).run([Phase("only", 200.0, 0.25)])
    assert len(results) > 20 and all(r.ok for r in results)
    assert len(Connection.opened) == len(results) + 1  # one probe, before the clock, then one per request
    assert all(c.address == "10.96.0.20:8001" and c.closed for c in Connection.opened)


def test_the_clock_starts_once_the_service_routes(monkeypatch):
    """A new Service answers UNAVAILABLE until kube-proxy has synced: the load waits that out before its
    first arrival instead of recording it as failed requests."""
    unrouted_until = time.monotonic() + 0.6

    def routes_late(connection, model, inputs, timeout_s):
        if time.monotonic() < unrouted_until:
            raise InferenceServerException("no route", status="StatusCode.UNAVAILABLE")
        return {}

    monkeypatch.setattr(loadgen, "service_address", lambda api_client, namespace, service: "10.96.0.20:8001")
    monkeypatch.setattr(loadgen, "new_connection", Connection)
    monkeypatch.setattr(loadgen, "infer_on", routes_late)
    results = OpenLoopLoad(None, "ns", "svc", "model", {}, seed=1).run([Phase("only", 200.0, 0.25)])
    assert len(results) > 20 and all(r.ok for r in results)


def test_a_failed_request_is_retried_over_new_connections_after_pauses_then_recorded_failed(monkeypatch):
    Connection.opened = []
    attempts, pauses = [], []

    def fails_on_the_first_connections(connection, model, inputs, timeout_s):
        attempts.append(connection)
        if len(attempts) <= 2:
            raise ConnectionError("the pod went away")
        return {}

    monkeypatch.setattr(loadgen, "new_connection", Connection)
    monkeypatch.setattr(loadgen, "infer_on", fails_on_the_first_connections)
    monkeypatch.setattr(loadgen.time, "sleep", pauses.append)
    load = OpenLoopLoad(None, "ns", "svc", "model", {})
    load._address, load.started_at = "10.96.0.20:8001", time.monotonic()
    load._send(0.0, "first")
    assert [r.ok for r in load.results] == [True]
    assert len(attempts) == 3 and len(set(map(id, attempts))) == 3 and all(c.closed for c in attempts)
    assert pauses == [0.0, *loadgen.RETRY_PAUSES_S[:2]]

    monkeypatch.setattr(loadgen, "infer_on", lambda *args, **kwargs: (_ for _ in ()).throw(ConnectionError("down")))
    load._send(1.0, "second")
    assert [r.ok for r in load.results] == [True, False]
    assert len(Connection.opened) == 3 + 1 + len(loadgen.RETRY_PAUSES_S)
