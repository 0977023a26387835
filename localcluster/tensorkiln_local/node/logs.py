"""Container logs as the kubelet serves them (GET /containerLogs/{namespace}/{pod}/{container}).

Pure except for reading the files runtime.py writes in a container's directory: `log` (every
run's output, appended), `runs` ("<log offset> <pid>": where each run starts) and `log.times`
("<log offset> <unix ns>": when output arrived). The semantics are the kubelet's:

- which run: the container's current one (its status's containerID, local://<pid>), or with
  `previous` the one in lastState.terminated; a container with no such run is an error naming
  why (waiting to start, no previous terminated container), as validateContainerLogStatus says;
- `tailLines` picks the last N lines of that run, then `sinceSeconds`/`sinceTime` drop lines
  older than the time, `timestamps` prefixes each line with the time it arrived (RFC 3339, nine
  fraction digits, UTC), and `limitBytes` cuts the output after that many bytes;
- `follow` keeps the response open and sends lines as the run writes them, until it ends.
"""

from __future__ import annotations

import bisect
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import parse_qs

from .runtime import RUNS_FILE, TIMES_FILE

CONTAINER_ID_PREFIX = "local://"
FOLLOW_POLL_S = 0.2
READ_CHUNK = 64 * 1024


class LogError(Exception):
    """A request the kubelet refuses: `status` is the HTTP status it answers with."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class LogOptions:
    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    tail_lines: int | None = None
    limit_bytes: int | None = None
    since_ns: int | None = None  # unix ns; from sinceSeconds or sinceTime


def parse_options(query: str, now_ns: int | None = None) -> LogOptions:
    """The query the API server sends (PodLogOptions as parameters); LogError(400) when invalid."""
    params = {key: values[-1] for key, values in parse_qs(query, keep_blank_values=True).items()}
    now_ns = time.time_ns() if now_ns is None else now_ns

    def flag(name: str) -> bool:
        value = params.get(name, "false").lower()
        if value not in ("true", "false", "1", "0", ""):
            raise LogError(400, f"{name}: invalid boolean {params[name]!r}")
        return value in ("true", "1")

    def number(name: str, minimum: int) -> int | None:
        if name not in params:
            return None
        try:
            value = int(params[name])
        except ValueError:
            raise LogError(400, f"{name}: invalid integer {params[name]!r}") from None
        if value < minimum:
            raise LogError(400, f"{name}: must be greater than or equal to {minimum}")
        return value

    since_seconds = number("sinceSeconds", 1)
    since_time = params.get("sinceTime")
    if since_seconds is not None and since_time:
        raise LogError(400, "at most one of sinceTime or sinceSeconds may be specified")
    since_ns = None
    if since_seconds is not None:
        since_ns = now_ns - since_seconds * 1_000_000_000
    elif since_time:
        try:
            since_ns = int(datetime.fromisoformat(since_time.replace("Z", "+00:00")).timestamp() * 1e9)
        except ValueError:
            raise LogError(400, f"sinceTime: invalid RFC 3339 time {since_time!r}") from None
    return LogOptions(
        follow=flag("follow"),
        previous=flag("previous"),
        timestamps=flag("timestamps"),
        tail_lines=number("tailLines", 0),
        limit_bytes=number("limitBytes", 1),
        since_ns=since_ns,
    )


def container_id(pod: dict, container: str, previous: bool) -> str:
    """The containerID of the run to read, as the kubelet picks it from the pod's status."""
    meta, status = pod["metadata"], pod.get("status") or {}
    pod_name = f"{meta['name']}_{meta['namespace']}"
    statuses = status.get("containerStatuses", []) + status.get("initContainerStatuses", [])
    cstatus = next((s for s in statuses if s["name"] == container), None)
    if cstatus is None:
        raise LogError(400, f'container "{container}" in pod "{pod_name}" is waiting to start - no logs yet')
    state, last = cstatus.get("state") or {}, (cstatus.get("lastState") or {}).get("terminated")
    if previous:
        if not last or not last.get("containerID"):
            raise LogError(400, f'previous terminated container "{container}" in pod "{pod_name}" not found')
        return last["containerID"]
    if "running" in state:
        return cstatus.get("containerID", "")
    if "terminated" in state:
        if state["terminated"].get("containerID"):
            return state["terminated"]["containerID"]
        if last and last.get("containerID"):
            return last["containerID"]
        raise LogError(400, f'container "{container}" in pod "{pod_name}" is terminated')
    if last:
        if not last.get("containerID"):
            raise LogError(400, f'container "{container}" in pod "{pod_name}" is terminated')
        return last["containerID"]
    reason = (state.get("waiting") or {}).get("reason", "")
    raise LogError(400, f'container "{container}" in pod "{pod_name}" is waiting to start: {reason}')


@dataclass(frozen=True)
class Run:
    start: int  # log offset of the run's first byte
    end: int | None  # offset after its last byte; None: it is the last run (the log's end)
    pid: int | None  # None: an unnamed run (a log written before runs were recorded)


