"""The local node agent against the real cluster: pods scheduled onto local-0 run as processes.

Pods are not bound by hand: kube-scheduler places them through nodeSelector
kubernetes.io/hostname=local-0, as it would any workload. Needs `tensorkiln-local cluster up`
(which starts the agent); the module is skipped when the API server does not answer.
"""

import ipaddress
import os
import urllib.request
import uuid
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException
from tensorkiln_local.cluster import paths
from tensorkiln_local.node.kube import Kube

from .helpers import wait_for

pytestmark = pytest.mark.cluster

NODE = "local-0"
ON_LOCAL_NODE = {"nodeSelector": {"kubernetes.io/hostname": NODE}}
DEFAULT_KUBECONFIG = Path.home() / ".kwok/clusters/tensorkiln/kubeconfig.yaml"


@pytest.fixture(scope="module")
def kube():
    path = os.environ.get("KUBECONFIG", str(DEFAULT_KUBECONFIG))
    try:
        kube = Kube.from_kubeconfig(path)
        kube.call("GET", "/version", timeout_s=5)
    except Exception as exc:
        pytest.skip(f"the cluster API server does not answer (kubeconfig {path}): {exc}")
    return kube


@pytest.fixture
def ns(kube):
    name = f"localnode-{uuid.uuid4().hex[:8]}"
    kube.call("POST", "/api/v1/namespaces", body={"metadata": {"name": name}})
    yield name
    kube.call("DELETE", f"/api/v1/namespaces/{name}")


def create(kube, path, body):
    """Create, retrying while a fresh namespace has no default ServiceAccount yet."""

    def attempt():
        try:
            return kube.call("POST", path, body=body)
        except ApiException as exc:
            if exc.status == 403 and "serviceaccount" in str(exc.body).lower():
                return None
            raise

    return wait_for(attempt, timeout=30, interval=0.5, what=f"creating {body['metadata']['name']}")


def run_pod(kube, ns, name, *containers, init=(), **spec):
    body = {
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            **ON_LOCAL_NODE,
            "containers": list(containers),
            "initContainers": list(init),
            **spec,
        },
    }
    return create(kube, f"/api/v1/namespaces/{ns}/pods", body)


def sh(script, name="main", **fields):
    return {"name": name, "image": "busybox:1.36", "command": ["sh", "-c", script], **fields}


def get_pod(kube, ns, name):
    return kube.get_or_none(f"/api/v1/namespaces/{ns}/pods/{name}")


def wait_phase(kube, ns, name, *phases, timeout_s=60):
    def reached():
        pod = get_pod(kube, ns, name)
        return pod if pod and pod["status"].get("phase") in phases else None

    pod = wait_for(reached, timeout=timeout_s, interval=0.5, what=f"pod {ns}/{name} to reach {phases}")
    assert pod["spec"]["nodeName"] == NODE
    return pod


def terminated(pod):
    return pod["status"]["containerStatuses"][0]["state"]["terminated"]


def test_node_is_ready_and_describes_this_machine(kube):
    node = kube.call("GET", f"/api/v1/nodes/{NODE}")
    conditions = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert conditions["Ready"] == "True"
    labels = node["metadata"]["labels"]
    assert labels["tensorkiln.dev/local-node"] == "true"
    assert labels["node.kubernetes.io/instance-type"] == "local"
    assert "feature.node.kubernetes.io/cpu-model.vendor_id" in labels
    assert "kwok.x-k8s.io/node" not in node["metadata"].get("annotations", {})
    assert not [t for t in node["spec"].get("taints", []) if not t["key"].startswith("node.kubernetes.io/")]
    lease = kube.call("GET", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE}")
    assert lease["spec"]["holderIdentity"] == NODE


def test_failing_container_reports_exit_code_and_message(kube, ns):
    run_pod(kube, ns, "fail", sh("echo done > /dev/termination-log; exit 3"))
    pod = wait_phase(kube, ns, "fail", "Failed", "Succeeded")
    assert pod["status"]["phase"] == "Failed"
    assert terminated(pod)["exitCode"] == 3
    assert terminated(pod)["message"].strip() == "done"


def test_true_succeeds(kube, ns):
    run_pod(kube, ns, "ok", {"name": "main", "image": "busybox:1.36", "command": ["true"]})
    pod = wait_phase(kube, ns, "ok", "Failed", "Succeeded")
    assert pod["status"]["phase"] == "Succeeded"
    assert terminated(pod)["exitCode"] == 0


