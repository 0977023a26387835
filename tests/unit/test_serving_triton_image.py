"""The local node's mapping of nvcr.io/nvidia/tritonserver onto the nvidia-pytriton wheel's server."""

import os
import sys
import tempfile
from pathlib import Path

from tensorkiln_local.node.images import Launch, TritonServer, local_tritonserver, rule_for, tritonserver_launch
from tensorkiln_local.node.podspec import PodContext, plan_pod

SERVER = TritonServer(
    binary=Path("/wheel/pytriton/tritonserver/bin/tritonserver"),
    library_path=["/py/lib", "/wheel/nvidia_pytriton.libs"],
    backend_dir=Path("/state/tmp/tritonserver-0.7.0-py3.11"),
    python_bin="/venv/bin",
)
TRITON_ARGS = [
    "--model-repository=/models", "--model-control-mode=none", "--strict-readiness=true", "--allow-metrics=true",
    "--metrics-config=summary_latencies=true", "--http-port=8000", "--grpc-port=8001", "--metrics-port=8002",
]  # fmt: skip
ADDRESSES = ["--http-address=127.0.0.12", "--grpc-address=127.0.0.12", "--metrics-address=127.0.0.12"]


def test_tritonserver_runs_the_wheel_server_on_the_pod_ip():
    env = {"POD_IP": "127.0.0.12", "PATH": "/venv/bin:/usr/bin", "LD_LIBRARY_PATH": "/opt/mine"}
    launch = tritonserver_launch(Launch(["tritonserver"], TRITON_ARGS, env), SERVER)

    assert launch.command == ["/wheel/pytriton/tritonserver/bin/tritonserver"]
    assert launch.args == [*TRITON_ARGS, "--backend-directory=/state/tmp/tritonserver-0.7.0-py3.11", *ADDRESSES]
    assert launch.env == {
        "POD_IP": "127.0.0.12",
        "PATH": "/venv/bin:/venv/bin:/usr/bin",
        "LD_LIBRARY_PATH": "/py/lib:/wheel/nvidia_pytriton.libs:/opt/mine",
    }


def test_entrypoint_style_args_and_other_commands():
    env = {"POD_IP": "127.0.0.12", "PATH": "/usr/bin"}
    as_args = tritonserver_launch(Launch([], ["/opt/tritonserver/bin/tritonserver", "--http-port=8000"], env), SERVER)
    assert as_args.command == [str(SERVER.binary)]
    assert as_args.args == ["--http-port=8000", f"--backend-directory={SERVER.backend_dir}", *ADDRESSES]
    shell = Launch(["sh", "-c", "ls /models"], [], env)
    assert tritonserver_launch(shell, SERVER) == shell


def test_the_operators_triton_pod_maps_onto_this_machine(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "agent-tmp"))  # as the agent sets it
    pod = {
        "metadata": {"name": "triton-0", "namespace": "ns", "uid": "uid-1"},
        "spec": {
            "volumes": [{"name": "models", "emptyDir": {}}],
            "containers": [
                {
                    "name": "triton",
                    "image": "nvcr.io/nvidia/tritonserver:25.10-py3",
                    "command": ["tritonserver"],
                    "args": TRITON_ARGS,
                    "volumeMounts": [{"name": "models", "mountPath": "/models"}],
                    "readinessProbe": {"httpGet": {"path": "/v2/health/ready", "port": 8000}},
                }
            ],
        },
    }
    venv_bin = os.path.dirname(sys.executable)
    ctx = PodContext(tmp_path / "pod", "127.0.0.12", "127.0.0.1", "local-0", f"{venv_bin}:/usr/bin")
    assert rule_for("nvcr.io/nvidia/tritonserver:25.10-py3") is not None

    plan = plan_pod(pod, ctx, resolver=None).containers[0]

    backend_dir = next((tmp_path / "agent-tmp").iterdir())
    assert plan.argv[0].endswith("pytriton/tritonserver/bin/tritonserver") and Path(plan.argv[0]).is_file()
    assert plan.argv[1:] == [
        f"--model-repository={tmp_path}/pod/volumes/models", *TRITON_ARGS[1:],
        f"--backend-directory={backend_dir}", *ADDRESSES,
    ]  # fmt: skip
    assert plan.env["PATH"].split(":")[0] == venv_bin
    assert "nvidia_pytriton.libs" in [Path(p).name for p in plan.env["LD_LIBRARY_PATH"].split(":")]
    readiness = plan.probes["readiness"]
    assert (readiness.host, readiness.port, readiness.path) == ("127.0.0.12", 8000, "/v2/health/ready")
    stub = backend_dir / "python" / "triton_python_backend_stub"
    assert os.access(stub, os.X_OK)
    assert {p.name for p in stub.parent.iterdir()} >= {"libtriton_python.so", "triton_python_backend_utils.py"}


def test_the_backend_copy_is_made_once_and_reused(tmp_path):
    first = local_tritonserver(tmp_path)
    stub = first.backend_dir / "python" / "triton_python_backend_stub"
    before = stub.stat().st_mtime_ns
    assert local_tritonserver(tmp_path) == first
    assert stub.stat().st_mtime_ns == before
    assert not [p for p in stub.parent.iterdir() if p.name.startswith(".")]  # no partial copies left
