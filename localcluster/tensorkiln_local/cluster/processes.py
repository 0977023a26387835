"""Long-running local processes (the node agent, the operator) started detached with pid files."""

import os
import signal
import subprocess
import time
from pathlib import Path


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
