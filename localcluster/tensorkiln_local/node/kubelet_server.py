"""The kubelet's HTTPS endpoint for the API server: `kubectl logs` for pods on this node.

The API server proxies GET /api/v1/namespaces/{ns}/pods/{pod}/log to
https://<node address>:<daemonEndpoints.kubeletEndpoint.Port>/containerLogs/{ns}/{pod}/{container}
with the query of PodLogOptions (logs.py serves it). Trust runs both ways through the cluster's CA
(kwokctl's pki/ca.crt): the agent signs itself a serving certificate with the CA key
(`issue_serving_certificate`: IP SAN 127.0.0.1, the node's InternalIP, and DNS SAN the node name),
which the API server verifies (--kubelet-certificate-authority); and it requires a client
certificate signed by the same CA, which the API server presents (--kubelet-client-certificate).
Any client the CA vouches for is served: there is no SubjectAccessReview (the kubelet's webhook
authorization) behind it, and the CA's certificates are the cluster's administrators'.

exec, attach, portForward and run need SPDY or WebSocket streams (stdin, stdout, stderr, resize
channels) that this stdlib server does not speak: they answer 501 and say so.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import re
import select
import ssl
import threading
import warnings
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.utils import CryptographyDeprecationWarning
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from . import logs

log = logging.getLogger(__name__)

CERT_DAYS = 365
HANDSHAKE_TIMEOUT_S = 10
_LOGS_PATH = re.compile(r"^/containerLogs/([^/]+)/([^/]+)/([^/]+)/?$")
_STREAMING = ("/exec/", "/attach/", "/portForward/", "/run/")

# (namespace, name) -> the pod object if it is bound to this node, else None
PodLookup = Callable[[str, str], dict | None]


def issue_serving_certificate(
    ca_cert_pem: bytes, ca_key_pem: bytes, node_name: str, ips: list[str], *, now: datetime.datetime | None = None
) -> tuple[bytes, bytes]:
    """(certificate, key) PEM for the node's endpoint, signed by the CA: what the kubelet's
    serving certificate holds (CN system:node:<name>, O system:nodes, server auth)."""
    now = now or datetime.datetime.now(datetime.UTC)
    with warnings.catch_warnings():  # kwokctl's CA has a negative serial number: cryptography warns
        warnings.simplefilter("ignore", CryptographyDeprecationWarning)
        ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node_name}"),
        ]
    )
    sans = [x509.DNSName(node_name)] + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # a little slack for clock skew
        .not_valid_after(now + datetime.timedelta(days=CERT_DAYS))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=False,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    )
    try:  # OpenSSL finds the issuer by this: it must be the CA's own key identifier, however computed
        ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        cert = cert.add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
    except x509.ExtensionNotFound:
        pass
    cert = cert.sign(ca_key, hashes.SHA256())
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def server_context(ca_cert: Path, ca_key: Path, node_name: str, ips: list[str], pki_dir: Path) -> ssl.SSLContext:
    """A TLS server context with a fresh serving certificate (written under pki_dir), requiring
    client certificates signed by the CA."""
    cert_pem, key_pem = issue_serving_certificate(ca_cert.read_bytes(), ca_key.read_bytes(), node_name, ips)
    pki_dir.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = pki_dir / "kubelet.crt", pki_dir / "kubelet.key"
    cert_path.write_bytes(cert_pem)
    key_path.touch(mode=0o600)
    key_path.write_bytes(key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_path, key_path)
    context.load_verify_locations(cafile=str(ca_cert))
    context.verify_mode = ssl.CERT_REQUIRED
    return context


class KubeletServer:
    """The endpoint on host:port (port 0: a free one, then `port` says which), one thread per request."""

    def __init__(
        self,
        state_dir: Path,
        lookup: PodLookup,
        context: ssl.SSLContext | None,
        host: str = "127.0.0.1",
        port: int = 0,
    ):
        self.state_dir = state_dir
        self.lookup = lookup
        self._httpd = _Server((host, port), _Handler, context)
        self._httpd.kubelet = self
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="kubelet-server", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def container_running(self, uid: str, container: str, pid: int | None) -> bool:
        """Whether the run `pid` of the container still runs: runtime.py keeps its pid file until
        the run ended and all its output is in the log."""
        try:
            fields = (self.state_dir / "pods" / uid / container / "pid").read_text().split()
        except OSError:
            return False
        return bool(fields) and (pid is None or fields[0] == str(pid))


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, handler, context: ssl.SSLContext | None):
        self.context = context
        self.kubelet: KubeletServer | None = None
        super().__init__(address, handler)

    def finish_request(self, request, client_address):
        """TLS in the request's own thread, so one slow handshake does not hold up the others."""
        if self.context is not None:
            request.settimeout(HANDSHAKE_TIMEOUT_S)
            try:
                request = self.context.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError) as exc:
                log.info("kubelet endpoint: TLS handshake with %s failed: %s", client_address[0], exc)
                return
            request.settimeout(None)
            try:
                super().finish_request(request, client_address)
            finally:
                request.close()  # the TLS socket: shutdown_request closes only the plain one it wrapped
            return
        super().finish_request(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server_version = "tensorkiln-localnode"
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        log.debug("kubelet endpoint: %s " + format, self.address_string(), *args)

    def do_GET(self):  # noqa: N802 (http.server's name)
        path, _, query = self.path.partition("?")
        if path.startswith(_STREAMING):
            self._error(
                HTTPStatus.NOT_IMPLEMENTED,
                f"{path.split('/')[1]} is not supported by the TensorKiln local node agent "
                "(only container logs are served); see the README",
            )
            return
        match = _LOGS_PATH.match(path)
        if not match:
            self._error(HTTPStatus.NOT_FOUND, f"{path}: not found (this node serves /containerLogs/ only)")
            return
        namespace, name, container = match.groups()
        try:
            self._logs(namespace, name, container, query)
        except logs.LogError as exc:
            self._error(exc.status, exc.message)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass  # the client went away (a `kubectl logs -f` interrupted)
        except Exception:
            log.exception("kubelet endpoint: logs of %s/%s/%s", namespace, name, container)
            if not self._started:
                self._error(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error reading the log (see the agent's log)")

    do_POST = do_GET  # exec and friends are POSTs: the same 501

    _started = False

    def _logs(self, namespace: str, name: str, container: str, query: str) -> None:
        kubelet: KubeletServer = self.server.kubelet
        opts = logs.parse_options(query)
        pod = kubelet.lookup(namespace, name)
        if pod is None:
            raise logs.LogError(HTTPStatus.NOT_FOUND, f'pod "{namespace}/{name}" does not exist on this node')
        spec = pod["spec"]
        names = [c["name"] for c in spec.get("containers", []) + spec.get("initContainers", [])]
        if container not in names:
            raise logs.LogError(HTTPStatus.NOT_FOUND, f'container "{container}" not found in pod "{namespace}/{name}"')
        uid = pod["metadata"]["uid"]
        cid = logs.container_id(pod, container, opts.previous)
        container_dir = kubelet.state_dir / "pods" / uid / container
        run = logs.find_run(logs.read_runs(container_dir), cid)
        if run is None:
            raise logs.LogError(
                HTTPStatus.NOT_FOUND, f'no log of container "{container}" ({cid}) in pod "{namespace}/{name}"'
            )
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self._started = True

        def running() -> bool:
            if self._client_gone():
                raise BrokenPipeError("the client closed the connection")
            return kubelet.container_running(uid, container, run.pid)

        chunks = logs.stream(container_dir, run, opts, running=running)
        for chunk in chunks:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.close_connection = True

    def _client_gone(self) -> bool:
        """The client sends nothing after its request: input now means it closed (EOF, TLS close)."""
        readable, _, _ = select.select([self.connection], [], [], 0)
        return bool(readable)

    def _error(self, status: int, message: str) -> None:
        body = (message + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True
