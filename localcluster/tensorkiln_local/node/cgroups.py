"""Container memory limits, enforced by the kernel's memory cgroups (memcg), as the kubelet does.

Each container with `resources.limits.memory` gets a cgroup of its own under the agent's own
memory cgroup (`<agent's cgroup>/tensorkiln-<node>/<pod uid>_<container>`), with that limit and no
swap beyond it. The process is moved in before it execs (`ContainerCgroup.enter`, a preexec_fn
that writes 0, "the writing process", to cgroup.procs), so nothing it allocates escapes the limit.
Over the limit, the kernel's OOM killer SIGKILLs a process of the container (exit 137). When the
container ends, the cgroup's `oom_kill` counter says whether that happened: reason OOMKilled,
whatever the exit code, as containerd reports any OOM kill in a container's cgroup.

cgroup v1 (the memory controller on its own hierarchy): memory.limit_in_bytes (and
memory.memsw.limit_in_bytes where swap is accounted), `oom_kill` in memory.oom_control.
cgroup v2: memory.max, memory.swap.max 0, memory.oom.group 1 (the whole container is killed, as
the kubelet sets it), `oom_kill` in memory.events. v2 allows processes only in leaf cgroups, so
the agent moves itself into a leaf of its own cgroup first, and only when it is alone there.

Where no memory cgroup is writable, `open_memory_cgroups` raises `Unavailable` saying why; the
agent then runs containers without limits and the node says so (condition MemoryLimitsEnforced).
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

REMOVE_WAIT_S = 2.0  # SIGKILLed processes leave the cgroup as the kernel reaps them
_FILES = {  # version -> (limit, counters, peak)
    1: ("memory.limit_in_bytes", "memory.oom_control", "memory.max_usage_in_bytes"),
    2: ("memory.max", "memory.events", "memory.peak"),
}


class Unavailable(Exception):
    """No memory cgroup this agent may create children in; the message says why."""


@dataclass(frozen=True)
class Location:
    version: int
    path: Path  # the agent's own memory cgroup directory


def locate(proc_cgroup: str, mountinfo: str) -> Location:
    """The agent's memory cgroup, from /proc/self/cgroup and /proc/self/mountinfo: the v1 memory
    hierarchy when the controller is bound there (hybrid hosts), else the v2 unified one."""
    v1 = v2 = None
    for line in proc_cgroup.splitlines():
        hierarchy, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            v1 = path
        elif hierarchy == "0" and not controllers:
            v2 = path
    for version, path in ((1, v1), (2, v2)):
        if path is None:
            continue
        for root, mount_point in _mounts(mountinfo, version):
            relative = os.path.relpath(path, root)
            if not relative.startswith(".."):  # a mount of a cgroup namespace root shows "/" as root
                return Location(version, Path(mount_point, relative).resolve())
    raise Unavailable(
        "no memory cgroup: neither a cgroup v1 memory hierarchy nor cgroup v2 is mounted for this process"
    )


def _mounts(mountinfo: str, version: int):
    """(root, mount point) of each cgroup mount of that version (v1: those with the memory controller)."""
    for line in mountinfo.splitlines():
        before, _, after = line.partition(" - ")
        fields, (fstype, _source, options) = before.split(), after.split()[:3]
        if (version == 2 and fstype == "cgroup2") or (
            version == 1 and fstype == "cgroup" and "memory" in options.split(",")
        ):
            yield fields[3], fields[4]


def counter(text: str, name: str) -> int | None:
    """A value of a "key value" per line file (memory.oom_control, memory.events)."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == name:
            return int(value)
    return None


class ContainerCgroup:
    """One container's memory cgroup, from creation to removal."""

    def __init__(self, path: Path, version: int, limit_bytes: int):
        self.path, self.version, self.limit_bytes = path, version, limit_bytes
        self._procs = str(path / "cgroup.procs")

    def enter(self) -> Callable[[], None]:
        """preexec_fn: moves the child into the cgroup between fork and exec. It only writes a
        path and bytes computed here: nothing that could wait on a lock another thread held at fork."""
        procs = self._procs

        def preexec() -> None:
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)

        return preexec

    def oom_kills(self) -> int:
        return counter(_read(self.path / _FILES[self.version][1]), "oom_kill") or 0

    def peak_bytes(self) -> int | None:
        text = _read(self.path / _FILES[self.version][2]).strip()
        return int(text) if text.isdigit() else None

    def close(self) -> bool:
        """After the container's leader exited: whether the kernel OOM-killed anything in it;
        then whatever is left is killed and the cgroup removed."""
        oom = self.oom_kills() > 0
        remove(self.path)
        return oom


