"""The chart's admission webhook, installed with `helm install` (fixtures: helm_release) and called
by the real API server through the chart's Service, with the certificate the operator keeps
(webhook.certManager false): it fills the chart's empty Secret and the caBundle, refuses a bad
InferenceModel naming the field, admits a good one, and renews the certificate while it runs.

failurePolicy is Fail here, so an admitted request proves the webhook answered (with Ignore, a
webhook the API server cannot reach admits everything). The certificate lives 4 minutes and is
renewed 3 minutes before expiry, so the running operator renews it about a minute after issuing.
The API server reaches the Service's ClusterIP through kube-proxy, as in any cluster.
Admission requests are server-side dry runs: the webhook is called, nothing is stored.
"""

import base64
import datetime
import json
import socket
import ssl

import pytest
from cryptography import x509
from kubernetes import client
from tensorkiln.admission import certificates, webhook
from tensorkiln_client.triton import ready_endpoints

from . import helm_release
from .helm_release import CLAIM, container_log, wait_operator_ready
from .helpers import wait_for
from .test_webhook import model, refusal

# The shared fixtures, found by pytest as this module's attributes.
registry_volume, release, tools = helm_release.registry_volume, helm_release.release, helm_release.tools

pytestmark = pytest.mark.cluster
DURATION, RENEW_BEFORE = "4m", "3m"


WEBHOOK_PORT = 9443  # the chart's default webhook.port


@pytest.fixture
def chart_values() -> dict:
    return {
        "webhook": {
            "enabled": True,
            "certManager": False,
            "failurePolicy": "Fail",
            "certDuration": DURATION,
            "certRenewBefore": RENEW_BEFORE,
        }
    }


def _secret_bundle(core, namespace, name) -> certificates.Bundle | None:
    data = core.read_namespaced_secret(name, namespace).data or {}
    if not {"ca.crt", "tls.crt", "tls.key"} <= data.keys():
        return None
    return certificates.Bundle(*(base64.b64decode(data[k]) for k in ("ca.crt", "tls.crt", "tls.key")))


def _ca_bundle(admission, name) -> bytes:
    config = admission.read_validating_webhook_configuration(name)
    return base64.b64decode(config.webhooks[0].client_config.ca_bundle or "")


def _served_serial(address: str, port: int, server_name: str, ca: bytes) -> int:
    """The serial of the certificate the webhook serves, verified against `ca` for the Service's name."""
    context = ssl.create_default_context(cadata=ca.decode())
    with socket.create_connection((address, port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=server_name) as tls:
            return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number


def _serial(bundle: certificates.Bundle) -> int:
    return x509.load_pem_x509_certificate(bundle.cert).serial_number


def _not_after(bundle: certificates.Bundle) -> datetime.datetime:
    return x509.load_pem_x509_certificate(bundle.cert).not_valid_after_utc


def _refusal_once_reachable(api, body) -> client.ApiException | None:
    """`refusal`, once the API server reaches the webhook: through the Service's ClusterIP, which
    kube-proxy routes a moment after the pod is ready; until then the call fails (500, "failed
    calling webhook"), as failurePolicy Fail says."""

    last = []

    def answered():
        error = refusal(api, body)
        last[:] = [error and error.body]
        unreachable = error is not None and error.status == 500 and "failed calling webhook" in (error.body or "")
        return None if unreachable else (error,)

    try:
        return wait_for(answered, timeout=60, what="the API server to reach the webhook through its Service")[0]
    except pytest.fail.Exception as timeout:
        pytest.fail(f"{timeout}; last answer: {last[0]}")


def _assert_webhook_judges(api, namespace):
    """The API server calls the webhook: a missing claim is refused naming the field, an existing one admitted."""
    error = _refusal_once_reachable(api, model(namespace, "missing-claim", uri="pvc://no-such-claim/model.onnx"))
    assert error is not None and error.status == 422, f"{error}: {error and error.body}"
    message = json.loads(error.body)["message"]
    assert webhook.WEBHOOK_NAME in message
    assert f"spec.source.uri: PersistentVolumeClaim no-such-claim does not exist in namespace {namespace}" in message
    assert refusal(api, model(namespace, "with-claim", uri=f"pvc://{CLAIM}/model.onnx")) is None


def test_operator_keeps_and_renews_the_certificate_the_api_server_checks(api, namespace, release, chart_values):
    core, admission = client.CoreV1Api(api), client.AdmissionregistrationV1Api(api)
    pod = wait_operator_ready(core, namespace, release)
    name = f"{release}-tensorkiln-webhook"
    secret = f"{release}-tensorkiln-webhook-tls"
    server_name = f"{name}.{namespace}.svc"

    # The operator filled the chart's empty Secret and wrote its CA into the caBundle.
    first = wait_for(lambda: _secret_bundle(core, namespace, secret), timeout=60, what=f"Secret {secret} filled")
    assert certificates.usable(first, [server_name, f"{server_name}.cluster.local"], renew_before=datetime.timedelta())
    duration = _not_after(first) - x509.load_pem_x509_certificate(first.cert).not_valid_before_utc
    assert duration - datetime.timedelta(minutes=5) == certificates.parse_duration(DURATION, "d")  # 5 min skew
    wait_for(lambda: _ca_bundle(admission, name) == first.ca, timeout=30, what="the caBundle from the Secret")

    # The Service selects the pod: its EndpointSlice lists the pod's address, ready.
    wait_for(
        lambda: pod.status.pod_ip in ready_endpoints(api, namespace, name), timeout=60, what=f"pod in Service {name}"
    )
    endpoint = (pod.status.pod_ip, WEBHOOK_PORT)
    try:
        _assert_webhook_judges(api, namespace)
    except AssertionError as error:
        pytest.fail(f"{error}\n{container_log(pod)}")

    # While running, the operator renews the certificate RENEW_BEFORE ahead of its expiry.
    renewed = wait_for(
        lambda: (b := _secret_bundle(core, namespace, secret)) and _serial(b) != _serial(first) and b,
        timeout=120,
        what=f"the operator to renew the certificate in Secret {secret}",
    )
    assert _not_after(renewed) > _not_after(first)
    # The new ca.crt trusts the new certificate and the one it replaced.
    assert certificates.ca_certificates(first.ca)[0] in certificates.ca_certificates(renewed.ca)
    # caBundle first (it trusts the old and the new certificate), then the new certificate is
    # served, by the same server: CA_PROPAGATION_SECONDS later.
    wait_for(lambda: _ca_bundle(admission, name) == renewed.ca, timeout=30, what="the caBundle renewed")
    wait_for(
        lambda: _served_serial(*endpoint, server_name, renewed.ca) == _serial(renewed),
        timeout=webhook.CA_PROPAGATION_SECONDS + 30,
        what="the webhook to serve the renewed certificate",
    )
    _assert_webhook_judges(api, namespace)

    # Renewed in place: the operator never restarted.
    assert not core.read_namespaced_pod(pod.metadata.name, namespace).status.container_statuses[0].restart_count