def test_http_server_becomes_ready_on_its_pod_ip(kube, ns):
    server = {
        "name": "web",
        "image": "python:3.11",
        "command": ["python3", "-m", "http.server", "8080", "--bind", "$(POD_IP)"],
        "ports": [{"name": "http", "containerPort": 8080}],
        "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1},
    }
    run_pod(kube, ns, "web", server)

    def ready():
        pod = get_pod(kube, ns, "web")
        conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}
        return pod if conditions.get("Ready") == "True" else None

    pod = wait_for(ready, timeout=60, interval=0.5, what="pod web to be Ready")
    pod_ip = pod["status"]["podIP"]
    assert ipaddress.ip_address(pod_ip) in ipaddress.ip_network("127.0.0.0/8")
    assert pod["status"]["podIPs"] == [{"ip": pod_ip}] and pod["status"]["hostIP"] == "127.0.0.1"
    with urllib.request.urlopen(f"http://{pod_ip}:8080/", timeout=5) as reply:
        assert reply.status == 200


def test_job_completes(kube, ns):
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "job"},
        "spec": {
            "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", **ON_LOCAL_NODE, "containers": [sh("echo compiled")]}},
        },
    }
    create(kube, f"/apis/batch/v1/namespaces/{ns}/jobs", job)

    def complete():
        status = kube.call("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/job").get("status", {})
        if any(c["type"] == "Failed" and c["status"] == "True" for c in status.get("conditions", [])):
            pytest.fail(f"job failed: {status}")
        return any(c["type"] == "Complete" and c["status"] == "True" for c in status.get("conditions", []))

    wait_for(complete, timeout=90, interval=0.5, what="job to complete")


def test_job_pod_failure_policy_sees_the_exit_code(kube, ns):
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "bad-input"},
        "spec": {
            "backoffLimit": 3,
            "podFailurePolicy": {
                "rules": [
                    {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [2]}}
                ]
            },
            "template": {"spec": {"restartPolicy": "Never", **ON_LOCAL_NODE, "containers": [sh("exit 2")]}},
        },
    }
    create(kube, f"/apis/batch/v1/namespaces/{ns}/jobs", job)

    def failed():
        status = kube.call("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/bad-input").get("status", {})
        return next((c for c in status.get("conditions", []) if c["type"] == "Failed" and c["status"] == "True"), None)

    assert wait_for(failed, timeout=90, interval=0.5, what="job to fail")["reason"] == "PodFailurePolicy"


def test_deleting_a_running_pod_kills_its_process(kube, ns):
    run_pod(kube, ns, "sleeper", sh("sleep 3600"))
    pod = wait_phase(kube, ns, "sleeper", "Running")
    pid = int(pod["status"]["containerStatuses"][0]["containerID"].removeprefix("local://"))
    assert Path(f"/proc/{pid}").exists()
    kube.call("DELETE", f"/api/v1/namespaces/{ns}/pods/sleeper")
    wait_for(lambda: get_pod(kube, ns, "sleeper") is None, timeout=30, interval=0.5, what="pod sleeper to disappear")
    assert not Path(f"/proc/{pid}").exists()


