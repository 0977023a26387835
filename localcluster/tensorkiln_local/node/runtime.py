"""Container runs as local processes, one session (and process group) per run.

Each run starts with start_new_session=True, so its session id is the leader's pid and
everything the container starts (a shell and its children) can be signalled and swept
together, like a container's cgroup. The leader's pid and kernel start time are recorded in
`<container dir>/pid` while it runs, so an agent that restarts after a crash kills what the
previous agent left behind (`sweep`) instead of leaking processes.

Output. stdout and stderr go through a pipe that a pump thread copies, as it arrives, onto the
end of `<container dir>/log` (every run of the container appends to the same file). Next to it
the pump records when output arrived (`log.times`: "<log offset> <unix ns>" lines, at most one a
millisecond) and each run's start (`runs`: "<log offset> <pid>", the pid naming the run as the
containerID local://<pid> does): what the kubelet's containerLogs endpoint needs for
`timestamps`, `sinceSeconds` and `previous` (logs.py). The pump lives in the agent, as the
processes do: an agent that dies takes both with it (its successor sweeps the processes).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from .cgroups import ContainerCgroup
from .podspec import ContainerPlan

log = logging.getLogger(__name__)
LOG_TAIL_BYTES = 64 * 1024
RUNS_FILE = "runs"  # in the container dir: "<log offset> <pid>" per run
TIMES_FILE = "log.times"  # in the container dir: "<log offset> <unix ns>" per arrival of output
PUMP_CHUNK = 64 * 1024
PUMP_JOIN_S = 5
TIMES_RESOLUTION_NS = 1_000_000


class StartError(Exception):
    """The process could not be started (missing executable, working dir, ...)."""


class Process:
    def __init__(
        self,
        popen: subprocess.Popen,
        plan: ContainerPlan,
        log_offset: int,
        cgroup: ContainerCgroup | None = None,
        pump: threading.Thread | None = None,
    ):
        self._popen = popen
        self._plan = plan
        self._log_offset = log_offset
        self._cgroup = cgroup
        self._pump = pump
        self.oom_killed = False  # known once poll() returned the exit code
        self.peak_bytes: int | None = None  # the cgroup's peak memory use, likewise
        self._start_ticks = _start_ticks(popen.pid) or 0
        self._pid_file = plan.log_path.parent / "pid"
        self._pid_file.write_text(f"{popen.pid} {self._start_ticks}\n")

    @classmethod
    def spawn(cls, plan: ContainerPlan, cgroup: ContainerCgroup | None = None) -> Process:
        """Start the container's process; with `cgroup`, inside it (removed again if the start fails)."""
        try:
            return cls._spawn(plan, cgroup)
        except BaseException:
            if cgroup is not None:
                cgroup.close()
            raise

    @classmethod
    def _spawn(cls, plan: ContainerPlan, cgroup: ContainerCgroup | None) -> Process:
        plan.log_path.parent.mkdir(parents=True, exist_ok=True)
        plan.termination_path.write_bytes(b"")  # a fresh termination message per run
        if not plan.cwd.is_dir():
            raise StartError(f"working directory {plan.cwd} does not exist")
        with open(plan.log_path, "ab") as log_file:
            offset = log_file.tell()
        read_end, write_end = os.pipe()
        try:
            popen = subprocess.Popen(
                plan.argv,
                env=plan.env,
                cwd=plan.cwd,
                stdin=subprocess.DEVNULL,
                stdout=write_end,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=cgroup.enter() if cgroup else None,
            )
        except FileNotFoundError:
            os.close(read_end)
            raise StartError(f'exec: "{plan.argv[0]}": executable file not found in $PATH') from None
        except OSError as exc:
            os.close(read_end)
            raise StartError(f'exec: "{plan.argv[0]}": {exc.strerror}') from None
        except subprocess.SubprocessError as exc:  # the preexec_fn failed: not in the cgroup
            os.close(read_end)
            raise StartError(f"moving the process into memory cgroup {cgroup.path}: {exc}") from None
        finally:
            os.close(write_end)  # the container holds it now: EOF when its last process is gone
        with open(plan.log_path.parent / RUNS_FILE, "a") as runs:  # before any of the run's output
            runs.write(f"{offset} {popen.pid}\n")
        pump = threading.Thread(
            target=pump_output,
            args=(read_end, plan.log_path, plan.log_path.parent / TIMES_FILE),
            name=f"log {plan.log_path.parent.name} {popen.pid}",
            daemon=True,
        )
        pump.start()
        return cls(popen, plan, offset, cgroup, pump)

    @property
    def pid(self) -> int:
        return self._popen.pid

    def poll(self) -> int | None:
        """The leader's return code once it exited; then whatever it left running is killed, and
        its memory cgroup (if any) read (`oom_killed`, `peak_bytes`) and removed."""
        code = self._popen.poll()
        if code is not None and self._pid_file.exists():
            _signal_session(self.pid, self._start_ticks, signal.SIGKILL)
            if self._pump is not None:  # the session is gone: the rest of its output is in the pipe
                self._pump.join(PUMP_JOIN_S)
            self._pid_file.unlink(missing_ok=True)  # after the pump: no pid file, complete log
        if code is not None and self._cgroup is not None:
            self.peak_bytes = self._cgroup.peak_bytes()
            self.oom_killed = self._cgroup.close()
            self._cgroup = None
        return code

    def terminate(self) -> None:
        """SIGTERM the whole session (the caller then `wait`s)."""
        if self.poll() is None:
            _signal_session(self.pid, self._start_ticks, signal.SIGTERM)

    def wait(self, deadline: float) -> int:
        """The leader's return code; whatever still runs at `deadline` (monotonic) gets SIGKILL."""
        try:
            self._popen.wait(timeout=max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            _signal_session(self.pid, self._start_ticks, signal.SIGKILL)
            self._popen.wait()
        return self.poll()

    def stop(self, grace_s: float) -> int:
        self.terminate()
        return self.wait(time.monotonic() + grace_s)

    def log_text(self) -> str:
        """This run's output (at most the last 64 KiB), for FallbackToLogsOnError."""
        try:
            with open(self._plan.log_path, "rb") as log_file:
                end = log_file.seek(0, os.SEEK_END)
                log_file.seek(max(self._log_offset, end - LOG_TAIL_BYTES))
                return log_file.read().decode(errors="replace")
        except OSError:
            return ""


def pump_output(fd: int, log_path: Path, times_path: Path, clock=time.time_ns) -> None:
    """Copy the container's output from `fd` onto the end of its log until EOF, noting in
    `times_path` the offset and time of output arriving (once a millisecond at most: a line's
    timestamp is then when its first byte, or output up to a millisecond before it, arrived)."""
    last_ns = -TIMES_RESOLUTION_NS
    try:
        with open(log_path, "ab", buffering=0) as out, open(times_path, "ab", buffering=0) as times:
            while chunk := os.read(fd, PUMP_CHUNK):
                now = clock()
                if now - last_ns >= TIMES_RESOLUTION_NS:
                    times.write(f"{out.seek(0, os.SEEK_END)} {now}\n".encode())
                    last_ns = now
                out.write(chunk)
    except OSError as exc:  # a full disk: the container's output is lost, as a full log volume loses it
        log.warning("copying output to %s: %s", log_path, exc)
        while _drain(fd):  # keep the pipe flowing so the container does not block on its output
            pass
    finally:
        os.close(fd)


def _drain(fd: int) -> bool:
    try:
        return bool(os.read(fd, PUMP_CHUNK))
    except OSError:
        return False


def sweep(state_dir: Path) -> int:
    """Kill the sessions recorded by a previous agent; returns how many were found."""
    found = 0
    for pid_file in state_dir.glob("pods/*/*/pid"):
        try:
            pid, ticks = (int(field) for field in pid_file.read_text().split())
        except (OSError, ValueError):
            continue
        if _signal_session(pid, ticks, signal.SIGKILL):
            found += 1
            log.info("killed leftover processes of session %s (%s)", pid, pid_file.parent)
        pid_file.unlink(missing_ok=True)
    return found


def _signal_session(sid: int, since_ticks: int, sig: int) -> int:
    """Signal every process of session `sid` that started no earlier than its leader did.

    The start-time check keeps a recycled pid from pointing at an unrelated process.
    """
    hits = 0
    for pid, session, ticks in _processes():
        if session == sid and ticks >= since_ticks:
            try:
                os.kill(pid, sig)
                hits += 1
            except ProcessLookupError:
                pass
    return hits


def _processes():
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat:
                yield int(entry.name), int(stat[3]), int(stat[19])


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (which may hold spaces)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def _start_ticks(pid: int) -> int | None:
    stat = _stat(pid)
    return int(stat[19]) if stat else None


def _container_session(state_dir: Path, pod_uid: str, container: str) -> tuple[int, int] | None:
    """The running container's session id and its leader's start time, from its pid file."""
    try:
        sid, since = (int(field) for field in (state_dir / "pods" / pod_uid / container / "pid").read_text().split())
    except (OSError, ValueError):
        return None
    return sid, since


def container_cpu_seconds(state_dir: Path, pod_uid: str, container: str) -> float | None:
    """CPU seconds the running container's processes used so far (what cAdvisor reads from a
    cgroup; here the session's processes). None when the container is not running."""
    session = _container_session(state_dir, pod_uid, container)
    if session is None:
        return None
    ticks = 0
    for pid, sid, started in _processes():
        stat = _stat(pid) if sid == session[0] and started >= session[1] else None
        if stat:
            ticks += sum(int(stat[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def signal_container(state_dir: Path, pod_uid: str, container: str, sig: int) -> int:
    """Signal a running container's processes, as a crash or the OOM killer would; returns how many."""
    session = _container_session(state_dir, pod_uid, container)
    return 0 if session is None else _signal_session(*session, sig)
