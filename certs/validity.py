"""Inspecting TLS material: what is served, until when, for which names, and what is wrong.

Readiness uses :func:`problems`: an empty answer means the serving certificate in the directory
is usable now (key matches, within its validity, chains to ``ca.crt`` when there is one).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509 import verification

from certs.files import (
    CertError,
    read_certificates,
    read_private_key,
    require_directory,
    same_public_key,
)
from certs.issuing import san_names


@dataclass(frozen=True)
class CertificateInfo:
    """The facts about one certificate that operators and readiness care about."""

    subject: str
    issuer: str
    serial: int
    not_before: datetime
    not_after: datetime
    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...]
    is_ca: bool
    sha256: str

    @classmethod
    def of(cls, certificate: x509.Certificate) -> CertificateInfo:
        dns_names, ips = san_names(certificate)
        try:
            is_ca = certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except x509.ExtensionNotFound:
            is_ca = False
        return cls(
            subject=certificate.subject.rfc4514_string(),
            issuer=certificate.issuer.rfc4514_string(),
            serial=certificate.serial_number,
            not_before=certificate.not_valid_before_utc,
            not_after=certificate.not_valid_after_utc,
            dns_names=dns_names,
            ip_addresses=tuple(str(ip) for ip in ips),
            is_ca=is_ca,
            sha256=certificate.fingerprint(hashes.SHA256()).hex(),
        )

    @property
    def serial_hex(self) -> str:
        """The serial number as ``openssl x509 -serial`` prints it."""
        return f"{self.serial:X}"

    def valid_at(self, now: datetime) -> bool:
        return self.not_before <= now < self.not_after


@dataclass(frozen=True)
class MaterialInfo:
    """What a certificate directory holds."""

    directory: Path
    serving: CertificateInfo
    intermediates: tuple[CertificateInfo, ...]  # served after the leaf (a cross-signed CA)
    bundle: tuple[CertificateInfo, ...]  # ca.crt, current CA first; empty when absent
    has_ca_key: bool


def describe(directory: Path) -> MaterialInfo:
    """The material in ``directory``; :class:`CertError` when the serving pair is unreadable."""
    paths = require_directory(directory)
    chain = read_certificates(paths.tls_cert)
    bundle = read_certificates(paths.ca_cert) if paths.ca_cert.exists() else []
    return MaterialInfo(
        directory=directory,
        serving=CertificateInfo.of(chain[0]),
        intermediates=tuple(CertificateInfo.of(c) for c in chain[1:]),
        bundle=tuple(CertificateInfo.of(c) for c in bundle),
        has_ca_key=paths.ca_key.exists(),
    )


def problems(directory: Path, *, now: datetime) -> tuple[str, ...]:
    """Why the serving material in ``directory`` cannot be used at ``now`` (empty: it can)."""
    try:
        paths = require_directory(directory)
        chain = read_certificates(paths.tls_cert)
        key = read_private_key(paths.tls_key)
        bundle = read_certificates(paths.ca_cert) if paths.ca_cert.exists() else []
    except CertError as exc:
        return (str(exc),)
    leaf = chain[0]
    found: list[str] = []
    if not same_public_key(leaf, key):
        found.append(f"{paths.tls_key} does not match the certificate in {paths.tls_cert}")
    if now < leaf.not_valid_before_utc:
        found.append(
            f"{paths.tls_cert} is not valid before {leaf.not_valid_before_utc.isoformat()}"
        )
    elif now >= leaf.not_valid_after_utc:
        found.append(f"{paths.tls_cert} expired at {leaf.not_valid_after_utc.isoformat()}")
    if bundle and not found:
        error = verify_chain(chain, bundle, now=now)
        if error:
            found.append(f"{paths.tls_cert} does not verify against {paths.ca_cert}: {error}")
    return tuple(found)


def verify_chain(
    chain: list[x509.Certificate], roots: list[x509.Certificate], *, now: datetime
) -> str | None:
    """Why ``chain`` (leaf first) does not verify as a TLS server against ``roots``, or None.

    Uses the leaf's first name as the expected server identity, the way a client would.
    """
    dns_names, ips = san_names(chain[0])
    subject: verification.Subject
    if dns_names:
        subject = x509.DNSName(dns_names[0])
    elif ips:
        subject = x509.IPAddress(ips[0])
    else:
        return "the certificate has no subjectAltName"
    verifier = (
        verification.PolicyBuilder()
        .store(verification.Store(roots))
        .time(now)
        .build_server_verifier(subject)
    )
    try:
        verifier.verify(chain[0], chain[1:])
    except verification.VerificationError as exc:
        return str(exc)
    return None
