"""Long-running local processes (the cluster's components, a detached operator) started detached with pid files."""

import os
import signal
import socket
import subprocess
import time
from pathlib import Path


def write_config(path: Path, text: str) -> bool:
    """Write a process's configuration file unless it already holds `text`; True if it changed
    (kube-proxy, for one, exits when its file is written, even with the same content)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.read_text() == text:
        return False
    path.write_text(text)
    return True


def pid_of(pidfile: Path) -> int | None:
    """The live process recorded in pidfile, or None."""
    try:
        pid = int(pidfile.read_text())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return None
    return pid


def start(argv: list[str], pidfile: Path, logfile: Path, env: dict | None = None) -> int:
    """Start argv in its own session unless pidfile names a live process; return the pid."""
    running = pid_of(pidfile)
    if running:
        return running
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    with open(logfile, "ab") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    pidfile.write_text(str(proc.pid))
    return proc.pid


def stop(pidfile: Path, grace_seconds: float = 15) -> bool:
    """SIGTERM the recorded process group, SIGKILL after the grace period; True if one ran."""
    pid = pid_of(pidfile)
    pidfile.unlink(missing_ok=True)
    if pid is None:
        return False
    os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True


def accepts_connections(unix_socket: Path) -> bool:
    """True if a process listens on unix_socket (a file left by a previous boot does not count)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(unix_socket))
        except OSError:
            return False
    return True


def wait_until(predicate, what: str, timeout: float, interval: float = 1) -> None:
    """Poll `predicate` until it is true; TimeoutError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
