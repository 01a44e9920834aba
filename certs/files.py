"""The certificate directory on disk: file names, reading PEM, and atomic, private writes.

The names are those of a ``kubernetes.io/tls`` Secret (plus ``ca.key``), so a mounted Secret
and a directory written by ``tenantgate certs`` look the same to the server.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import (
    CertificateIssuerPrivateKeyTypes,
    PrivateKeyTypes,
)

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
TLS_CERT = "tls.crt"
TLS_KEY = "tls.key"

PRIVATE_MODE = 0o600
PUBLIC_MODE = 0o644
DIRECTORY_MODE = 0o700


class CertError(Exception):
    """TLS material is missing, unreadable or inconsistent; the message names the file."""


@dataclass(frozen=True)
class MaterialPaths:
    """Where each piece of TLS material lives in one directory."""

    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / CA_CERT

    @property
    def ca_key(self) -> Path:
        return self.directory / CA_KEY

    @property
    def tls_cert(self) -> Path:
        return self.directory / TLS_CERT

    @property
    def tls_key(self) -> Path:
        return self.directory / TLS_KEY

    @property
    def all(self) -> tuple[Path, ...]:
        return (self.ca_cert, self.ca_key, self.tls_cert, self.tls_key)


def require_directory(directory: Path) -> MaterialPaths:
    """The paths in ``directory``; :class:`CertError` when it is not an existing directory."""
    if not directory.exists():
        raise CertError(f"certificate directory {directory} does not exist")
    if not directory.is_dir():
        raise CertError(f"{directory} is not a directory")
    return MaterialPaths(directory)


def read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise CertError(f"{path} does not exist") from None
    except OSError as exc:
        raise CertError(f"cannot read {path}: {exc.strerror or exc}") from None


def read_certificates(path: Path) -> list[x509.Certificate]:
    """Every certificate in the PEM file ``path``, in file order (never empty)."""
    data = read_bytes(path)
    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise CertError(f"{path} does not hold a valid PEM certificate") from None
    return certificates


def read_private_key(path: Path) -> PrivateKeyTypes:
    data = read_bytes(path)
    try:
        return serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise CertError(f"{path} is encrypted; tenantgate needs an unencrypted key") from None
    except (ValueError, UnsupportedAlgorithm):
        # The parser's message may quote key bytes: never repeat it.
        raise CertError(f"{path} does not hold a valid PEM private key") from None


def read_issuer_key(path: Path) -> CertificateIssuerPrivateKeyTypes:
    key = read_private_key(path)
    if not isinstance(
        key,
        ec.EllipticCurvePrivateKey
        | rsa.RSAPrivateKey
        | ed25519.Ed25519PrivateKey
        | ed448.Ed448PrivateKey,
    ):
        raise CertError(f"{path} holds a {type(key).__name__}, which cannot sign certificates")
    return key


def same_public_key(certificate: x509.Certificate, key: PrivateKeyTypes) -> bool:
    der = serialization.Encoding.DER
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    return certificate.public_key().public_bytes(der, spki) == key.public_key().public_bytes(
        der, spki
    )


def certificates_pem(certificates: Sequence[x509.Certificate]) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certificates)


def private_key_pem(key: PrivateKeyTypes) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def write_atomic(path: Path, data: bytes, *, mode: int) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new file, never a mix.

    The temporary file is created with ``mode`` from the start, so a private key is never
    readable by others, not even for an instant.
    """
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise CertError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise CertError(f"cannot write {path}: {exc.strerror or exc}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _sync_directory(path.parent)


def _sync_directory(directory: Path) -> None:
    # Makes the rename durable; some filesystems refuse to open a directory, which is harmless.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
