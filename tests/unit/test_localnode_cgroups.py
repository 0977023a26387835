"""Memory cgroups of local-0's containers: finding the agent's cgroup, the files written and read
(a fake cgroup tree under tmp_path), and one real OOM kill where memory cgroups are writable."""

import os
import uuid
from pathlib import Path

import pytest
from tensorkiln_local.node.cgroups import (
    ContainerCgroup,
    Location,
    Unavailable,
    counter,
    locate,
    open_memory_cgroups,
)
from tensorkiln_local.node.ipam import IpAllocator
from tensorkiln_local.node.worker import NodeEnv, PodWorker

from .test_localnode_worker import FakeKube, NoObjects, make_pod, run_to_end

HYBRID_CGROUP = "9:name=systemd:/\n4:memory:/process_api/abc\n1:cpu:/\n0::/\n"
HYBRID_MOUNTS = (
    "30 25 0:26 / /sys/fs/cgroup/unified rw,nosuid shared:9 - cgroup2 cgroup2 rw\n"
    "35 25 0:31 / /sys/fs/cgroup/memory rw,nosuid shared:14 - cgroup cgroup rw,memory\n"
    "36 25 0:32 / /sys/fs/cgroup/cpu rw,nosuid shared:15 - cgroup cgroup rw,cpu\n"
)
V2_CGROUP = "0::/user.slice/session-3.scope\n"
V2_MOUNTS = "30 25 0:26 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"


def test_hybrid_host_uses_the_v1_memory_hierarchy():
    assert locate(HYBRID_CGROUP, HYBRID_MOUNTS) == Location(1, Path("/sys/fs/cgroup/memory/process_api/abc"))


def test_unified_host_uses_cgroup_v2():
    assert locate(V2_CGROUP, V2_MOUNTS) == Location(2, Path("/sys/fs/cgroup/user.slice/session-3.scope"))


def test_a_cgroup_namespace_shows_its_own_cgroup_as_the_mount_root():
    mounts = "30 25 0:26 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    assert locate("0::/kubepods/pod1/c\n", mounts) == Location(2, Path("/sys/fs/cgroup/c"))


def test_no_memory_cgroup_mounted_is_unavailable_saying_so():
    with pytest.raises(Unavailable, match="neither a cgroup v1 memory hierarchy nor cgroup v2"):
        locate("1:cpu:/\n", "36 25 0:32 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n")


def test_oom_kill_counters_of_both_versions():
    assert counter("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n", "oom_kill") == 2  # v1 memory.oom_control
    assert counter("low 0\nhigh 0\nmax 9\noom 1\noom_kill 1\noom_group_kill 0\n", "oom_kill") == 1  # v2 events
    assert counter("oom_kill_disable 0\nunder_oom 0\n", "oom_kill") is None  # kernel before 4.13


def fake_v1(tmp_path, node="n", counters="oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"):
    own = tmp_path / "memory/process_api/abc"
    parent = own / f"tensorkiln-{node}"
    parent.mkdir(parents=True)
    (parent / "memory.limit_in_bytes").write_text("9223372036854771712")
    (parent / "memory.oom_control").write_text(counters)
    return Location(1, own)


