"""The chart's webhook in cert-manager mode, with the real cert-manager: its CRDs from the pinned
module's deploy/crds, its controller and cainjector built from Go modules (localcluster/build/
certmanager) and run as local processes acting in the release's namespace only. cert-manager
issues the chart's Certificate from its self-signed Issuer into the Secret the operator mounts,
cainjector writes the CA into the chart's ValidatingWebhookConfiguration, and the real API server
calls the webhook through the chart's Service (service_proxy, a SIMULATION of kube-proxy).
The operator pod is never replaced: its Secret volume is optional and starts empty, and the local
node agent, like a kubelet, re-syncs it once cert-manager has issued the Secret, and again when a
renewal (triggered as `cmctl renew` does) replaces it.
The CRDs are removed afterwards when the cluster lacked them.
"""

import base64
import datetime
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from tensorkiln_local.cluster import binaries, paths

from . import helm_release
from .conftest import free_port
from .helm_release import container_log, wait_operator_ready
from .helpers import wait_for
from .service_proxy import service_proxy
from .test_helm_webhook import _assert_webhook_judges, _ca_bundle

# The shared fixtures, found by pytest as this module's attributes.
registry_volume, release, tools = helm_release.registry_volume, helm_release.release, helm_release.tools

pytestmark = pytest.mark.cluster
MODULE = "github.com/cert-manager/cert-manager"


def _crds() -> list[dict]:
    """cert-manager's CRDs, from the source of the module the binary was built from."""
    build_dir = paths.GO_BUILD_DIR / "certmanager"
    found = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", MODULE],
        cwd=build_dir,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
        capture_output=True,
        text=True,
        check=True,
    )
    crd_dir = Path(found.stdout.strip()) / "deploy" / "crds"
    return [yaml.safe_load(p.read_text()) for p in sorted(crd_dir.glob("*.yaml"))]


@pytest.fixture
def cert_manager(api, namespace, tmp_path):
    bin_dir = binaries.ensure(("certmanager",))
    extensions = client.ApiextensionsV1Api(api)
    existing = {crd.metadata.name for crd in extensions.list_custom_resource_definition().items}
    created = [crd["metadata"]["name"] for crd in _crds() if crd["metadata"]["name"] not in existing]
    for crd in _crds():
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
    return {"webhook": {"enabled": True, "failurePolicy": "Fail", "port": free_port()}}


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
    with service_proxy(api, namespace, name):
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
    mounted = paths.LOCALNODE_STATE / "pods" / pod.metadata.uid / "volumes" / "webhook-cert" / "tls.crt"
    wait_for(lambda: mounted.read_bytes() == renewed, timeout=60, what="the renewed certificate in the pod's volume")
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
