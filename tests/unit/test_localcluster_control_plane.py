"""The local cluster's control plane stays whole: no leader election to lose under load, and a
component that stopped anyway is found from kwokctl's pid files and started again by `cluster up`."""

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from tensorkiln_local.cluster import cluster, kubeproxy, network, nodes, paths, processes, prometheus


def extra_args(component: str) -> dict[str, str]:
    config = next(d for d in yaml.safe_load_all(paths.KWOK_CONFIG.read_text()) if d["kind"] == "KwokctlConfiguration")
    patch = next(p for p in config["componentsPatches"] if p["name"] == component)
    return {a["key"]: a["value"] for a in patch["extraArgs"]}


def test_the_controller_manager_and_the_scheduler_run_without_leader_election():
    for component in ("kube-controller-manager", "kube-scheduler"):
        assert extra_args(component)["leader-elect"] == "false"


def started(cluster_dir, component: str) -> subprocess.Popen:
    """A process run from the cluster's bin/ (as kwokctl runs its components), recorded in its pids/."""
    (cluster_dir / "bin").mkdir(parents=True, exist_ok=True)
    (cluster_dir / "pids").mkdir(exist_ok=True)
    (cluster_dir / "bin" / component).symlink_to(shutil.which("sleep"))
    process = subprocess.Popen([str(cluster_dir / "bin" / component), "60"])
    (cluster_dir / "pids" / f"{component}.pid").write_text(f"{process.pid}\n")
    deadline = time.monotonic() + 10
    while str(cluster_dir / "bin").encode() not in Path(f"/proc/{process.pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline, "the process never ran its binary"  # forked, not yet exec'd
        time.sleep(0.01)
    return process


def test_stopped_components_are_found_from_kwokctls_pid_files(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "KWOK_CLUSTER_DIR", tmp_path)
    running = started(tmp_path, "kube-apiserver")
    gone = subprocess.Popen(["true"])
    gone.wait()
    (tmp_path / "pids" / "kube-controller-manager.pid").write_text(f"{gone.pid}\n")
    (tmp_path / "pids" / "kube-scheduler.pid").write_text(str(os.getpid()))  # a pid reused by another process
    (tmp_path / "pids" / "etcd.pid").write_text("not a pid")
    try:
        assert cluster._dead_components() == ["etcd", "kube-controller-manager", "kube-scheduler"]
    finally:
        running.kill()


def test_cluster_up_refuses_while_another_local_cluster_runs_and_names_how_to_stop_it(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "KWOK_HOME", tmp_path)
    monkeypatch.setattr(paths, "CLUSTER_NAME", "tensorkiln-test")
    (tmp_path / "clusters" / "tensorkiln-test" / "pids").mkdir(parents=True)  # this one: not running
    (tmp_path / "clusters" / "stopped" / "pids").mkdir(parents=True)
    (tmp_path / "clusters" / "stopped" / "pids" / "etcd.pid").write_text(str(os.getpid()))
    assert cluster.other_running_cluster() is None
    demo = started(tmp_path / "clusters" / "tensorkiln", "etcd")
    try:
        assert cluster.other_running_cluster() == "tensorkiln"
        monkeypatch.setattr(cluster.packages, "ensure", lambda *args: pytest.fail("went on"))
        with pytest.raises(SystemExit) as refused:
            cluster.up()
        assert "TENSORKILN_CLUSTER=tensorkiln tensorkiln-local cluster stop" in str(refused.value)
    finally:
        demo.kill()


def test_stop_stops_every_process_and_keeps_the_state(monkeypatch):
    actions = []
    monkeypatch.setattr(prometheus, "stop", lambda: actions.append("prometheus"))
    monkeypatch.setattr(kubeproxy, "stop", lambda: actions.append("kube-proxy"))
    monkeypatch.setattr(nodes, "existing", lambda: ["local-0"])
    monkeypatch.setattr(nodes, "shut_down", lambda name: actions.append(f"node {name}"))
    monkeypatch.setattr(nodes, "remove", lambda name: pytest.fail("removed a node's state"))
    monkeypatch.setattr(network, "teardown", lambda: pytest.fail("removed the network"))
    monkeypatch.setattr(processes, "stop", lambda pidfile: actions.append(f"stop {pidfile.name}"))
    monkeypatch.setattr(cluster, "_cluster_exists", lambda: True)
    monkeypatch.setattr(cluster, "_kwokctl", lambda *args: actions.append("kwokctl " + " ".join(args)))
    cluster.stop()
    assert actions == [
        "prometheus",
        "kube-proxy",
        "stop engine-registry.pid",  # it listens on local-0's gateway: before the node's bridge goes
        "node local-0",
        "stop registry.pid",
        "kwokctl stop cluster",
    ]


def test_cluster_up_starts_again_a_component_that_exited_while_another_was_starting(monkeypatch):
    # After a machine restart, the kube-apiserver gave up on an etcd still replaying its backend.
    still_dead = [["etcd", "kube-apiserver"], ["kube-apiserver"], []]
    starts = []
    monkeypatch.setattr(cluster, "_dead_components", lambda: still_dead.pop(0))
    monkeypatch.setattr(cluster, "_api_ready", lambda: not still_dead)
    monkeypatch.setattr(cluster, "_kwokctl", lambda *args: starts.append(args))
    cluster._restart_stopped_components()
    assert starts == [("start", "cluster", "--wait", "60s")] * 2


def down_actions(monkeypatch, other_running: str | None) -> list[str]:
    actions = []
    monkeypatch.setattr(prometheus, "stop", lambda: actions.append("prometheus"))
    monkeypatch.setattr(kubeproxy, "stop", lambda: actions.append("kube-proxy"))
    monkeypatch.setattr(nodes, "existing", lambda: ["local-0", "local-1"])
    monkeypatch.setattr(nodes, "remove", lambda name, keep_bridge: actions.append(f"node {name} {keep_bridge=}"))
    monkeypatch.setattr(network, "teardown", lambda: actions.append("network"))
    monkeypatch.setattr(processes, "stop", lambda pidfile: actions.append(f"stop {pidfile.name}"))
    monkeypatch.setattr(cluster, "_cluster_exists", lambda: True)
    monkeypatch.setattr(cluster, "_kwokctl", lambda *args: actions.append("kwokctl " + " ".join(args)))
    monkeypatch.setattr(cluster, "other_running_cluster", lambda: other_running)
    cluster.down()
    return actions


def test_down_stops_every_component_then_deletes_the_control_plane(monkeypatch):
    """`cluster down` in the order that leaves nothing behind: what runs on the nodes' network, the
    nodes, the network rules, the registry, and the control plane last."""
    assert down_actions(monkeypatch, None) == [
        "prometheus",
        "kube-proxy",
        "stop engine-registry.pid",
        "node local-0 keep_bridge=False",
        "node local-1 keep_bridge=False",
        "network",
        "stop registry.pid",
        "kwokctl delete cluster",
    ]


def test_down_leaves_the_shared_network_to_another_cluster_that_runs(monkeypatch):
    assert down_actions(monkeypatch, "tensorkiln") == [
        "prometheus",
        "kube-proxy",
        "stop engine-registry.pid",
        "node local-0 keep_bridge=True",
        "node local-1 keep_bridge=True",
        "stop registry.pid",
        "kwokctl delete cluster",
    ]


class Started(Exception):
    """Raised where `up` would go on to start the cluster: what came before is what the test checks."""


def test_up_with_stop_others_stops_the_local_cluster_that_runs_then_starts_its_own(monkeypatch):
    """make demo, make test, make demo: each target stops the other's cluster (kept, to be resumed) where
    `cluster up` alone refuses."""
    running, stopped = ["tensorkiln"], []
    monkeypatch.setattr(cluster, "other_running_cluster", lambda: running[0] if running else None)
    monkeypatch.setattr(cluster, "stop_other", lambda name: (stopped.append(name), running.remove(name)))
    monkeypatch.setattr(cluster.packages, "ensure", lambda *_: (_ for _ in ()).throw(Started()))
    with pytest.raises(Started):
        cluster.up(stop_others=True)
    assert stopped == ["tensorkiln"]


def test_up_alone_refuses_while_another_local_cluster_runs(monkeypatch):
    monkeypatch.setattr(cluster, "other_running_cluster", lambda: "tensorkiln")
    monkeypatch.setattr(cluster, "stop_other", lambda name: pytest.fail("stopped without --stop-others"))
    with pytest.raises(SystemExit, match="TENSORKILN_CLUSTER=tensorkiln tensorkiln-local cluster stop"):
        cluster.up()
