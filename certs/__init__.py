"""TLS material: a CA and the serving certificate signed by it, rotation and the caBundle."""

from __future__ import annotations

from certs.files import CA_CERT, CA_KEY, TLS_CERT, TLS_KEY, CertError, MaterialPaths
from certs.material import (
    DEFAULT_CA_VALID_DAYS,
    DEFAULT_VALID_DAYS,
    ca_bundle,
    ensure,
    init,
    rotate,
)
from certs.tlscontext import ReloadingServerContext, server_context
from certs.validity import CertificateInfo, MaterialInfo, describe, problems

__all__ = [
    "CA_CERT",
    "CA_KEY",
    "DEFAULT_CA_VALID_DAYS",
    "DEFAULT_VALID_DAYS",
    "TLS_CERT",
    "TLS_KEY",
    "CertError",
    "CertificateInfo",
    "MaterialInfo",
    "MaterialPaths",
    "ReloadingServerContext",
    "ca_bundle",
    "describe",
    "ensure",
    "init",
    "problems",
    "rotate",
    "server_context",
]
