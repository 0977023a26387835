"""The chart's webhook in cert-manager mode, with the real cert-manager: its CRDs from the pinned
module's deploy/crds, its controller and cainjector built from Go modules (localcluster/go/
cluster) and run as local processes acting in the release's namespace only. cert-manager
issues the chart's Certificate from its self-signed Issuer into the Secret the operator mounts,
cainjector writes the CA into the chart's ValidatingWebhookConfiguration, and the real API server
calls the webhook through the chart's Service (kube-proxy routes its ClusterIP).
The operator pod is never replaced: its Secret volume is optional and starts empty, and the kubelet
re-syncs it once cert-manager has issued the Secret, and again when a renewal (triggered as `cmctl
renew` does) replaces it.
The CRDs are removed afterwards when the cluster lacked them.
"""

import base64
import datetime
import os
import subprocess

import pytest
from kubernetes import client
from tensorkiln_local.cluster import binaries, certmanager, paths

from . import helm_release
from .helm_release import container_log, wait_operator_ready
from .helpers import wait_for
from .test_helm_webhook import _assert_webhook_judges, _ca_bundle

# The shared fixtures, found by pytest as this module's attributes.
registry_volume, release, tools = helm_release.registry_volume, helm_release.release, helm_release.tools

pytestmark = pytest.mark.cluster


@pytest.fixture
def cert_manager(api, namespace, tmp_path):
    bin_dir = binaries.ensure(("certmanager",))
    extensions = client.ApiextensionsV1Api(api)
    existing = {crd.metadata.name for crd in extensions.list_custom_resource_definition().items}
    created = [crd["metadata"]["name"] for crd in certmanager.crds() if crd["metadata"]["name"] not in existing]
    for crd in certmanager.crds():
        if crd["metadata"]["name"] in created:
            extensions.create_custom_resource_definition(crd)

    def established():
        return all(
            any(
                c.type == "Established" and c.status == "True"
                for c in extensions.read_custom_resource_definition(n).status.conditions or []
            )
            for n in created
        )

    wait_for(established, timeout=60, what="cert-manager's CRDs established")
    processes = []
    for command in ("cert-manager-controller", "cert-manager-cainjector"):
        log = (tmp_path / f"{command}.log").open("w")
        processes.append(
            subprocess.Popen(
                [str(bin_dir / command), "--kubeconfig", os.environ["KUBECONFIG"], "--namespace", namespace],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
    try:
        yield tmp_path
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=30)
        for name in created:
            extensions.delete_custom_resource_definition(name)


@pytest.fixture
def chart_values(cert_manager) -> dict:
    """cert-manager mode (the default, chosen since the cluster serves cert-manager.io/v1)."""
    return {"webhook": {"enabled": True, "failurePolicy": "Fail"}}


def test_cert_manager_issues_and_injects_the_certificate_the_api_server_checks(api, namespace, release, cert_manager):
    core, admission = client.CoreV1Api(api), client.AdmissionregistrationV1Api(api)
    custom = client.CustomObjectsApi(api)
    name = f"{release}-tensorkiln-webhook"
    secret = f"{release}-tensorkiln-webhook-tls"

    def logs() -> str:
        return "\n".join(p.read_text()[-3000:] for p in sorted(cert_manager.glob("*.log")))

    def certificate_ready():
        certificate = custom.get_namespaced_custom_object("cert-manager.io", "v1", namespace, "certificates", name)
        conditions = certificate.get("status", {}).get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    try:
        wait_for(certificate_ready, timeout=120, what=f"Certificate {name} Ready")
    except pytest.fail.Exception:
        pytest.fail(f"Certificate {name} not Ready\n{logs()}")
    data = core.read_namespaced_secret(secret, namespace).data
    assert {"tls.crt", "tls.key", "ca.crt"} <= data.keys()
    ca = base64.b64decode(data["ca.crt"])
    try:
        wait_for(lambda: _ca_bundle(admission, name) == ca, timeout=60, what="cainjector to write the caBundle")
    except pytest.fail.Exception:
        pytest.fail(f"caBundle not injected\n{logs()}")

    pod = wait_operator_ready(core, namespace, release)
    try:
        _assert_webhook_judges(api, namespace)
    except AssertionError as error:
        pytest.fail(f"{error}\n{container_log(pod)}")

    # A renewal in place reaches the running container's files, with no restart.
    issued = core.read_namespaced_secret(secret, namespace).data["tls.crt"]
    _renew(custom, namespace, name)
    wait_for(
        lambda: core.read_namespaced_secret(secret, namespace).data["tls.crt"] != issued,
        timeout=90,
        what="cert-manager to renew the certificate",
    )
    renewed = base64.b64decode(core.read_namespaced_secret(secret, namespace).data["tls.crt"])
    kubectl = [str(paths.BIN_DIR / "kubectl"), "--kubeconfig", str(paths.KUBECONFIG)]
    mounted = [*kubectl, "exec", "-n", namespace, pod.metadata.name, "-c", "operator", "--",
               "cat", "/etc/tensorkiln/webhook/tls.crt"]  # fmt: skip

    def in_volume() -> bytes:
        return subprocess.run(mounted, capture_output=True, check=True).stdout

    # The kubelet refreshes Secret volumes on its sync period (a minute) plus its cache's TTL.
    wait_for(lambda: in_volume() == renewed, timeout=150, what="the renewed certificate in the pod's volume")
    now = core.read_namespaced_pod(pod.metadata.name, namespace)
    assert now.status.container_statuses[0].restart_count == pod.status.container_statuses[0].restart_count


def _renew(custom: client.CustomObjectsApi, namespace: str, name: str) -> None:
    """What `cmctl renew` does: the Certificate's Issuing condition set to True, ManuallyTriggered."""
    certificate = custom.get_namespaced_custom_object("cert-manager.io", "v1", namespace, "certificates", name)
    status = certificate.setdefault("status", {})
    status["conditions"] = [c for c in status.get("conditions", []) if c["type"] != "Issuing"] + [
        {
            "type": "Issuing",
            "status": "True",
            "reason": "ManuallyTriggered",
            "message": "Certificate re-issuance manually triggered",
            "lastTransitionTime": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "observedGeneration": certificate["metadata"]["generation"],
        }
    ]
    custom.replace_namespaced_custom_object_status(
        "cert-manager.io", "v1", namespace, "certificates", name, certificate
    )
