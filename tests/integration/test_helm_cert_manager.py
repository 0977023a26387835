"""The chart's webhook in cert-manager mode, with the real cert-manager: its CRDs from the pinned
module's deploy/crds, its controller and cainjector built from Go modules (localcluster/build/
certmanager) and run as local processes acting in the release's namespace only. cert-manager
issues the chart's Certificate from its self-signed Issuer into the Secret the operator mounts,
cainjector writes the CA into the chart's ValidatingWebhookConfiguration, and the real API server
calls the webhook through the chart's Service (service_proxy, a SIMULATION of kube-proxy).
The operator pod is replaced once the Secret is issued: the local node agent does not refresh
Secret volumes, so cert-manager's renewals in place are not covered here.
The CRDs are removed afterwards when the cluster lacked them.
"""

import base64
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from tensorkiln.localcluster import binaries, paths

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

    # The local node agent writes a Secret volume once, when the pod starts, and cert-manager made
    # the Secret after that (a kubelet would hold the pod until the Secret exists, and then keep
    # the files in step): a new pod mounts the issued certificate.
    selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=operator"
    core.delete_collection_namespaced_pod(namespace, label_selector=selector)
    wait_for(
        lambda: all(p.metadata.deletion_timestamp is None for p in core.list_namespaced_pod(namespace).items),
        timeout=120,
        what="the first operator pod gone",
    )
    pod = wait_operator_ready(core, namespace, release)
    with service_proxy(api, namespace, name):
        try:
            _assert_webhook_judges(api, namespace)
        except AssertionError as error:
            pytest.fail(f"{error}\n{container_log(pod)}")