def remove(path: Path) -> bool:
    """SIGKILL what runs in the cgroup, then remove it (waiting for the kernel to reap the killed)."""
    deadline = time.monotonic() + REMOVE_WAIT_S
    while True:
        for pid in _read(path / "cgroup.procs").split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                log.warning("memory cgroup %s not removed: %s", path, exc)
                return False
        time.sleep(0.05)


class MemoryCgroups:
    """Where this node's containers' memory cgroups are made."""

    def __init__(self, parent: Path, version: int):
        self.parent, self.version = parent, version

    def describe(self) -> str:
        return f"memory limits enforced by cgroup v{self.version} memory cgroups under {self.parent}"

    def create(self, name: str, limit_bytes: int) -> ContainerCgroup:
        path = self.parent / name
        remove(path)  # a leftover of a run whose removal failed
        path.mkdir()
        try:
            if self.version == 1:
                _write(path / "memory.limit_in_bytes", limit_bytes)
                if (path / "memory.memsw.limit_in_bytes").exists():  # swap accounted: none beyond the limit
                    _write(path / "memory.memsw.limit_in_bytes", limit_bytes)
            else:
                _write(path / "memory.max", limit_bytes)
                for name_, value in (("memory.swap.max", 0), ("memory.oom.group", 1)):
                    if (path / name_).exists():
                        _write(path / name_, value)
        except OSError:
            remove(path)
            raise
        return ContainerCgroup(path, self.version, limit_bytes)

    def sweep(self) -> int:
        """Remove the cgroups a previous agent left (killing what still runs there); how many."""
        found = [p for p in self.parent.iterdir() if p.is_dir()]
        for path in found:
            remove(path)
        return len(found)


def open_memory_cgroups(node_name: str, location: Location | None = None) -> MemoryCgroups:
    """This agent's parent cgroup for containers, created and checked; raises Unavailable."""
    if location is None:
        location = locate(_read("/proc/self/cgroup"), _read("/proc/self/mountinfo"))
    own, version = location.path, location.version
    limit, counters, _ = _FILES[version]
    parent = own / f"tensorkiln-{node_name}"
    try:
        if version == 2:
            _delegate_v2(own, node_name)
        parent.mkdir(exist_ok=True)
        if version == 2:
            _write(parent / "cgroup.subtree_control", "+memory")
    except OSError as exc:
        raise Unavailable(f"cannot create memory cgroups under {own} (cgroup v{version}): {exc}") from exc
    if not (parent / limit).exists():
        raise Unavailable(f"{parent} has no {limit}: the memory controller is not enabled there")
    if counter(_read(parent / counters), "oom_kill") is None:
        raise Unavailable(f"{parent / counters} has no oom_kill counter (kernel before 4.13): OOM kills cannot be told")
    return MemoryCgroups(parent, version)


def _delegate_v2(own: Path, node_name: str) -> None:
    """Enable the memory controller for children of the agent's cgroup. v2 refuses that while the
    cgroup holds processes, so the agent first moves into a leaf of its own, if it is alone."""
    if "memory" not in _read(own / "cgroup.controllers").split():
        raise Unavailable(f"the memory controller is not available in {own} (not delegated to it)")
    if "memory" in _read(own / "cgroup.subtree_control").split():
        return
    others = [pid for pid in _read(own / "cgroup.procs").split() if int(pid) != os.getpid()]
    if others:
        raise Unavailable(
            f"{own} holds other processes ({', '.join(others[:5])}), and cgroup v2 lets a cgroup with "
            "processes have no memory-limited children: start the agent in a cgroup of its own"
        )
    leaf = own / f"tensorkiln-{node_name}-agent"
    leaf.mkdir(exist_ok=True)
    _write(leaf / "cgroup.procs", 0)
    _write(own / "cgroup.subtree_control", "+memory")


def _write(path: Path, value) -> None:
    with open(path, "w") as handle:
        handle.write(str(value))


def _read(path) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""
