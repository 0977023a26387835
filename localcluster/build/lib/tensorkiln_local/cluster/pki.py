"""Certificates signed by the cluster's CA (kwokctl's pki/ca.crt): the kubelets' client and
serving certificates and kube-proxy's client certificate, as kubeadm issues them.

The API server authenticates a client certificate's CN as the user and its O as groups, so a
kubelet is `system:node:<name>` in `system:nodes` (the Node authorizer and NodeRestriction apply
to it) and kube-proxy is `system:kube-proxy` (bound to system:node-proxier by default RBAC).
"""

from __future__ import annotations

import datetime
import ipaddress
import warnings
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.utils import CryptographyDeprecationWarning
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CERT_DAYS = 365


@dataclass(frozen=True)
class Identity:
    """Who a certificate names, and what it may be used for."""

    common_name: str
    organizations: tuple[str, ...] = ()
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[str, ...] = ()
    server: bool = False  # serving (server auth) rather than client auth


def issue(
    ca_cert_pem: bytes, ca_key_pem: bytes, identity: Identity, *, now: datetime.datetime | None = None
) -> tuple[bytes, bytes]:
    """(certificate, key) PEM for `identity`, signed by the CA."""
    now = now or datetime.datetime.now(datetime.UTC)
    with warnings.catch_warnings():  # kwokctl's CA has a negative serial number: cryptography warns
        warnings.simplefilter("ignore", CryptographyDeprecationWarning)
        ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in identity.organizations]
        + [x509.NameAttribute(NameOID.COMMON_NAME, identity.common_name)]
    )
    usage = ExtendedKeyUsageOID.SERVER_AUTH if identity.server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # a little slack for clock skew
        .not_valid_after(now + datetime.timedelta(days=CERT_DAYS))
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
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    sans = [x509.DNSName(name) for name in identity.dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in identity.ip_addresses]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    try:  # OpenSSL finds the issuer by this: it must be the CA's own key identifier, however computed
        ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
    except x509.ExtensionNotFound:
        pass
    cert = builder.sign(ca_key, hashes.SHA256())
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def write(ca_cert: Path, ca_key: Path, identity: Identity, cert_path: Path, key_path: Path) -> None:
    """Issue a certificate for `identity` into cert_path and key_path (the key private to root)."""
    cert_pem, key_pem = issue(ca_cert.read_bytes(), ca_key.read_bytes(), identity)
    cert_path.parent.mkdir(parents=True, exist_ok=True)
    key_path.write_bytes(key_pem)
    key_path.chmod(0o600)
    cert_path.write_bytes(cert_pem)


def older_than(cert_path: Path, ca_cert: Path) -> bool:
    """True when cert_path is missing or older than the CA (a recreated cluster): issue it again."""
    return not cert_path.exists() or ca_cert.stat().st_mtime > cert_path.stat().st_mtime


def kubeconfig(server: str, ca_cert: Path, cert_path: Path, key_path: Path, user: str) -> dict:
    """A kubeconfig that authenticates with a client certificate."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority": str(ca_cert)}}],
        "users": [{"name": user, "user": {"client-certificate": str(cert_path), "client-key": str(key_path)}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        "current-context": "local",
    }
