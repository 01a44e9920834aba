"""Creating and rotating the CA and serving certificate in a directory, and the caBundle.

Write order matters because a server may reload at any moment: CA files are written before the
serving pair, so whatever a reader sees, the served certificate chains to a CA in ``ca.crt``.
"""

from __future__ import annotations

import base64
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509

from certs.files import (
    DIRECTORY_MODE,
    PRIVATE_MODE,
    PUBLIC_MODE,
    CertError,
    MaterialPaths,
    certificates_pem,
    private_key_pem,
    read_certificates,
    read_issuer_key,
    require_directory,
    same_public_key,
    write_atomic,
)
from certs.issuing import (
    Issued,
    cross_sign,
    issue_ca,
    issue_serving,
    san_names,
    serving_names,
)
from certs.validity import CertificateInfo

logger = logging.getLogger(__name__)

DEFAULT_VALID_DAYS = 365
DEFAULT_CA_VALID_DAYS = 3650


def init(
    directory: Path,
    *,
    service: str,
    namespace: str,
    valid_days: int = DEFAULT_VALID_DAYS,
    ca_valid_days: int = DEFAULT_CA_VALID_DAYS,
    force: bool = False,
    now: datetime | None = None,
) -> CertificateInfo:
    """Create a new CA and a serving certificate for ``service.namespace`` in ``directory``.

    The directory is created (0700) when missing. Existing material is only replaced with
    ``force``: silently replacing a CA would break every client that trusts it.
    """
    now = _now(now)
    _check_days(valid_days=valid_days, ca_valid_days=ca_valid_days)
    try:
        names = serving_names(service, namespace)
    except ValueError as exc:
        raise CertError(str(exc)) from None
    paths = _make_directory(directory)
    existing = [p.name for p in paths.all if p.exists()]
    if existing and not force:
        raise CertError(
            f"{directory} already holds TLS material ({', '.join(existing)}); "
            "use `tenantgate certs rotate` to renew it, or --force to replace it"
        )
    ca = issue_ca(now=now, valid_for=timedelta(days=ca_valid_days))
    serving = issue_serving(ca, dns_names=names, now=now, valid_for=timedelta(days=valid_days))
    _write_ca(paths, bundle=[ca.certificate], ca=ca)
    _write_serving(paths, serving, intermediates=[])
    info = CertificateInfo.of(serving.certificate)
    logger.info(
        "created CA and serving certificate",
        extra={"directory": str(directory), "serial": info.serial_hex, "not_after": info.not_after},
    )
    return info


def ensure(
    directory: Path,
    *,
    service: str,
    namespace: str,
    valid_days: int = DEFAULT_VALID_DAYS,
    ca_valid_days: int = DEFAULT_CA_VALID_DAYS,
    now: datetime | None = None,
) -> bool:
    """Create material in ``directory`` only when it holds none; True when it created some.

    A serving pair without CA files (a mounted cert-manager Secret, say) is left alone. A
    partial set that cannot serve is an error rather than something to paper over.
    """
    paths = MaterialPaths(directory)
    if paths.tls_cert.exists() and paths.tls_key.exists():
        return False
    present = [p.name for p in paths.all if p.exists()]
    if present:
        missing = [p.name for p in (paths.tls_cert, paths.tls_key) if not p.exists()]
        raise CertError(
            f"incomplete TLS material in {directory}: {', '.join(missing)} missing; "
            f"run `tenantgate certs init --force --dir {directory}`"
        )
    init(
        directory,
        service=service,
        namespace=namespace,
        valid_days=valid_days,
        ca_valid_days=ca_valid_days,
        now=now,
    )
    return True


