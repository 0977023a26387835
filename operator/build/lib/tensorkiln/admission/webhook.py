"""The validating admission webhook for InferenceModels, served by kopf (`@kopf.on.validate`).

kopf serves each admission handler at /<handler id>: the id is `validate-inferencemodel`, the path
the chart's ValidatingWebhookConfiguration calls. It refuses what the CRD's schema and CEL cannot
see (tensorkiln.review.checks: file:// outside the allowed roots, a missing claim or Secret)
with a message naming the field and the fix, and returns warnings (hardware matching no node, an
SLO target below the measured latency) that kubectl prints as `Warning:` lines.

Certificates, by settings (TENSORKILN_WEBHOOK_*), first match wins:

- managed (the local cluster): a self-signed CA, a server certificate for 127.0.0.1, and a
  ValidatingWebhookConfiguration of our own pointing at https://127.0.0.1:<port> (failurePolicy
  Ignore; only the watched namespaces), deleted again when the operator stops. kopf's own managed
  mode is not used: its configuration has no namespaceSelector, so an operator limited to one
  namespace would review every namespace's InferenceModels, and it adds a mutating configuration.
- cert Secret (the chart without cert-manager): the operator keeps a CA and certificate for its
  Service in that Secret (reused while valid) and writes the CA into the chart's configuration.
  While running it renews the certificate TENSORKILN_WEBHOOK_CERT_RENEW_BEFORE ahead of expiry
  and adopts one another replica wrote: caBundle first (old and new CA), then, after
  CA_PROPAGATION_SECONDS, the new certificate goes into the live TLS context, so the server never
  restarts and the API server trusts every certificate it is shown.
- files (cert-manager, or any mounted Secret): tls.crt and tls.key under the cert directory;
  kopf reloads them when they change.

Registered only when TENSORKILN_WEBHOOK_PORT is set: kopf refuses to start with admission
handlers and no server.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import functools
import itertools
import logging
import os
import ssl
import tempfile
import time
from pathlib import Path

import kopf
from kubernetes import client
from pydantic import ValidationError
from tensorkiln_api import GROUP, VERSION, InferenceModelSpec, field_errors
from tensorkiln_api.names import model_name_problems

from tensorkiln import kube
from tensorkiln.admission import certificates
from tensorkiln.apierrors import describe
from tensorkiln.builders.labels import HARDWARE_CLASS
from tensorkiln.cluster.state import ClusterState
from tensorkiln.controllers.context import OperatorContext
from tensorkiln.review import checks
from tensorkiln.review import cluster as review_cluster
from tensorkiln.settings import Settings

log = logging.getLogger(__name__)

HANDLER_ID = "validate-inferencemodel"  # kopf serves it at /validate-inferencemodel
WEBHOOK_NAME = "validate.inferencemodels.tensorkiln.dev"
MANAGED_BY = "tensorkiln-operator"
MANAGED_HOST = "127.0.0.1"
CHECK_SECONDS = 300  # the Secret is re-read at least this often (another replica may have renewed)
CA_PROPAGATION_SECONDS = 10  # between writing a caBundle and serving a certificate it alone trusts
CONFIGURATION_POLL_SECONDS = 2  # while the configuration to write the caBundle into does not exist


def judge(model: dict, old: dict | None, operation: str, review, namespaces: list[str]) -> tuple[list[str], list[str]]:
    """(errors, warnings) for one admission request; `review(model, spec)` gives the findings.

    Nothing is checked for objects outside the watched namespaces, objects being deleted, or an
    UPDATE that leaves the spec alone (kopf's own annotation patches, finalizer removal): a
    Secret deleted later must never stop the object from being updated or deleted.
    """
    meta = model.get("metadata", {})
    if namespaces and meta.get("namespace") not in namespaces:
        return [], []
    if meta.get("deletionTimestamp"):
        return [], []
    if operation == "UPDATE" and old is not None and old.get("spec") == model.get("spec"):
        return [], []
    if operation == "CREATE" and (problems := model_name_problems(meta.get("name") or "")):
        return problems, []  # as the CRD's rules say; nothing else about the cluster can be asked by that name
    try:
        spec = InferenceModelSpec.model_validate(model.get("spec") or {})
    except ValidationError as error:
        return field_errors(error), []
    try:
        findings = review(model, spec.model_dump(by_alias=True, exclude_none=True, mode="json"))
    except Exception as error:  # never a raw exception to the user: admit, and say what was not checked
        log.warning("admission review of %s/%s failed: %s", meta.get("namespace"), meta.get("name"), describe(error))
        return [], [
            f"TensorKiln could not check this model against the cluster ({describe(error)}); the operator checks "
            "it again before compiling and reports the result in the SpecValid condition"
        ]
    return [f.message for f in findings if f.is_error], [f.message for f in findings if not f.is_error]


def review_in_cluster(context: OperatorContext, model: dict, spec: dict) -> list[checks.Finding]:
    """The findings from the operator's shared cluster state and registry."""
    state = context.state
    meta = model["metadata"]
    existing = {}
    if meta.get("name"):
        existing = {
            cj["metadata"].get("labels", {}).get(HARDWARE_CLASS): cj
            for cj in state.compile_jobs(meta["namespace"], meta["name"])
        }
    try:
        registry = context.registry()
    except Exception as error:  # an unreachable registry only loses the latency check
        log.debug("registry unavailable for admission: %s", error)
        registry = None
    model = {**model, "metadata": {"uid": "", **meta}}  # a CREATE may not carry a uid yet
    return review_cluster.review(state, registry, context.settings, model, spec, existing, cache_lookup=True)


def build_configuration(
    name: str, client_config: dict, namespaces: list[str], *, failure_policy: str = "Ignore", timeout_seconds: int = 5
) -> dict:
    """The ValidatingWebhookConfiguration the operator manages on the local cluster: the chart's
    webhook (same name, rules and path) with a URL instead of a Service."""
    webhook = {
        "name": WEBHOOK_NAME,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": failure_policy,
        "timeoutSeconds": timeout_seconds,
        "clientConfig": client_config,
        "rules": [
            {
                "apiGroups": [GROUP],
                "apiVersions": [VERSION],
                "resources": ["inferencemodels"],
                "operations": ["CREATE", "UPDATE"],
                "scope": "Namespaced",
            }
        ],
    }
    if namespaces:
        webhook["namespaceSelector"] = {
            "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": list(namespaces)}]
        }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": MANAGED_BY}},
        "webhooks": [webhook],
    }


