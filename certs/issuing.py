"""Issuing X.509 material in memory: the CA, the serving certificate it signs, cross-signatures.

No file I/O and no clock here: callers pass ``now``. Keys are ECDSA P-256, which every client the
webhook meets (the API server, kubectl, Python ``ssl``) accepts.
"""

from __future__ import annotations

import ipaddress
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Clocks in a cluster drift; a certificate that starts "now" is rejected by a peer a little behind.
CLOCK_SKEW = timedelta(minutes=5)
LOCAL_IPS: tuple[IPAddress, ...] = (
    ipaddress.IPv4Address("127.0.0.1"),
    ipaddress.IPv6Address("::1"),
)
_MAX_COMMON_NAME = 64  # ub-common-name in RFC 5280
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class Issued:
    """A certificate and the private key of its subject."""

    certificate: x509.Certificate
    key: CertificateIssuerPrivateKeyTypes


def serving_names(service: str, namespace: str) -> tuple[str, ...]:
    """The DNS names the API server and local clients use to reach ``service`` in ``namespace``.

    Raises ``ValueError`` when either is not a valid Kubernetes name (a Service name is a
    DNS-1035 label, a namespace a DNS-1123 label).
    """
    if not _DNS1035_LABEL.fullmatch(service):
        raise ValueError(
            f"invalid service name {service!r}: must be a DNS-1035 label "
            "(lowercase letters, digits and '-', starting with a letter, at most 63 characters)"
        )
    if not _DNS1123_LABEL.fullmatch(namespace):
        raise ValueError(
            f"invalid namespace {namespace!r}: must be a DNS-1123 label "
            "(lowercase letters, digits and '-', at most 63 characters)"
        )
    return (
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
        "localhost",
    )


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def issue_ca(*, now: datetime, valid_for: timedelta) -> Issued:
    """A fresh self-signed CA with its own key.

    Each CA gets a unique name so that, while an old and a new CA share a bundle during a roll,
    no client can confuse the two.
    """
    key = new_key()
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "tenantgate"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"tenantgate-ca-{secrets.token_hex(6)}"),
        ]
    )
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    builder = (
        _validity(x509.CertificateBuilder(), now=now, not_after=now + valid_for)
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        # path_length=1 leaves room for the cross-signed successor CA used during a CA roll.
        .add_extension(x509.BasicConstraints(ca=True, path_length=1), critical=True)
        .add_extension(_ca_key_usage(), critical=True)
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), False)
    )
    return Issued(certificate=_sign(builder, key), key=key)


def issue_serving(
    ca: Issued,
    *,
    dns_names: Sequence[str],
    ip_addresses: Sequence[IPAddress] = LOCAL_IPS,
    now: datetime,
    valid_for: timedelta,
) -> Issued:
    """A serving (TLS server) certificate with a fresh key, signed by ``ca``.

    Its validity never outlives the CA's: a chain is only as valid as its shortest link.
    """
    if not dns_names and not ip_addresses:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    key = new_key()
    not_after = min(now + valid_for, ca.certificate.not_valid_after_utc)
    if not_after <= now:
        raise ValueError(f"the CA expired at {ca.certificate.not_valid_after_utc.isoformat()}")
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    sans += [x509.IPAddress(ip) for ip in ip_addresses]
    builder = (
        _validity(x509.CertificateBuilder(), now=now, not_after=not_after)
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, _common_name(dns_names))]))
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
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
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .add_extension(_authority_key_id(ca.certificate), critical=False)
    )
    return Issued(certificate=_sign(builder, ca.key), key=key)


def cross_sign(ca: x509.Certificate, *, by: Issued, now: datetime) -> x509.Certificate:
    """``ca``'s subject and key, certified by the older CA ``by``.

    Served after the leaf during a CA roll, it lets a client that still trusts only the old CA
    build leaf -> new CA (cross-signed) -> old CA, while clients trusting the new CA stop at it.
    """
    not_after = min(ca.not_valid_after_utc, by.certificate.not_valid_after_utc)
    builder = (
        _validity(x509.CertificateBuilder(), now=now, not_after=not_after)
        .subject_name(ca.subject)
        .issuer_name(by.certificate.subject)
        .public_key(ca.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_ca_key_usage(), critical=True)
        .add_extension(
            ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value, False
        )
        .add_extension(_authority_key_id(by.certificate), critical=False)
    )
    return _sign(builder, by.key)


def san_names(certificate: x509.Certificate) -> tuple[tuple[str, ...], tuple[IPAddress, ...]]:
    """The DNS names and IP addresses in ``certificate``'s subjectAltName (empty when absent)."""
    try:
        san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return (), ()
    # An IPAddress SAN may hold a network (name constraints); only addresses identify a server.
    ips = tuple(
        ip
        for ip in san.get_values_for_type(x509.IPAddress)
        if isinstance(ip, ipaddress.IPv4Address | ipaddress.IPv6Address)
    )
    return tuple(san.get_values_for_type(x509.DNSName)), ips


def _validity(
    builder: x509.CertificateBuilder, *, now: datetime, not_after: datetime
) -> x509.CertificateBuilder:
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    return (
        builder.serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(not_after)
    )


def _ca_key_usage() -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=False,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )


def _authority_key_id(issuer: x509.Certificate) -> x509.AuthorityKeyIdentifier:
    try:
        ski = issuer.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    except x509.ExtensionNotFound:
        # A CA made elsewhere may lack the extension; derive the identifier from its key.
        ski = x509.SubjectKeyIdentifier.from_public_key(issuer.public_key())
    return x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski)


def _common_name(dns_names: Sequence[str]) -> str:
    # Clients match SANs only; the CN is for humans, so pick the most telling name that fits.
    for candidate in (*dns_names[2:3], *dns_names):
        if len(candidate) <= _MAX_COMMON_NAME:
            return candidate
    return "tenantgate"


def _sign(
    builder: x509.CertificateBuilder, key: CertificateIssuerPrivateKeyTypes
) -> x509.Certificate:
    algorithm = (
        None
        if isinstance(key, ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey)
        else hashes.SHA256()
    )
    return builder.sign(key, algorithm)