def test_v1_container_cgroup_gets_the_limit_and_its_oom_kills_are_read(tmp_path):
    memory = open_memory_cgroups("n", fake_v1(tmp_path))
    assert memory.parent == tmp_path / "memory/process_api/abc/tensorkiln-n"
    assert "cgroup v1" in memory.describe()
    cgroup = memory.create("uid-1_compiler", 64 << 20)
    assert (cgroup.path / "memory.limit_in_bytes").read_text() == str(64 << 20)
    assert not (cgroup.path / "memory.memsw.limit_in_bytes").exists()  # written only where swap is accounted
    assert cgroup.oom_kills() == 0
    (cgroup.path / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    (cgroup.path / "memory.max_usage_in_bytes").write_text("67104768\n")
    assert (cgroup.oom_kills(), cgroup.peak_bytes()) == (1, 67104768)


def test_v2_container_cgroup_gets_memory_max(tmp_path):
    own = tmp_path / "user.slice"
    parent = own / "tensorkiln-n"
    parent.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpu memory pids\n")
    (own / "cgroup.subtree_control").write_text("memory\n")  # already delegated: the agent stays put
    (parent / "memory.max").write_text("max\n")
    (parent / "memory.events").write_text("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n")
    memory = open_memory_cgroups("n", Location(2, own))
    assert (parent / "cgroup.subtree_control").read_text() == "+memory"
    cgroup = memory.create("uid-1_main", 1 << 30)
    assert (cgroup.path / "memory.max").read_text() == str(1 << 30)
    assert ContainerCgroup(cgroup.path, 2, 1 << 30).oom_kills() == 0


def test_v2_without_the_memory_controller_is_unavailable(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpu pids\n")
    with pytest.raises(Unavailable, match="memory controller is not available"):
        open_memory_cgroups("n", Location(2, tmp_path))


def test_v2_cgroup_shared_with_other_processes_is_unavailable_naming_them(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("memory\n")
    (tmp_path / "cgroup.subtree_control").write_text("")
    (tmp_path / "cgroup.procs").write_text(f"{os.getpid()}\n4242\n")
    with pytest.raises(Unavailable, match=r"holds other processes \(4242\)"):
        open_memory_cgroups("n", Location(2, tmp_path))


def test_a_parent_without_the_memory_files_is_unavailable(tmp_path):
    with pytest.raises(Unavailable, match="memory.limit_in_bytes: the memory controller is not enabled"):
        open_memory_cgroups("n", Location(1, tmp_path))


def test_a_kernel_that_does_not_count_oom_kills_is_unavailable(tmp_path):
    with pytest.raises(Unavailable, match="no oom_kill counter"):
        open_memory_cgroups("n", fake_v1(tmp_path, counters="oom_kill_disable 0\nunder_oom 0\n"))


@pytest.fixture
def real_memory_cgroups():
    """This process's real memory cgroups, under a parent of this test's own (removed after)."""
    try:
        memory = open_memory_cgroups(f"unit-{uuid.uuid4().hex[:8]}")
    except (Unavailable, OSError) as exc:
        pytest.skip(f"memory cgroups are not writable here: {exc}")
    yield memory
    memory.sweep()
    memory.parent.rmdir()


def test_a_container_over_its_memory_limit_is_oom_killed_by_the_kernel_and_reported(tmp_path, real_memory_cgroups):
    env = NodeEnv(
        kube=FakeKube(),
        resolver=NoObjects(),
        ipam=IpAllocator(tmp_path / "ipam.json"),
        node_name="local-0",
        state_dir=tmp_path,
        search_path=os.environ["PATH"],
        memory=real_memory_cgroups,
    )
    grow = "chunks = []\nwhile len(chunks) < 64: chunks.append(b'x' * (4 << 20))\nprint('survived', flush=True)"
    small = "print(len(b'x' * (4 << 20)))"

    def container(name, script):
        return {
            "name": name,
            "image": "python",
            "command": ["python3", "-c", script],
            "resources": {"limits": {"memory": "32Mi"}},
        }

    status = run_to_end(PodWorker(make_pod(container("grows", grow), container("fits", small)), env), timeout_s=30)
    states = {c["name"]: c["state"]["terminated"] for c in status["containerStatuses"]}
    assert (states["grows"]["exitCode"], states["grows"]["reason"]) == (137, "OOMKilled")
    assert (states["fits"]["exitCode"], states["fits"]["reason"]) == (0, "Completed")
    assert status["phase"] == "Failed"
    assert (tmp_path / "pods/uid-1/grows/log").read_text() == ""  # killed before it got to 256 MiB
    assert [p.name for p in real_memory_cgroups.parent.iterdir() if p.is_dir()] == []  # removed at exit