def test_config_map_env_and_empty_dir_shared_with_init_container(kube, ns):
    create(
        kube, f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": "settings"}, "data": {"greeting": "hello"}}
    )
    mount = [{"name": "work", "mountPath": "/work"}]
    run_pod(
        kube,
        ns,
        "shared",
        sh(
            'printf "%s %s" "$GREETING" "$(cat /work/from-init)" > /dev/termination-log',
            volumeMounts=mount,
            env=[{"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "greeting"}}}],
        ),
        init=[sh("printf world > /work/from-init", name="init", volumeMounts=mount)],
        volumes=[{"name": "work", "emptyDir": {}}],
    )
    pod = wait_phase(kube, ns, "shared", "Failed", "Succeeded")
    assert pod["status"]["phase"] == "Succeeded", pod["status"]
    assert terminated(pod)["message"] == "hello world"
    assert pod["status"]["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"


def test_pod_reaches_the_api_as_its_service_account(kube, ns):
    """ServiceAccount admission mounts the token; the agent names the API server and the token's
    directory, and the project's client (tensorkiln.kube) authenticates with it. The default
    ServiceAccount has no RBAC grants: listing pods is forbidden, as it is in any cluster."""
    script = (
        "from kubernetes import client\n"
        "from tensorkiln import kube\n"
        "api = kube.api_client()\n"
        "review = client.AuthenticationV1Api(api).create_self_subject_review({'metadata': {}})\n"
        "print(review.status.user_info.username, end='', file=open('/dev/termination-log', 'w'))\n"
        "try:\n"
        "    client.CoreV1Api(api).list_namespaced_pod(open(kube.service_account_dir() / 'namespace').read())\n"
        "except client.ApiException as exc:\n"
        "    raise SystemExit(0 if exc.status == 403 else 2)\n"
        "raise SystemExit(1)\n"
    )
    run_pod(kube, ns, "sa", {"name": "main", "image": "python:3.11", "command": ["python3", "-c", script]})
    pod = wait_phase(kube, ns, "sa", "Failed", "Succeeded")
    assert any(v["name"].startswith("kube-api-access-") for v in pod["spec"]["volumes"])
    assert terminated(pod)["message"] == f"system:serviceaccount:{ns}:default", terminated(pod)
    assert pod["status"]["phase"] == "Succeeded", terminated(pod)


def test_claim_bound_to_a_host_path_volume_is_the_pod_mount(kube, ns, tmp_path):
    pv = f"{ns}-data"
    (tmp_path / "in.txt").write_text("from the volume\n")
    spec = {
        "capacity": {"storage": "1Gi"},
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": "",
        "hostPath": {"path": str(tmp_path), "type": "Directory"},
        "claimRef": {"namespace": ns, "name": "data"},
    }
    kube.call("POST", "/api/v1/persistentvolumes", body={"metadata": {"name": pv}, "spec": spec})
    try:
        claim = {
            "metadata": {"name": "data"},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "",
                "volumeName": pv,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
        create(kube, f"/api/v1/namespaces/{ns}/persistentvolumeclaims", claim)
        mount = {"name": "data", "mountPath": "/data"}
        run_pod(
            kube,
            ns,
            "pvc",
            sh("cat /data/in.txt > /dev/termination-log && echo written > /data/out.txt", volumeMounts=[mount]),
            volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        )
        pod = wait_phase(kube, ns, "pvc", "Failed", "Succeeded", timeout_s=90)
        assert pod["status"]["phase"] == "Succeeded", terminated(pod)
        assert terminated(pod)["message"] == "from the volume\n"
        assert (tmp_path / "out.txt").read_text() == "written\n"
    finally:
        kube.call("DELETE", f"/api/v1/persistentvolumes/{pv}")


def test_secret_volume_waits_for_its_secret_and_follows_its_updates(kube, ns):
    """As a kubelet: a missing Secret holds the pod (ContainerCreating, a FailedMount Event) until
    it exists, and the running container reads the Secret's new data after the next sync (15 s)."""
    mounts = [{"name": "tls", "mountPath": "/etc/tls"}]
    reader = sh("while :; do cat /etc/tls/tls.crt; echo; sleep 1; done", volumeMounts=mounts)
    run_pod(kube, ns, "reader", reader, volumes=[{"name": "tls", "secret": {"secretName": "cert"}}])
    held = 'MountVolume.SetUp failed for volume "tls" : secret "cert" not found'
    selector = {"fieldSelector": "involvedObject.name=reader,reason=FailedMount"}
    (event,) = wait_for(
        lambda: kube.call("GET", f"/api/v1/namespaces/{ns}/events", query=selector)["items"],
        timeout=30,
        interval=0.5,
        what="a FailedMount event",
    )
    assert (event["type"], event["message"], event["source"]["host"]) == ("Warning", held, NODE)
    status = get_pod(kube, ns, "reader")["status"]
    assert status["phase"] == "Pending"
    assert status["containerStatuses"][0]["state"]["waiting"] == {"reason": "ContainerCreating", "message": held}

    create(kube, f"/api/v1/namespaces/{ns}/secrets", {"metadata": {"name": "cert"}, "stringData": {"tls.crt": "first"}})
    pod = wait_phase(kube, ns, "reader", "Running", timeout_s=30)
    log = paths.LOCALNODE_STATE / "pods" / pod["metadata"]["uid"] / "main" / "log"
    wait_for(lambda: log.exists() and "first" in log.read_text(), timeout=15, interval=0.5, what="the first data read")
    body = {"stringData": {"tls.crt": "renewed"}}
    kube.call("PATCH", f"/api/v1/namespaces/{ns}/secrets/cert", body=body, patch="merge")
    wait_for(lambda: "renewed" in log.read_text(), timeout=45, interval=0.5, what="the container to read the new data")
    assert get_pod(kube, ns, "reader")["status"]["containerStatuses"][0]["restartCount"] == 0
