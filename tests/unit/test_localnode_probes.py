"""Probe thresholds and one real attempt of each kind against local listeners."""

import http.server
import socket
import threading

import pytest
from tensorkiln_local.node.probes import (
    Probe,
    ProbeError,
    ProbeTracker,
    parse_probe,
    run_probe,
)


def test_readiness_settles_on_thresholds():
    tracker = ProbeTracker(
        Probe("tcp", success_threshold=2, failure_threshold=3, period=1, initial_delay=5), started_at=100, initial=False
    )
    assert not tracker.due(104) and tracker.due(105)
    assert tracker.record(True, 105) is False  # one success is not enough
    assert not tracker.due(105.5) and tracker.due(106)
    assert tracker.record(True, 106) is True
    assert tracker.record(False, 107) is True
    assert tracker.record(False, 108) is True
    assert tracker.record(False, 109) is False


def test_startup_probe_starts_unknown():
    tracker = ProbeTracker(Probe("exec", failure_threshold=1), started_at=0, initial=None)
    assert tracker.result is None
    assert tracker.record(False, 0) is False


def test_unknown_named_port_is_rejected():
    with pytest.raises(ProbeError, match="'metrics'"):
        parse_probe({"tcpSocket": {"port": "metrics"}}, pod_ip="127.0.0.10", ports={}, rewrite=str)


@pytest.fixture
def http_server():
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/ok" else 503)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def test_http_probe(http_server, tmp_path):
    ok = Probe("http", host="127.0.0.1", port=http_server, path="/ok")
    bad = Probe("http", host="127.0.0.1", port=http_server, path="/no")
    assert run_probe(ok, env={}, cwd=tmp_path)[0]
    assert run_probe(bad, env={}, cwd=tmp_path) == (False, "HTTP probe returned 503")


def test_tcp_and_exec_probes(tmp_path):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert run_probe(Probe("tcp", host="127.0.0.1", port=port), env={}, cwd=tmp_path)[0]
    assert not run_probe(Probe("tcp", host="127.0.0.1", port=port), env={}, cwd=tmp_path)[0]
    env = {"PATH": "/usr/bin:/bin"}
    assert run_probe(Probe("exec", command=("sh", "-c", "test -d .")), env=env, cwd=tmp_path)[0]
    assert not run_probe(Probe("exec", command=("sh", "-c", "exit 1")), env=env, cwd=tmp_path)[0]
    assert not run_probe(Probe("exec", command=("sleep", "5"), timeout=0.2), env=env, cwd=tmp_path)[0]
    assert not run_probe(Probe("exec", command=("no-such-binary",)), env=env, cwd=tmp_path)[0]