def rotate(
    directory: Path,
    *,
    ca: bool = False,
    valid_days: int = DEFAULT_VALID_DAYS,
    ca_valid_days: int = DEFAULT_CA_VALID_DAYS,
    now: datetime | None = None,
) -> CertificateInfo:
    """Issue a new serving certificate (new key, same names) from the CA in ``directory``.

    With ``ca=True`` the CA is replaced too. ``ca.crt`` then lists the new CA and the previous
    one, and the new leaf is served with the new CA cross-signed by the previous one, so a
    client whose bundle still holds only the previous CA keeps verifying until it is updated.
    """
    now = _now(now)
    _check_days(valid_days=valid_days, ca_valid_days=ca_valid_days)
    paths = require_directory(directory)
    bundle = read_certificates(paths.ca_cert)
    current = Issued(certificate=bundle[0], key=read_issuer_key(paths.ca_key))
    if not same_public_key(current.certificate, current.key):
        raise CertError(
            f"{paths.ca_key} does not match the first certificate in {paths.ca_cert}; "
            f"recreate the material with `tenantgate certs init --force --dir {directory}`"
        )
    old_chain = read_certificates(paths.tls_cert)
    dns_names, ips = san_names(old_chain[0])
    if not dns_names and not ips:
        raise CertError(f"{paths.tls_cert} has no subjectAltName to carry over")
    current_valid = current.certificate.not_valid_after_utc > now
    if ca:
        signer = issue_ca(now=now, valid_for=timedelta(days=ca_valid_days))
        new_bundle = [signer.certificate]
        intermediates: list[x509.Certificate] = []
        if current_valid:
            new_bundle.append(current.certificate)
            intermediates.append(cross_sign(signer.certificate, by=current, now=now))
        _write_ca(paths, bundle=new_bundle, ca=signer)
    else:
        if not current_valid:
            raise CertError(
                f"the CA in {paths.ca_cert} expired at "
                f"{current.certificate.not_valid_after_utc.isoformat()}; "
                "roll it with `tenantgate certs rotate --ca`"
            )
        signer = current
        # Keep serving the cross-signature from a recent CA roll while it is still valid.
        intermediates = [
            c
            for c in old_chain[1:]
            if c.subject == signer.certificate.subject
            and same_public_key(c, signer.key)
            and c.not_valid_after_utc > now
        ]
    serving = issue_serving(
        signer,
        dns_names=dns_names,
        ip_addresses=ips,
        now=now,
        valid_for=timedelta(days=valid_days),
    )
    _write_serving(paths, serving, intermediates=intermediates)
    info = CertificateInfo.of(serving.certificate)
    logger.info(
        "rotated serving certificate",
        extra={
            "directory": str(directory),
            "serial": info.serial_hex,
            "not_after": info.not_after,
            "ca_rotated": ca,
        },
    )
    return info


def ca_bundle(directory: Path) -> str:
    """``ca.crt`` base64-encoded: the value of a webhook configuration's ``caBundle``."""
    paths = require_directory(directory)
    certificates = read_certificates(paths.ca_cert)
    for certificate in certificates:
        if not CertificateInfo.of(certificate).is_ca:
            raise CertError(f"{paths.ca_cert} holds a certificate that is not a CA")
    return base64.b64encode(certificates_pem(certificates)).decode("ascii")


def _write_ca(paths: MaterialPaths, *, bundle: list[x509.Certificate], ca: Issued) -> None:
    # The bundle first, so what is served always chains to it. A crash between the two writes
    # leaves a key that does not match ca.crt, which the next rotate reports.
    write_atomic(paths.ca_cert, certificates_pem(bundle), mode=PUBLIC_MODE)
    write_atomic(paths.ca_key, private_key_pem(ca.key), mode=PRIVATE_MODE)


def _write_serving(
    paths: MaterialPaths, serving: Issued, *, intermediates: list[x509.Certificate]
) -> None:
    write_atomic(paths.tls_key, private_key_pem(serving.key), mode=PRIVATE_MODE)
    chain = [serving.certificate, *intermediates]
    write_atomic(paths.tls_cert, certificates_pem(chain), mode=PUBLIC_MODE)


def _make_directory(directory: Path) -> MaterialPaths:
    try:
        directory.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)
    except FileExistsError:
        raise CertError(f"{directory} is not a directory") from None
    except OSError as exc:
        raise CertError(f"cannot create {directory}: {exc.strerror or exc}") from None
    return require_directory(directory)


def _now(now: datetime | None) -> datetime:
    if now is None:
        return datetime.now(UTC)
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    return now


def _check_days(*, valid_days: int, ca_valid_days: int) -> None:
    if valid_days < 1 or ca_valid_days < 1:
        raise CertError("validity must be at least one day")
