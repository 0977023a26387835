"""The local CLI talks to the cluster it names (TENSORKILN_CLUSTER), whatever $KUBECONFIG or ~/.kube/config say.

`make test` created its cluster with kwokctl, which made it ~/.kube/config's current context; `make demo` then
ran `tensorkiln-local wait`, whose client fell back to ~/.kube/config and met the demo's API server (on the same
port) with the test cluster's CA: CERTIFICATE_VERIFY_FAILED (issue 44)."""

import ast
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from tensorkiln_api import GROUP, VERSION
from tensorkiln_local import converge
from tensorkiln_local.cluster import cluster, paths

REPO = Path(__file__).resolve().parents[2]


def kubeconfig(path: Path, server: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": server}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
        })
    )  # fmt: skip
    return path


@pytest.fixture
def api_server():
    """A loopback HTTP server answering the two lists `wait` reads with no items, recording the paths asked."""
    asked = []

    class Lists(BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path.split("?")[0])
            body = json.dumps({"apiVersion": f"{GROUP}/{VERSION}", "kind": "List", "items": []}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Lists)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", asked
    server.shutdown()
    server.server_close()


def test_wait_asks_the_named_clusters_api_server_whatever_the_shells_kubeconfig_says(
    tmp_path, monkeypatch, api_server, capsys
):
    url, asked = api_server
    # The shell's kubeconfig and ~/.kube/config both name another server (nothing listens on port 1).
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    kubeconfig(tmp_path / "home" / ".kube" / "config", "http://127.0.0.1:1")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "shell.yaml", "http://127.0.0.1:1")))
    monkeypatch.setattr(paths, "KUBECONFIG", kubeconfig(tmp_path / "cluster" / "kubeconfig.yaml", url))

    assert converge.wait(timeout=0) == 0
    assert "converged: 0 InferenceModels, 0 CompileJobs" in capsys.readouterr().out
    assert asked == [f"/apis/{GROUP}/{VERSION}/inferencemodels", f"/apis/{GROUP}/{VERSION}/compilejobs"]


def test_creating_a_cluster_leaves_the_users_kubeconfig_alone(tmp_path, monkeypatch):
    """kwokctl adds the cluster to ~/.kube/config as its current context unless told no file (`--kubeconfig ""`)."""
    calls = []
    monkeypatch.setattr(cluster.binaries, "ensure", lambda *args: tmp_path)
    monkeypatch.setattr(cluster, "_cluster_fingerprint", lambda bin_dir: "f")
    monkeypatch.setattr(cluster, "_cluster_exists", lambda: False)
    monkeypatch.setattr(paths, "STATE_DIR", tmp_path / "state")
    monkeypatch.setattr(cluster, "_kwokctl", lambda *args: calls.append(args))
    cluster._start_control_plane()
    (args,) = calls
    assert args[args.index("create") : args.index("create") + 2] == ("create", "cluster")
    assert args[args.index("--kubeconfig") + 1] == ""


LOCAL_TREES = ("localcluster/tensorkiln_local", "e2e", "tests/integration")


def api_client_calls(tree: Path) -> list[str]:
    """`<module>.api_client(...)` calls on a module other than `connection` in the .py files under `tree`."""
    found = []
    for path in sorted(tree.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner = node.func.value
            if node.func.attr == "api_client" and isinstance(owner, ast.Name) and owner.id != "connection":
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {owner.id}.api_client")
    return found


def test_the_local_cli_its_tests_and_benchmarks_reach_a_cluster_through_its_own_kubeconfig_only():
    """kube.api_client() falls back to $KUBECONFIG and ~/.kube/config; locally, connection.api_client() is the
    one way in (it names the cluster's kubeconfig)."""
    found = [call for tree in LOCAL_TREES for call in api_client_calls(REPO / tree)]
    assert found == ["localcluster/tensorkiln_local/cluster/connection.py:15: kube.api_client"]


@pytest.fixture
def late_kubeconfig(tmp_path, monkeypatch):
    """$KUBECONFIG set after the kubernetes library was imported (it reads it once, then), naming a server,
    and no ~/.kube/config: as in a test session that sets it for the cluster it names."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)
    path = kubeconfig(tmp_path / "late.yaml", "https://127.0.0.1:6443")
    monkeypatch.setenv("KUBECONFIG", str(path))
    return "https://127.0.0.1:6443"


def test_tensorkiln_infer_reads_kubeconfig_as_it_is_when_called(late_kubeconfig):
    """CI's test_serving_local: `tensorkiln infer` fell back to in-cluster configuration ('Service host/port is
    not set') once no ~/.kube/config stood in for the $KUBECONFIG the session had set."""
    from kubernetes import client
    from tensorkiln_client import infer

    infer.load_kube_config()
    assert client.Configuration.get_default_copy().host == late_kubeconfig


def test_the_operators_client_reads_kubeconfig_as_it_is_when_called(late_kubeconfig):
    from tensorkiln import kube

    with kube.api_client() as api:
        assert api.configuration.host == late_kubeconfig
