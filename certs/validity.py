"""Inspecting TLS material: what is served, until when, for which names, and what is wrong.

Readiness uses :func:`problems`: an empty answer means the serving certificate in the directory
is usable now (key matches, within its validity, chains to ``ca.crt`` when there is one).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
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


REJECTION_REASONS = (
    "unreadable",
    "key_mismatch",
    "not_yet_valid",
    "expired",
    "untrusted",
    "wrong_names",
)


@dataclass(frozen=True)
class Rejection:
    """Why a serving certificate must not replace the one served: a reason label and a message."""

    reason: str  # one of REJECTION_REASONS
    message: str


def check_serving(
    chain: list[x509.Certificate],
    key: PrivateKeyTypes,
    *,
    trusted: Sequence[Sequence[x509.Certificate]],
    names: Sequence[str],
    now: datetime,
) -> Rejection | None:
    """Whether clients could verify ``chain`` (leaf first) served with ``key``, or why not.

    The leaf must match the key, be within its validity at ``now``, verify against one of the
    ``trusted`` CA bundles (any, when none is given) and cover every one of ``names`` (a DNS
    name or an IP address).
    """
    leaf = chain[0]
    if not same_public_key(leaf, key):
        return Rejection("key_mismatch", "the private key does not match the certificate")
    if now < leaf.not_valid_before_utc:
        before = leaf.not_valid_before_utc.isoformat()
        return Rejection("not_yet_valid", f"the certificate is not valid before {before}")
    if now >= leaf.not_valid_after_utc:
        after = leaf.not_valid_after_utc.isoformat()
        return Rejection("expired", f"the certificate expired at {after}")
    missing = [name for name in names if not covers(leaf, name)]
    if missing:
        return Rejection(
            "wrong_names", f"the certificate does not cover {', '.join(sorted(missing))}"
        )
    bundles = [list(bundle) for bundle in trusted if bundle]
    if bundles:
        errors = [verify_chain(chain, bundle, now=now) for bundle in bundles]
        if all(errors):
            return Rejection(
                "untrusted", f"the certificate does not verify against the CA: {errors[0]}"
            )
    return None


def covers(certificate: x509.Certificate, name: str) -> bool:
    """Whether a TLS client asking for ``name`` accepts ``certificate`` (RFC 6125 matching:
    exact, case-insensitive DNS names, a wildcard for the leftmost label only, exact IPs)."""
    dns_names, ips = san_names(certificate)
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        pass
    else:
        return address in ips
    wanted = name.lower().rstrip(".")
    for pattern in (n.lower().rstrip(".") for n in dns_names):
        if pattern == wanted:
            return True
        if pattern.startswith("*.") and "." in wanted:
            first, rest = wanted.split(".", 1)
            if first and rest == pattern[2:]:
                return True
    return False