class _Server(kopf.WebhookServer):
    """kopf's server, calling `on_listening(url)` (in a thread) once it listens: only then is the
    configuration pointed at it. With `keep` (a coroutine function), it serves the given `context`
    as it is and runs `keep()` beside the server: keep swaps certificates into that context."""

    def __init__(self, *, on_listening=None, keep=None, **kwargs):
        super().__init__(**kwargs)
        self._on_listening = on_listening
        self._keep = keep

    def _build_ssl(self):
        if self._keep is not None:  # kopf would load or generate a certificate into the context
            return None, self.context
        return super()._build_ssl()

    async def __call__(self, fn):
        keeping = asyncio.create_task(self._keep()) if self._keep is not None else None
        try:
            async for client_config in super().__call__(fn):
                if self._on_listening is not None:
                    await asyncio.to_thread(self._on_listening, client_config["url"])
                yield client_config
        finally:
            if keeping is not None:
                keeping.cancel()


def _write_files(bundle: certificates.Bundle) -> tuple[str, str]:
    directory = Path(tempfile.mkdtemp(prefix="tensorkiln-webhook-"))  # 0700
    (directory / "tls.crt").write_bytes(bundle.cert)
    key = directory / "tls.key"
    key.touch(mode=0o600)
    key.write_bytes(bundle.key)
    return str(directory / "tls.crt"), str(key)


def _load(context: ssl.SSLContext, bundle: certificates.Bundle) -> None:
    """Put the bundle's certificate and key into a live TLS context (OpenSSL reads them from files)."""
    with tempfile.TemporaryDirectory(prefix="tensorkiln-webhook-") as directory:  # 0700, removed at once
        cert, key = Path(directory) / "tls.crt", Path(directory) / "tls.key"
        cert.write_bytes(bundle.cert)
        key.touch(mode=0o600)
        key.write_bytes(bundle.key)
        context.load_cert_chain(cert, key)


def _admission_api(state: ClusterState) -> client.AdmissionregistrationV1Api:
    return client.AdmissionregistrationV1Api(state.api)


def _ca_bundle(bundle: certificates.Bundle) -> str:
    return base64.b64encode(bundle.ca).decode()


def delete_managed(state: ClusterState, name: str) -> None:
    try:
        _admission_api(state).delete_validating_webhook_configuration(name)
        log.info("ValidatingWebhookConfiguration %s deleted", name)
    except client.ApiException as error:
        if error.status != 404:
            log.warning("cannot delete ValidatingWebhookConfiguration %s: %s", name, error.reason)


