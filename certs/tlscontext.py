"""Server-side TLS contexts, and swapping in a renewed certificate without a restart.

A live ``SSLContext`` is never reloaded in place: loading a certificate whose key is not (yet)
the one on disk would leave it unable to complete handshakes. Instead a fresh context is built
and checked, and an SNI callback on the listening context hands each new connection the newest
good one. Connections already open keep the certificate they started with.
"""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes

from certs.files import CertError, read_bytes, read_certificates, read_private_key, same_public_key
from certs.validity import REJECTION_REASONS, CertificateInfo, Rejection, check_serving

logger = logging.getLogger(__name__)

# Forward-secret AEAD suites only for TLS 1.2; TLS 1.3 suites are all acceptable.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"

FileStamp = tuple[tuple[int, int, int, int], ...]


_Pair = tuple[list[x509.Certificate], PrivateKeyTypes]


class _KeyMismatch(CertError):
    """The key file does not hold the certificate's private key (a rotation half written)."""


def server_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """A TLS 1.2+ server context serving the chain in ``cert_file`` with ``key_file``."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(TLS12_CIPHERS)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_NO_RENEGOTIATION
    # Without resumption every new connection gets a full handshake, hence the current cert.
    context.options |= ssl.OP_NO_TICKET
    context.num_tickets = 0
    for path in (cert_file, key_file):
        # ssl's errors do not say which file is missing.
        if not path.exists():
            raise CertError(f"{path} does not exist")
    try:
        context.load_cert_chain(cert_file, key_file)
    except ssl.SSLError as exc:  # an OSError too: catch it first
        reason = exc.reason or "invalid certificate or key"
        raise CertError(f"cannot load {cert_file} with {key_file}: {reason}") from None
    except OSError as exc:
        raise CertError(f"cannot read {cert_file} or {key_file}: {exc.strerror or exc}") from None
    return context


class ReloadingServerContext:
    """The listening context for a certificate directory, following changes to its files.

    Call :meth:`reload_if_changed` periodically (it only stats the files when nothing
    changed). Files are compared by device, inode, size and mtime after following symlinks,
    which catches both in-place rewrites and the ``..data`` symlink swap of a mounted Secret.

    A new pair replaces the served one only when clients could verify it
    (:func:`~certs.validity.check_serving`): its key matches, it is within its validity, it
    chains to the CA clients were given (``ca_file`` as it was at the last good load, or as it
    is now when rotated together) and it covers ``names`` (by default, the names of the
    certificate served at start). Otherwise the last good certificate keeps being served,
    :attr:`problem` says why, :attr:`stale` is true and :attr:`rejections` counts it by reason.
    """

    def __init__(
        self,
        cert_file: Path,
        key_file: Path,
        *,
        ca_file: Path | None = None,
        names: Sequence[str] = (),
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._cert_file = cert_file
        self._key_file = key_file
        self._ca_file = ca_file
        self._clock = clock
        self.rejections: dict[str, int] = dict.fromkeys(REJECTION_REASONS, 0)
        self.problem: str | None = None
        self._trusted = self._read_ca()
        try:
            self._stamp = self._read_stamp()
        except OSError as exc:
            raise CertError(f"cannot read {exc.filename}: {exc.strerror or exc}") from None
        loaded = None
        for _ in range(3):  # a writer may be mid-rotation; the next look sees it finished
            loaded = self._load()
            if loaded is not None:
                break
        if loaded is None:
            raise CertError(f"{cert_file} keeps changing while being loaded")
        self._current, self._certificate, _ = loaded
        served = self._certificate
        self.names: tuple[str, ...] = tuple(names) or (*served.dns_names, *served.ip_addresses)
        self._failed_stamp: FileStamp | None = None
        self._last_warning: str | None = None
        self.context = self._current
        self.context.sni_callback = self._select

    @property
    def certificate(self) -> CertificateInfo:
        """The certificate new connections are given."""
        return self._certificate

    @property
    def stale(self) -> bool:
        """Whether the files hold something else than the certificate served (refused)."""
        return self.problem is not None

    def reload_if_changed(self) -> bool:
        """Load the files when they changed and are a valid pair; True when a new cert is live.

        An invalid pair (say, a rotation half written) keeps the previous certificate live and
        is retried when the files change again.
        """
        # Stamped before reading: a change racing the read is caught on the next call.
        try:
            stamp = self._read_stamp()
        except OSError as exc:
            self._warn_once(f"cannot read {exc.filename}: {exc.strerror or exc}")
            return False
        if stamp == self._stamp or stamp == self._failed_stamp:
            return False
        try:
            loaded = self._load()
        except _KeyMismatch as exc:
            self._refuse(stamp, Rejection("key_mismatch", str(exc)))
            return False
        except CertError as exc:
            self._refuse(stamp, Rejection("unreadable", str(exc)))
            return False
        if loaded is None:
            return False  # changed while loading: the stamp differs again next time
        context, certificate, (chain, key) = loaded
        if certificate.sha256 != self._certificate.sha256:
            candidate_ca = self._read_ca()
            rejection = check_serving(
                chain,
                key,
                trusted=[self._trusted, candidate_ca],
                names=self.names,
                now=self._clock(),
            )
            if rejection is not None:
                message = f"{self._cert_file}: {rejection.message}"
                self._refuse(stamp, Rejection(rejection.reason, message))
                return False
            if candidate_ca:
                self._trusted = candidate_ca
        self._stamp, self._failed_stamp, self._last_warning = stamp, None, None
        self.problem = None
        if certificate.sha256 == self._certificate.sha256:
            return False  # rewritten or touched, same certificate
        self._current, self._certificate = context, certificate
        logger.info(
            "serving certificate reloaded",
            extra={
                "serial": certificate.serial_hex,
                "not_after": certificate.not_after,
                "subject": certificate.subject,
            },
        )
        return True

    def _load(self) -> tuple[ssl.SSLContext, CertificateInfo, _Pair] | None:
        """A context for the files, the certificate it serves and the pair as read; None if
        they changed meanwhile.

        ``ssl`` only loads from paths, so the files are read before and after: when both
        reads agree, they describe what the context holds.
        """
        before = read_bytes(self._cert_file), read_bytes(self._key_file)
        try:
            chain = x509.load_pem_x509_certificates(before[0])
        except ValueError:
            raise CertError(f"{self._cert_file} does not hold a valid PEM certificate") from None
        key = read_private_key(self._key_file)
        if not same_public_key(chain[0], key):
            raise _KeyMismatch(
                f"{self._key_file} does not match the certificate in {self._cert_file}"
            )
        context = server_context(self._cert_file, self._key_file)
        if (read_bytes(self._cert_file), read_bytes(self._key_file)) != before:
            return None
        return context, CertificateInfo.of(chain[0]), (chain, key)

    def _read_ca(self) -> list[x509.Certificate]:
        if self._ca_file is None:
            return []
        try:
            return read_certificates(self._ca_file)
        except CertError:
            return []  # no CA file (a pair given without it) or not one: nothing to chain to

    def _refuse(self, stamp: FileStamp, rejection: Rejection) -> None:
        if rejection.reason != "not_yet_valid":
            # Files that do not change stay refused; a certificate not valid yet may become so.
            self._failed_stamp = stamp
        message = rejection.message
        if message != self.problem:
            self.rejections[rejection.reason] = self.rejections.get(rejection.reason, 0) + 1
        self.problem = message
        self._warn_once(message)

    def _select(
        self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: ssl.SSLContext
    ) -> None:
        current = self._current
        if connection.context is not current:
            connection.context = current

    def _read_stamp(self) -> FileStamp:
        stamps = []
        for path in (self._cert_file, self._key_file):
            st = os.stat(path)
            stamps.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(stamps)

    def _warn_once(self, message: str) -> None:
        # Polled every second: repeat a warning only when the problem changes.
        if message == self._last_warning:
            return
        self._last_warning = message
        logger.warning(
            "keeping the current serving certificate: %s",
            message,
            extra={"serial": self._certificate.serial_hex},
        )
