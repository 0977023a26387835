"""A server the tests run as a plain process on a free loopback port (versitygw, docker-registry), its output
in a log that a failure to start shows."""

import socket
import subprocess
import time
from pathlib import Path


class LocalServer:
    """`command` (a function of the port it must listen on) run on `address`:<a free port>, `name` in errors."""

    def __init__(self, name: str, command, log: Path, address: str = "127.0.0.1", env: dict | None = None):
        self.name, self.address, self.log = name, address, log
        with socket.socket() as probe:  # a free port, released just before the server takes it
            probe.bind((address, 0))
            self.port = probe.getsockname()[1]
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(command(self.port), stdout=out, stderr=subprocess.STDOUT, env=env)
        self._wait_until_listening()

    def _wait_until_listening(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited {self.proc.returncode}: {self.log.read_text()}")
            try:
                socket.create_connection((self.address, self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"{self.name} not listening on {self.address}:{self.port} after {timeout}s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
