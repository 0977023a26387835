"""Container probes: httpGet, tcpSocket and exec, with the kubelet's timing and thresholds.

`parse_probe` turns a probe spec into a `Probe` (host defaults to the pod IP, named ports are
resolved, exec commands get the pod's path rewrite); `run_probe` runs one attempt;
`ProbeTracker` decides when the result settles (successThreshold / failureThreshold
consecutive results), exactly like the kubelet's prober: a readiness probe starts failed, a
liveness probe starts passed, a startup probe starts unknown. gRPC probes are not supported.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

USER_AGENT = "kube-probe/1.37"


class ProbeError(ValueError):
    """A probe this agent cannot run."""


@dataclass(frozen=True)
class Probe:
    action: str  # "http", "tcp" or "exec"
    host: str = ""
    port: int = 0
    path: str = "/"
    scheme: str = "HTTP"
    headers: tuple[tuple[str, str], ...] = ()
    command: tuple[str, ...] = ()
    initial_delay: float = 0
    period: float = 10
    timeout: float = 1
    success_threshold: int = 1
    failure_threshold: int = 3


def parse_probe(spec: dict, *, pod_ip: str, ports: dict[str, int], rewrite: Callable[[str], str]) -> Probe:
    timing = dict(
        initial_delay=spec.get("initialDelaySeconds", 0),
        period=spec.get("periodSeconds", 10),
        timeout=spec.get("timeoutSeconds", 1),
        success_threshold=spec.get("successThreshold", 1),
        failure_threshold=spec.get("failureThreshold", 3),
    )
    if "httpGet" in spec:
        get = spec["httpGet"]
        return Probe(
            "http",
            host=get.get("host") or pod_ip,
            port=_port(get["port"], ports),
            path=get.get("path") or "/",
            scheme=get.get("scheme", "HTTP"),
            headers=tuple((h["name"], h["value"]) for h in get.get("httpHeaders", [])),
            **timing,
        )
    if "tcpSocket" in spec:
        tcp = spec["tcpSocket"]
        return Probe("tcp", host=tcp.get("host") or pod_ip, port=_port(tcp["port"], ports), **timing)
    if "exec" in spec:
        return Probe("exec", command=tuple(rewrite(a) for a in spec["exec"].get("command", [])), **timing)
    raise ProbeError(f"probe kind {sorted(spec)} is not supported (httpGet, tcpSocket and exec are)")


def run_probe(probe: Probe, *, env: dict[str, str], cwd: Path) -> tuple[bool, str]:
    """One attempt; returns (passed, detail). Never raises for a failing target."""
    try:
        if probe.action == "http":
            return _http(probe)
        if probe.action == "tcp":
            with socket.create_connection((probe.host, probe.port), timeout=probe.timeout):
                return True, ""
        done = subprocess.run(probe.command, env=env, cwd=cwd, capture_output=True, timeout=probe.timeout, check=False)
        return done.returncode == 0, done.stdout.decode(errors="replace")[-1024:]
    except (OSError, subprocess.TimeoutExpired, http.client.HTTPException) as exc:
        return False, f"{type(exc).__name__}: {exc}"


class ProbeTracker:
    """Schedules one probe of one container run and settles its result."""

    def __init__(self, probe: Probe, *, started_at: float, initial: bool | None):
        self.probe = probe
        self.result = initial
        self._next = started_at + probe.initial_delay
        self._last: bool | None = None
        self._run = 0

    def due(self, now: float) -> bool:
        return now >= self._next

    def record(self, passed: bool, now: float) -> bool | None:
        self._run = self._run + 1 if passed == self._last else 1
        self._last = passed
        self._next = now + self.probe.period
        threshold = self.probe.success_threshold if passed else self.probe.failure_threshold
        if self._run >= threshold:
            self.result = passed
        return self.result


def _http(probe: Probe) -> tuple[bool, str]:
    if probe.scheme.upper() == "HTTPS":  # the kubelet does not verify probe certificates
        conn = http.client.HTTPSConnection(
            probe.host, probe.port, timeout=probe.timeout, context=ssl._create_unverified_context()
        )
    else:
        conn = http.client.HTTPConnection(probe.host, probe.port, timeout=probe.timeout)
    try:
        conn.request("GET", probe.path, headers={"User-Agent": USER_AGENT, **dict(probe.headers)})
        status = conn.getresponse().status
    finally:
        conn.close()
    return 200 <= status < 400, f"HTTP probe returned {status}"


def _port(port: int | str, ports: dict[str, int]) -> int:
    if isinstance(port, int) or port.isdigit():
        return int(port)
    if port not in ports:
        raise ProbeError(f"probe names port {port!r}, which the container does not declare")
    return ports[port]
