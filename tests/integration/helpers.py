"""Polling helpers for integration tests, and a private model host's stand-in."""

import http.server
import threading
import time

import pytest
from kubernetes import client


def wait_for(predicate, timeout=90, interval=1.0, what="condition"):
    """Poll until predicate() is truthy; return its value or fail naming what was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def namespace_exists(core: client.CoreV1Api, namespace: str) -> bool:
    try:
        core.read_namespace(namespace)
    except client.ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


class BearerServer:
    """A STAND-IN for a private HTTP model host (an internal artifact server): `body` at /cls.onnx to the
    bearer token alone (401 otherwise), on `address` (local-0's gateway, where pods reach this machine);
    it records the Authorization headers it was sent."""

    def __init__(self, address: str, token: str, body: bytes):
        self.authorizations: list[str] = []
        seen = self.authorizations

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                seen.append(self.headers.get("Authorization") or "")
                if self.path != "/cls.onnx" or self.headers.get("Authorization") != f"Bearer {token}":
                    self.send_error(401 if self.path == "/cls.onnx" else 404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer((address, 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://{address}:{self.httpd.server_port}/cls.onnx"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
