"""The local cluster's Prometheus: pod discovery in kubernetes_sd's labels, and the standard relabelling,
run by the real Prometheus's own `promtool check service-discovery` (Debian's prometheus package)."""

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from tensorkiln_local.cluster.prometheus import build_config, pod_target

PROMTOOL = Path("/usr/bin/promtool")
SCRAPE = {"prometheus.io/scrape": "true", "prometheus.io/port": "8002", "prometheus.io/path": "/metrics"}


def pod(name: str, ip: str = "127.0.0.12", phase: str = "Running", annotations=None, node: str = "local-0") -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": "serving",
            "labels": {"tensorkiln.dev/model": "ocr-cls", "tensorkiln.dev/hardware-class": "cpu-amd64-avx512"},
            "annotations": SCRAPE if annotations is None else annotations,
        },
        "spec": {"nodeName": node},
        "status": {"podIP": ip, "phase": phase},
    }


def test_a_pod_gets_the_labels_kubernetes_sd_gives_it():
    assert pod_target(pod("triton")) == {
        "targets": ["127.0.0.12"],
        "labels": {
            "__meta_kubernetes_namespace": "serving",
            "__meta_kubernetes_pod_name": "triton",
            "__meta_kubernetes_pod_ip": "127.0.0.12",
            "__meta_kubernetes_pod_node_name": "local-0",
            "__meta_kubernetes_pod_phase": "Running",
            "__meta_kubernetes_pod_label_tensorkiln_dev_model": "ocr-cls",
            "__meta_kubernetes_pod_label_tensorkiln_dev_hardware_class": "cpu-amd64-avx512",
            "__meta_kubernetes_pod_annotation_prometheus_io_scrape": "true",
            "__meta_kubernetes_pod_annotation_prometheus_io_port": "8002",
            "__meta_kubernetes_pod_annotation_prometheus_io_path": "/metrics",
        },
    }


def test_a_pod_without_an_ip_is_no_target():
    unscheduled = pod("new")
    unscheduled["status"] = {"phase": "Pending"}
    assert pod_target(unscheduled) is None


def test_config_scrapes_the_discovered_pods_every_interval(tmp_path):
    config = build_config(tmp_path / "pods.json", scrape_interval="5s")
    assert config["global"]["scrape_interval"] == "5s"
    (job,) = config["scrape_configs"]
    assert (job["job_name"], job["file_sd_configs"]) == ("kubernetes-pods", [{"files": [str(tmp_path / "pods.json")]}])


@pytest.mark.skipif(
    not PROMTOOL.exists(), reason="promtool comes with Debian's prometheus (tensorkiln-local cluster up)"
)
def test_prometheus_keeps_running_annotated_pods_at_their_port_and_path(tmp_path):
    custom = {**SCRAPE, "prometheus.io/port": "9000", "prometheus.io/path": "/stats"}
    pods = [
        pod("triton"),
        pod("on-kwok", ip="10.0.0.7", node="gpu-l4-0"),  # kept: shows as down, as it is
        pod("custom", ip="127.0.0.13", annotations=custom),
        pod("starting", phase="Pending"),
        pod("compile", annotations={}),
        pod("opted-out", annotations={**SCRAPE, "prometheus.io/scrape": "false"}),
    ]
    (tmp_path / "pods.json").write_text(json.dumps([pod_target(p) for p in pods]))
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(build_config(tmp_path / "pods.json")))
    discovered = subprocess.run(  # file_sd answers at once; promtool waits out its --timeout
        [PROMTOOL, "check", "service-discovery", "--timeout=1s", tmp_path / "prometheus.yml", "kubernetes-pods"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    kept = {target["labels"]["pod"]: target["labels"] for target in json.loads(discovered) if target["labels"]}
    assert sorted(kept) == ["custom", "on-kwok", "triton"]
    assert kept["triton"] == {
        "__address__": "127.0.0.12:8002",
        "__metrics_path__": "/metrics",
        "__scheme__": "http",
        "__scrape_interval__": "2s",
        "__scrape_timeout__": "2s",
        "instance": "127.0.0.12:8002",
        "job": "kubernetes-pods",
        "namespace": "serving",
        "pod": "triton",
        "hardware_class": "cpu-amd64-avx512",
    }
    assert (kept["custom"]["instance"], kept["custom"]["__metrics_path__"]) == ("127.0.0.13:9000", "/stats")