def _managed_server(settings: Settings, namespaces: list[str], state: ClusterState) -> _Server:
    bundle = certificates.issue([MANAGED_HOST, "localhost"])
    certfile, pkeyfile = _write_files(bundle)

    def register(url: str) -> None:
        url = f"{url.rstrip('/')}/{HANDLER_ID}"  # kopf routes /<handler id> to the handler
        config = build_configuration(settings.webhook_managed, {"url": url, "caBundle": _ca_bundle(bundle)}, namespaces)
        kube.apply(state.dynamic, config)
        log.info("ValidatingWebhookConfiguration %s points at %s", settings.webhook_managed, url)

    return _Server(
        addr=MANAGED_HOST,
        host=MANAGED_HOST,
        port=settings.webhook_port,
        certfile=certfile,
        pkeyfile=pkeyfile,
        on_listening=register,
    )


def _secret_bundle(
    core: client.CoreV1Api,
    settings: Settings,
    hostnames: list[str],
    lifetime: tuple[datetime.timedelta, datetime.timedelta],
    serving: certificates.Bundle | None = None,
) -> certificates.Bundle:
    """The certificate kept in the Secret the chart created empty, while usable; else a new one,
    written there (its ca.crt also trusting the certificate it replaces) and returned. The write
    names the resourceVersion read, so of two replicas renewing at once one fails and adopts the
    other's next time."""
    namespace, name = settings.pod_namespace, settings.webhook_cert_secret
    duration, renew_before = lifetime
    secret = core.read_namespaced_secret(name, namespace)
    data = secret.data or {}
    kept = None
    if {"ca.crt", "tls.crt", "tls.key"} <= data.keys():
        kept = certificates.Bundle(*(base64.b64decode(data[k]) for k in ("ca.crt", "tls.crt", "tls.key")))
        if certificates.usable(kept, hostnames, renew_before=renew_before):
            return kept
    bundle = certificates.issue(hostnames, duration=duration, previous=serving or kept)
    encoded = {k: base64.b64encode(v).decode() for k, v in bundle.as_secret_data().items()}
    patch = {"metadata": {"resourceVersion": secret.metadata.resource_version}, "data": encoded}
    core.patch_namespaced_secret(name, namespace, patch)
    log.info("issued a webhook certificate for %s into Secret %s/%s", hostnames[0], namespace, name)
    return bundle


def wait_for_configuration(
    api: client.AdmissionregistrationV1Api, name: str, sleep=time.sleep
) -> client.V1ValidatingWebhookConfiguration:
    """The chart's ValidatingWebhookConfiguration, once it exists: Helm or a GitOps tool may create
    it after the operator starts. Until then nobody calls the webhook, so waiting is harmless, and
    exiting would only crash-loop the operator."""
    for attempt in itertools.count():
        try:
            return api.read_validating_webhook_configuration(name)
        except client.ApiException as error:
            if error.status != 404:
                raise
        if attempt % 30 == 0:  # once a minute
            log.warning("ValidatingWebhookConfiguration %s does not exist yet: waiting to write its caBundle", name)
        sleep(CONFIGURATION_POLL_SECONDS)
    raise AssertionError("unreachable")


def _lifetime(settings: Settings) -> tuple[datetime.timedelta, datetime.timedelta]:
    try:
        duration = certificates.parse_duration(settings.webhook_cert_duration, "TENSORKILN_WEBHOOK_CERT_DURATION")
        renew_before = certificates.parse_duration(
            settings.webhook_cert_renew_before, "TENSORKILN_WEBHOOK_CERT_RENEW_BEFORE"
        )
    except ValueError as error:
        raise kopf.PermanentError(str(error)) from error
    if not datetime.timedelta(0) < renew_before < duration:
        raise kopf.PermanentError(
            f"TENSORKILN_WEBHOOK_CERT_RENEW_BEFORE ({settings.webhook_cert_renew_before}) must be above zero and "
            f"below TENSORKILN_WEBHOOK_CERT_DURATION ({settings.webhook_cert_duration})"
        )
    return duration, renew_before


