"""Self-signed serving certificates for the admission webhook (the local cluster, and a cluster
without cert-manager): a CA and a server certificate it signs, as PEM.

Renewal: each renewal makes a new CA and certificate, and the new bundle's ca.crt also carries
the CA that signed the certificate it replaces (while that CA is valid). A caBundle written from
it trusts the old and the new certificate alike, so the server can switch at any moment after.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
SERVER_DAYS = 365
DURATION = datetime.timedelta(days=SERVER_DAYS)
RENEW_BEFORE = datetime.timedelta(days=30)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|m|s)")


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


def parse_duration(text: str, field: str) -> datetime.timedelta:
    """A duration written as cert-manager writes one ("8760h", "1h30m", "90s"); `field` names the setting."""
    parts = _DURATION.findall(text)
    if not text or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{field}: {text!r} is not a duration such as 8760h, 1h30m or 90s")
    seconds = sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)
    return datetime.timedelta(seconds=seconds)


def ca_certificates(pem: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(pem) if pem.strip() else []


def issue(
    hostnames: list[str],
    now: datetime.datetime | None = None,
    duration: datetime.timedelta = DURATION,
    previous: Bundle | None = None,
) -> Bundle:
    """A new CA and a server certificate for `hostnames` (DNS names or IP addresses; the first is
    the CN), valid for `duration`. ca.crt also carries the CA that signed `previous`'s certificate
    while that CA is valid, so the server can switch to the new certificate after the caBundle."""
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
        # Key identifiers: while a caBundle holds the old and the new CA (same name), clients pick
        # the signer by them (OpenSSL would otherwise try the first CA of that name only).
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
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
        .not_valid_after(now + duration)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True
        )  # digitalSignature, keyEncipherment
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(_san(hostnames), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    kept = _issuer(previous, now) if previous else None
    return Bundle(
        ca=ca.public_bytes(pem) + (kept.public_bytes(pem) if kept else b""),
        cert=cert.public_bytes(pem),
        key=key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )


def _issuer(bundle: Bundle, now: datetime.datetime) -> x509.Certificate | None:
    """The CA in the bundle's ca.crt that signed its certificate, when it is still valid."""
    try:
        cert = x509.load_pem_x509_certificate(bundle.cert)
        authorities = ca_certificates(bundle.ca)
    except ValueError:
        return None
    for ca in authorities:
        try:
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return ca if ca.not_valid_after_utc > now else None
    return None


def renewal_time(bundle: Bundle, renew_before: datetime.timedelta = RENEW_BEFORE) -> datetime.datetime:
    """When the bundle's certificate is due for renewal: `renew_before` ahead of its expiry."""
    return x509.load_pem_x509_certificate(bundle.cert).not_valid_after_utc - renew_before


def usable(
    bundle: Bundle,
    hostnames: list[str],
    now: datetime.datetime | None = None,
    renew_before: datetime.timedelta = RENEW_BEFORE,
) -> bool:
    """The bundle's server certificate covers `hostnames`, is signed by a CA in its ca.crt, and is
    not yet due for renewal: then a restarted operator keeps it (and the caBundle stays valid)."""
    now = now or datetime.datetime.now(datetime.UTC)
    try:
        cert = x509.load_pem_x509_certificate(bundle.cert)
        serialization.load_pem_private_key(bundle.key, None)
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except Exception:  # unreadable or without SANs: issue a new one
        return False
    if _issuer(bundle, now) is None:  # foreign-signed, or its CA expired
        return False
    covered = {str(n) for n in names.get_values_for_type(x509.DNSName)}
    covered |= {str(n) for n in names.get_values_for_type(x509.IPAddress)}
    return set(hostnames) <= covered and now < renewal_time(bundle, renew_before)


def trust(*bundles: Bundle, now: datetime.datetime | None = None) -> bytes:
    """A caBundle trusting every bundle's certificate: the valid CAs of their ca.crt, once each."""
    now = now or datetime.datetime.now(datetime.UTC)
    seen: dict[bytes, None] = {}
    for bundle in bundles:
        for ca in ca_certificates(bundle.ca):
            if ca.not_valid_after_utc > now:
                seen.setdefault(ca.public_bytes(serialization.Encoding.PEM))
    return b"".join(seen)


def seconds_until_check(
    bundle: Bundle, now: datetime.datetime, renew_before: datetime.timedelta, interval: float
) -> float:
    """How long the renewal loop sleeps: until the certificate is due, and never over `interval`
    (the Secret is re-read then, to adopt what another replica wrote)."""
    due = (renewal_time(bundle, renew_before) - now).total_seconds()
    return max(1.0, min(due, interval))
