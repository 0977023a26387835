"""A real Prometheus for the local cluster: Debian's `prometheus` (2.42), run as a plain process.

Debian builds Prometheus without Kubernetes service discovery (its NEWS.Debian: "Kubernetes
support has been completely removed"; `kubernetes_sd_configs` is an unknown field there). So the
detached process started here (`python -m tensorkiln_local.cluster.prometheus`) is Prometheus as a
child plus the discovery it lacks: every two seconds it lists the cluster's pods and writes them to
a file_sd file with the `__meta_kubernetes_*` labels that `kubernetes_sd_configs` (role pod) gives
a pod, Prometheus's documented way to plug in a custom discovery. What is scraped and how series
are labelled is decided by the standard relabelling below, run by Prometheus itself; a real
cluster puts the same RELABEL_CONFIGS under a `kubernetes_sd_configs: [{role: pod}]` job.

The Debian service is never used: there is no systemd here, and it would bring its own config.
"""

import json
import re
import subprocess
import sys
import time
import urllib.request

import yaml
from kubernetes import client

from tensorkiln_local.cluster import connection, network, paths, processes

BINARY = "/usr/bin/prometheus"
PORT = 9091  # not Prometheus's default 9090, where a Debian service may listen
# It listens on the real node local-0's address (its bridge, nodes.py): this machine and the pods
# reach it there, in the cluster through the Service `prometheus` in tensorkiln-local (install.py).
ADDRESS = network.node_gateway(0)
STATE = paths.STATE_DIR / "prometheus"
PIDFILE = STATE / "prometheus.pid"
LOGFILE = STATE / "prometheus.log"
CONFIG = STATE / "prometheus.yml"
TARGETS = STATE / "pods.json"
DISCOVERY_INTERVAL_S = 2.0
POD = "__meta_kubernetes_pod_"

# Keep Running pods annotated prometheus.io/scrape "true"; port and path from their annotations;
# series labelled namespace, pod and hardware_class. Triton labels its own series `model` (the
# InferenceModel's name), so the pod's model label is not copied. Pods on kwok-simulated nodes
# have pod IPs where nothing listens: they stay targets and show as down (`up == 0`), the truth
# about them (a real cluster has no such nodes, so nothing here filters by node).
RELABEL_CONFIGS = [
    {"source_labels": [f"{POD}annotation_prometheus_io_scrape"], "regex": "true", "action": "keep"},
    {"source_labels": [f"{POD}phase"], "regex": "Running", "action": "keep"},
    {"source_labels": [f"{POD}annotation_prometheus_io_path"], "regex": "(.+)", "target_label": "__metrics_path__"},
    {
        "source_labels": ["__address__", f"{POD}annotation_prometheus_io_port"],
        "regex": r"([^:]+)(?::\d+)?;(\d+)",
        "replacement": "$1:$2",
        "target_label": "__address__",
    },
    {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
    {"source_labels": [f"{POD}name"], "target_label": "pod"},
    {"source_labels": [f"{POD}label_tensorkiln_dev_hardware_class"], "target_label": "hardware_class"},
]


def build_config(targets_file, scrape_interval: str = "2s") -> dict:
    """One job, `kubernetes-pods`: the pods listed in targets_file, relabelled the standard way."""
    return {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "scrape_configs": [
            {
                "job_name": "kubernetes-pods",
                "file_sd_configs": [{"files": [str(targets_file)]}],
                "relabel_configs": RELABEL_CONFIGS,
            }
        ],
    }


def _label_name(key: str) -> str:
    """A label or annotation key as kubernetes_sd puts it into a label name."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", key)


def pod_target(pod: dict) -> dict | None:
    """The file_sd target group of a pod (as the API returns it), labelled as kubernetes_sd labels
    it; None for a pod with no IP yet, which kubernetes_sd gives no target either."""
    status, meta = pod.get("status") or {}, pod["metadata"]
    if not status.get("podIP"):
        return None
    labels = {
        "__meta_kubernetes_namespace": meta["namespace"],
        f"{POD}name": meta["name"],
        f"{POD}ip": status["podIP"],
        f"{POD}node_name": pod["spec"].get("nodeName", ""),
        f"{POD}phase": status.get("phase", ""),
    }
    for kind in ("label", "annotation"):
        for key, value in (meta.get(f"{kind}s") or {}).items():
            labels[f"{POD}{kind}_{_label_name(key)}"] = value
    return {"targets": [status["podIP"]], "labels": labels}


def _discover(written: str | None) -> str | None:
    """Write the cluster's pods to TARGETS if they changed; what the file now holds."""
    try:
        with connection.api_client() as api:  # re-read: a re-created cluster has new certs
            reply = client.CoreV1Api(api).list_pod_for_all_namespaces(_preload_content=False, _request_timeout=10)
            pods = json.loads(reply.data)["items"]
    except Exception as error:  # the API server is restarting with the cluster: keep the last targets
        print(f"pod discovery: {error}", file=sys.stderr, flush=True)
        return written
    text = json.dumps([group for pod in pods if (group := pod_target(pod))], indent=1, sort_keys=True)
    if text != written:
        TARGETS.with_suffix(".tmp").write_text(text)
        TARGETS.with_suffix(".tmp").replace(TARGETS)  # file_sd never reads a half-written file
    return text


def _serve() -> int:
    """The detached process: Prometheus as a child, and the pod discovery that feeds it."""
    server = subprocess.Popen(
        [
            BINARY,
            f"--config.file={CONFIG}",
            f"--storage.tsdb.path={STATE / 'data'}",
            "--storage.tsdb.retention.time=2h",
            f"--web.listen-address={ADDRESS}:{PORT}",
        ]
    )
    written = None
    while server.poll() is None:
        written = _discover(written)
        time.sleep(DISCOVERY_INTERVAL_S)
    return server.returncode


def url() -> str:
    return f"http://{ADDRESS}:{PORT}"


def _ready() -> bool:
    try:
        with urllib.request.urlopen(f"{url()}/-/ready", timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


def start(timeout: float = 60) -> int:
    """Start Prometheus and its pod discovery (restarted if the config changed); the pid."""
    STATE.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(build_config(TARGETS), sort_keys=False) + f"# served at {url()}\n"
    if not CONFIG.exists() or CONFIG.read_text() != text:
        stop()
        CONFIG.write_text(text)
    pid = processes.start([sys.executable, "-m", "tensorkiln_local.cluster.prometheus"], PIDFILE, LOGFILE)
    deadline = time.monotonic() + timeout
    while not _ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"Prometheus did not become ready at {url()} in {timeout:.0f}s (log: {LOGFILE})")
        time.sleep(0.5)
    return pid


def stop() -> bool:
    """Stop Prometheus and its discovery (one process group); True if they ran."""
    return processes.stop(PIDFILE)


if __name__ == "__main__":
    sys.exit(_serve())
