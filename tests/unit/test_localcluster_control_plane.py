"""The local cluster's control plane stays whole: no leader election to lose under load, and a
component that stopped anyway is found from kwokctl's pid files and started again by `cluster up`."""

import os
import subprocess

import yaml
from tensorkiln_local.cluster import cluster, kubeproxy, network, nodes, paths, processes, prometheus


def extra_args(component: str) -> dict[str, str]:
    config = next(d for d in yaml.safe_load_all(paths.KWOK_CONFIG.read_text()) if d["kind"] == "KwokctlConfiguration")
    patch = next(p for p in config["componentsPatches"] if p["name"] == component)
    return {a["key"]: a["value"] for a in patch["extraArgs"]}


def test_the_controller_manager_and_the_scheduler_run_without_leader_election():
    for component in ("kube-controller-manager", "kube-scheduler"):
        assert extra_args(component)["leader-elect"] == "false"


def test_stopped_components_are_found_from_kwokctls_pid_files(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "KWOK_CLUSTER_DIR", tmp_path)
    (tmp_path / "pids").mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()
    (tmp_path / "pids" / "kube-controller-manager.pid").write_text(f"{gone.pid}\n")
    (tmp_path / "pids" / "kube-apiserver.pid").write_text(str(os.getpid()))
    (tmp_path / "pids" / "etcd.pid").write_text("not a pid")
    assert cluster._dead_components() == ["etcd", "kube-controller-manager"]


def test_cluster_up_starts_again_a_component_that_exited_while_another_was_starting(monkeypatch):
    # After a machine restart, the kube-apiserver gave up on an etcd still replaying its backend.
    still_dead = [["etcd", "kube-apiserver"], ["kube-apiserver"], []]
    starts = []
    monkeypatch.setattr(cluster, "_dead_components", lambda: still_dead.pop(0))
    monkeypatch.setattr(cluster, "_api_ready", lambda: not still_dead)
    monkeypatch.setattr(cluster, "_kwokctl", lambda *args: starts.append(args))
    cluster._restart_stopped_components()
    assert starts == [("start", "cluster", "--wait", "60s")] * 2


def test_down_stops_every_component_then_deletes_the_control_plane(monkeypatch):
    """`cluster down` in the order that leaves nothing behind: what runs on the nodes' network, the
    nodes, the network rules, the registry, and the control plane last."""
    actions = []
    monkeypatch.setattr(prometheus, "stop", lambda: actions.append("prometheus"))
    monkeypatch.setattr(kubeproxy, "stop", lambda: actions.append("kube-proxy"))
    monkeypatch.setattr(nodes, "existing", lambda: ["local-0", "local-1"])
    monkeypatch.setattr(nodes, "remove", lambda name: actions.append(f"node {name}"))
    monkeypatch.setattr(network, "teardown", lambda: actions.append("network"))
    monkeypatch.setattr(processes, "stop", lambda pidfile: actions.append(f"stop {pidfile.name}"))
    monkeypatch.setattr(cluster, "_cluster_exists", lambda: True)
    monkeypatch.setattr(cluster, "_kwokctl", lambda *args: actions.append("kwokctl " + " ".join(args)))
    cluster.down()
    assert actions == [
        "prometheus",
        "kube-proxy",
        "node local-0",
        "node local-1",
        "network",
        "stop registry.pid",
        "kwokctl delete cluster",
    ]
