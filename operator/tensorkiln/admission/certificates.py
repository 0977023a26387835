"""Self-signed serving certificates for the admission webhook (the local cluster, and a cluster
without cert-manager): a CA and a server certificate it signs, as PEM."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
SERVER_DAYS = 365
RENEW_BEFORE = datetime.timedelta(days=30)


@dataclass(frozen=True)
class Bundle:
    ca: bytes  # the caBundle of the webhook configuration
    cert: bytes
    key: bytes

    def as_secret_data(self) -> dict[str, bytes]:
        return {"ca.crt": self.ca, "tls.crt": self.cert, "tls.key": self.key}


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _san(hostnames: list[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for host in hostnames:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            entries.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(entries)


def issue(hostnames: list[str], now: datetime.datetime | None = None) -> Bundle:
    """A new CA and a server certificate for `hostnames` (DNS names or IP addresses; the first is the CN)."""
    now = now or datetime.datetime.now(datetime.UTC)
    start = now - datetime.timedelta(minutes=5)  # clock skew between the operator and the apiserver
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("tensorkiln-webhook-ca")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )  # keyCertSign, cRLSign
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hostnames[0]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(now + datetime.timedelta(days=SERVER_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True
        )  # digitalSignature, keyEncipherment
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(_san(hostnames), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return Bundle(
        ca=ca.public_bytes(pem),
        cert=cert.public_bytes(pem),
        key=key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )


def usable(bundle: Bundle, hostnames: list[str], now: datetime.datetime | None = None) -> bool:
    """The bundle's server certificate covers `hostnames`, is signed by its CA and has over
    RENEW_BEFORE left: then a restarted operator keeps it (and the caBundle stays valid)."""
    now = now or datetime.datetime.now(datetime.UTC)
    try:
        cert = x509.load_pem_x509_certificate(bundle.cert)
        ca = x509.load_pem_x509_certificate(bundle.ca)
        serialization.load_pem_private_key(bundle.key, None)
        cert.verify_directly_issued_by(ca)
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except Exception:  # unreadable, foreign-signed or without SANs: issue a new one
        return False
    covered = {str(n) for n in names.get_values_for_type(x509.DNSName)}
    covered |= {str(n) for n in names.get_values_for_type(x509.IPAddress)}
    return set(hostnames) <= covered and cert.not_valid_after_utc - now > RENEW_BEFORE