def read_runs(container_dir: Path) -> list[Run]:
    try:
        lines = (container_dir / RUNS_FILE).read_text().splitlines()
    except FileNotFoundError:
        lines = []
    starts = []
    for line in lines:
        fields = line.split()
        if len(fields) == 2 and all(f.isdigit() for f in fields):
            starts.append((int(fields[0]), int(fields[1])))
    if not starts:
        return [Run(0, None, None)] if (container_dir / "log").exists() else []
    return [Run(start, starts[i + 1][0] if i + 1 < len(starts) else None, pid) for i, (start, pid) in enumerate(starts)]


def find_run(runs: list[Run], cid: str) -> Run | None:
    """The run the containerID names (the last, if a pid came round again)."""
    pid = cid.removeprefix(CONTAINER_ID_PREFIX)
    for run in reversed(runs):
        if run.pid is None or str(run.pid) == pid:
            return run
    return None


def read_times(container_dir: Path) -> tuple[list[int], list[int]]:
    """(offsets, unix ns) of output arriving, by offset."""
    offsets, stamps = [], []
    try:
        text = (container_dir / TIMES_FILE).read_text()
    except FileNotFoundError:
        return offsets, stamps
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2 and all(f.isdigit() for f in fields):
            offsets.append(int(fields[0]))
            stamps.append(int(fields[1]))
    return offsets, stamps


def rfc3339_nano(ns: int) -> str:
    """The kubelet's log timestamp: RFC 3339 in UTC with nine fraction digits."""
    seconds, fraction = divmod(ns, 1_000_000_000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{fraction:09d}Z"


def tail_start(f, start: int, end: int, lines: int) -> int:
    """Offset of the first of the last `lines` lines in [start, end) (a final unterminated line counts)."""
    if lines == 0:
        return end
    pos, found = end, 0
    skip_final_newline = True
    while pos > start:
        size = min(READ_CHUNK, pos - start)
        f.seek(pos - size)
        block = f.read(size)
        index = len(block)
        while True:
            index = block.rfind(b"\n", 0, index)
            if index < 0:
                break
            if skip_final_newline and pos - size + index == end - 1:
                skip_final_newline = False
                continue
            found += 1
            if found == lines:
                return pos - size + index + 1
        skip_final_newline = False
        pos -= size
    return start


class _Formatter:
    """Lines (with their offsets) to output: since, timestamps and limitBytes applied."""

    def __init__(self, opts: LogOptions, times: tuple[list[int], list[int]], default_ns: int):
        self._opts = opts
        self._offsets, self._stamps = times
        self._default_ns = default_ns
        self.left = opts.limit_bytes  # None: no limit

    def _stamp(self, offset: int) -> int:
        i = bisect.bisect_right(self._offsets, offset) - 1
        return self._stamps[i] if i >= 0 else self._default_ns

    def line(self, offset: int, text: bytes) -> bytes:
        if self._opts.since_ns is None and not self._opts.timestamps and self.left is None:
            return text
        ns = self._stamp(offset)
        if self._opts.since_ns is not None and ns < self._opts.since_ns:
            return b""
        out = (rfc3339_nano(ns).encode() + b" " + text) if self._opts.timestamps else text
        if self.left is not None:
            out = out[: self.left]
            self.left -= len(out)
        return out

    @property
    def exhausted(self) -> bool:
        return self.left is not None and self.left <= 0


def stream(
    container_dir: Path,
    run: Run,
    opts: LogOptions,
    *,
    running: Callable[[], bool] = lambda: False,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[bytes]:
    """The run's log as the options say; with `follow`, until `running()` says the run ended and
    its output is read (or a later run started)."""
    try:
        f = open(container_dir / "log", "rb")
    except FileNotFoundError:
        return
    with f:
        default_ns = int(os.fstat(f.fileno()).st_mtime * 1e9)  # for output from before times were kept
        fmt = _Formatter(opts, read_times(container_dir), default_ns)
        end = run.end if run.end is not None else os.fstat(f.fileno()).st_size
        pos = run.start if opts.tail_lines is None else tail_start(f, run.start, end, opts.tail_lines)
        follow = opts.follow and run.end is None
        pending = b""  # an unterminated line, held back while it may still grow
        while True:
            while pos < end:
                f.seek(pos)
                data = f.read(min(end - pos, READ_CHUNK))
                if not data:  # the log shrank under us (deleted pod): nothing more to read
                    end = pos
                    break
                line_start = pos - len(pending)
                pos += len(data)
                *lines, pending = (pending + data).split(b"\n")
                for text in lines:
                    out = fmt.line(line_start, text + b"\n")
                    line_start += len(text) + 1
                    if out:
                        yield out
                    if fmt.exhausted:
                        return
            if not follow:
                break
            alive = running()  # asked first: what the run wrote before it ended is then in the log
            size = os.fstat(f.fileno()).st_size
            later = _later_run(container_dir, run)  # recorded before any of its output (runtime.py)
            end = later if later is not None else size
            if later is not None or not alive:
                follow = False  # one last read, to the run's end
            elif end <= pos:
                sleep(FOLLOW_POLL_S)
        if pending:
            out = fmt.line(pos - len(pending), pending)
            if out:
                yield out


def _later_run(container_dir: Path, run: Run) -> int | None:
    """Where the run after `run` starts, if one did."""
    for later in read_runs(container_dir):
        if later.start > run.start:
            return later.start
    return None
