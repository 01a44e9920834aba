"""The control plane's TLS material: one CA, the API server's serving certificate, client
certificates per user, and the service-account signing key.

The CA signs both serving and client certificates (``--client-ca-file``); a user is its
certificate's common name and its groups the organisations, as kube-apiserver's x509
authenticator reads them (``staging/src/k8s.io/apiserver/pkg/authentication/request/x509``).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_FOR = timedelta(days=7)
# What clients inside and outside the cluster dial the API server by.
API_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
API_IPS = ("127.0.0.1", "10.0.0.1")


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _pem_cert(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


class Authority:
    """A CA that issues the control plane's certificates into ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._now = datetime.now(UTC) - timedelta(minutes=5)
        self._key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "testcluster-ca")])
        self._name = name
        self._cert = (
            self._builder(name, self._key.public_key())
            .issuer_name(name)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        self.ca_cert = directory / "ca.crt"
        self.ca_cert.write_bytes(_pem_cert(self._cert))

    def _builder(
        self, subject: x509.Name, public_key: ec.EllipticCurvePublicKey
    ) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(self._now)
            .not_valid_after(self._now + VALID_FOR)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        )

    def _issue(
        self,
        stem: str,
        subject: x509.Name,
        *,
        usage: x509.ObjectIdentifier,
        sans: list[x509.GeneralName] | None = None,
    ) -> KeyPair:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            self._builder(subject, key.public_key())
            .issuer_name(self._name)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        pair = KeyPair(self.directory / f"{stem}.crt", self.directory / f"{stem}.key")
        pair.cert.write_bytes(_pem_cert(builder.sign(self._key, hashes.SHA256())))
        pair.key.write_bytes(_pem_key(key))
        pair.key.chmod(0o600)
        return pair

    def serving(self, stem: str) -> KeyPair:
        """A serving certificate for the API server (and anything else on 127.0.0.1)."""
        sans: list[x509.GeneralName] = [x509.DNSName(name) for name in API_NAMES]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in API_IPS]
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, stem)])
        return self._issue(stem, subject, usage=ExtendedKeyUsageOID.SERVER_AUTH, sans=sans)

    def client(self, user: str, groups: tuple[str, ...] = ()) -> KeyPair:
        """A client certificate: the user is ``user``, its groups ``groups``."""
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups]
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, user))
        stem = "user-" + user.replace(":", "-")
        return self._issue(stem, x509.Name(attributes), usage=ExtendedKeyUsageOID.CLIENT_AUTH)


def service_account_key(directory: Path) -> tuple[Path, Path]:
    """The key pair that signs and verifies service-account tokens (private, public)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private, public = directory / "sa.key", directory / "sa.pub"
    private.write_bytes(_pem_key(key))
    private.chmod(0o600)
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public