def _secret_server(settings: Settings, state: ClusterState) -> _Server:
    if not (settings.pod_namespace and settings.webhook_service and settings.webhook_configuration):
        raise kopf.PermanentError(
            "TENSORKILN_WEBHOOK_CERT_SECRET needs POD_NAMESPACE, TENSORKILN_WEBHOOK_SERVICE and "
            "TENSORKILN_WEBHOOK_CONFIGURATION (the chart sets them)"
        )
    lifetime = _lifetime(settings)
    service, namespace = settings.webhook_service, settings.pod_namespace
    hostnames = [f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]
    core = state.core
    serving = _secret_bundle(core, settings, hostnames, lifetime)
    context = ssl.create_default_context(purpose=ssl.Purpose.CLIENT_AUTH)
    _load(context, serving)

    def inject_ca(ca: bytes) -> None:
        api = _admission_api(state)
        name = settings.webhook_configuration
        config = wait_for_configuration(api, name)
        encoded = base64.b64encode(ca).decode()
        patch = {"webhooks": [{"name": w.name, "clientConfig": {"caBundle": encoded}} for w in config.webhooks]}
        api.patch_validating_webhook_configuration(name, patch)
        log.info("caBundle of ValidatingWebhookConfiguration %s set from Secret %s", name, settings.webhook_cert_secret)

    async def keep() -> None:
        """Renew or adopt the Secret's certificate while serving (see the module's docstring)."""
        nonlocal serving
        while True:
            now = datetime.datetime.now(datetime.UTC)
            await asyncio.sleep(certificates.seconds_until_check(serving, now, lifetime[1], CHECK_SECONDS))
            try:
                fresh = await asyncio.to_thread(_secret_bundle, core, settings, hostnames, lifetime, serving)
                if fresh == serving:
                    continue
                await asyncio.to_thread(inject_ca, certificates.trust(fresh, serving))
                await asyncio.sleep(CA_PROPAGATION_SECONDS)
                _load(context, fresh)  # new handshakes get it; the server does not restart
                serving = fresh
                await asyncio.to_thread(inject_ca, fresh.ca)
                log.info("webhook now serves the certificate from Secret %s", settings.webhook_cert_secret)
            except Exception as error:  # retried at the next check; the served certificate is still valid
                log.warning("webhook certificate renewal failed, retrying: %s", error)

    return _Server(
        addr=settings.webhook_address, port=settings.webhook_port, context=context,
        on_listening=lambda _url: inject_ca(serving.ca), keep=keep,
    )  # fmt: skip


def server_for(settings: Settings, namespaces: list[str], state: ClusterState) -> kopf.WebhookServer:
    if settings.webhook_managed:
        return _managed_server(settings, namespaces, state)
    if settings.webhook_cert_secret:
        return _secret_server(settings, state)
    cert, key = (os.path.join(settings.webhook_cert_dir, f) for f in ("tls.crt", "tls.key"))
    if not (os.path.exists(cert) and os.path.exists(key)):
        raise kopf.PermanentError(
            f"webhook on port {settings.webhook_port} but no {cert} and {key}: mount a certificate "
            "(cert-manager), or set TENSORKILN_WEBHOOK_CERT_SECRET or TENSORKILN_WEBHOOK_MANAGED"
        )
    return kopf.WebhookServer(addr=settings.webhook_address, port=settings.webhook_port, certfile=cert, pkeyfile=key)


def register(context: OperatorContext, registry: kopf.OperatorRegistry) -> None:
    """Serve the webhook in the next kopf.operator() (called by the runner when the port is set)."""
    im = (GROUP, VERSION, "inferencemodels")
    config, namespaces, state = context.settings, context.namespaces, context.state
    review = functools.partial(review_in_cluster, context)

    @kopf.on.startup(id="tensorkiln-webhook", registry=registry)
    async def serve(settings: kopf.OperatorSettings, **_) -> None:
        settings.admission.server = await asyncio.to_thread(server_for, config, namespaces, state)

    @kopf.on.cleanup(id="tensorkiln-webhook-cleanup", registry=registry)
    def unregister(**_) -> None:
        if config.webhook_managed:
            delete_managed(state, config.webhook_managed)

    @kopf.on.validate(*im, id=HANDLER_ID, operations=["CREATE", "UPDATE"], ignore_failures=True, registry=registry)
    def validate_inference_model(body, old, operation, warnings: list[str], **_) -> None:
        model = dict(body)
        errors, found = judge(model, dict(old) if old is not None else None, operation, review, namespaces)
        warnings.extend(found)
        if errors:
            meta = model.get("metadata", {})
            log.info("refused %s of %s/%s: %s", operation, meta.get("namespace"), meta.get("name"), errors)
            raise kopf.AdmissionError("; ".join(errors), code=422)
