"""Tests for certs.validity: describing material and the problems readiness reports."""

from __future__ import annotations

import ipaddress
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509

from certs.issuing import issue_ca, issue_serving
from certs.material import init
from certs.validity import CertificateInfo, covers, describe, problems

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("material") / "certs"
    init(directory, service="tenantgate", namespace="tg", valid_days=30, now=NOW)
    return directory


@pytest.fixture
def copy(material: Path, tmp_path: Path) -> Path:
    target = tmp_path / "certs"
    shutil.copytree(material, target)
    return target


def test_describe(material: Path) -> None:
    info = describe(material)
    assert info.directory == material
    assert info.serving.subject == "CN=tenantgate.tg.svc"
    assert info.serving.dns_names[-2:] == ("tenantgate.tg.svc.cluster.local", "localhost")
    assert info.serving.ip_addresses == ("127.0.0.1", "::1")
    assert not info.serving.is_ca
    assert info.serving.not_after == NOW + timedelta(days=30)
    assert info.intermediates == ()
    assert len(info.bundle) == 1
    assert info.bundle[0].is_ca
    assert info.serving.issuer == info.bundle[0].subject
    assert info.has_ca_key
    assert len(info.serving.sha256) == 64


def test_serial_hex_matches_openssl_style(material: Path) -> None:
    info = describe(material).serving
    assert int(info.serial_hex, 16) == info.serial
    assert info.serial_hex == info.serial_hex.upper()


def test_valid_at_is_half_open(material: Path) -> None:
    info: CertificateInfo = describe(material).serving
    assert info.valid_at(NOW)
    assert info.valid_at(info.not_before)
    assert not info.valid_at(info.not_after)
    assert not info.valid_at(info.not_before - timedelta(seconds=1))


def test_fresh_material_has_no_problems(material: Path) -> None:
    assert problems(material, now=NOW) == ()


def test_expired_and_not_yet_valid(material: Path) -> None:
    (expired,) = problems(material, now=NOW + timedelta(days=31))
    assert expired == f"{material / 'tls.crt'} expired at {(NOW + timedelta(days=30)).isoformat()}"
    (early,) = problems(material, now=NOW - timedelta(days=1))
    assert early.startswith(f"{material / 'tls.crt'} is not valid before 2025-06-01T11:55:00")


def test_key_that_does_not_match(copy: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    init(other, service="tenantgate", namespace="tg", now=NOW)
    shutil.copy(other / "tls.key", copy / "tls.key")
    assert problems(copy, now=NOW) == (
        f"{copy / 'tls.key'} does not match the certificate in {copy / 'tls.crt'}",
    )


def test_certificate_that_does_not_chain_to_ca_crt(copy: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    init(other, service="tenantgate", namespace="tg", now=NOW)
    shutil.copy(other / "ca.crt", copy / "ca.crt")
    (problem,) = problems(copy, now=NOW)
    assert problem.startswith(f"{copy / 'tls.crt'} does not verify against {copy / 'ca.crt'}: ")


def test_serving_pair_without_ca_files_is_fine(copy: Path) -> None:
    (copy / "ca.crt").unlink()
    (copy / "ca.key").unlink()
    assert problems(copy, now=NOW) == ()
    info = describe(copy)
    assert info.bundle == ()
    assert not info.has_ca_key


def test_missing_files_and_directory(copy: Path, tmp_path: Path) -> None:
    (copy / "tls.key").unlink()
    assert problems(copy, now=NOW) == (f"{copy / 'tls.key'} does not exist",)
    assert problems(tmp_path / "none", now=NOW) == (
        f"certificate directory {tmp_path / 'none'} does not exist",
    )


# --- names a certificate covers (RFC 6125, section 6.4) -------------------------------------


def with_names(*names: str) -> x509.Certificate:
    """A certificate for ``names``: DNS names, or IP addresses written as such."""
    ips = []
    dns_names = []
    for name in names:
        try:
            ips.append(ipaddress.ip_address(name))
        except ValueError:
            dns_names.append(name)
    ca = issue_ca(now=datetime.now(UTC), valid_for=timedelta(days=1))
    return issue_serving(
        ca,
        dns_names=dns_names,
        ip_addresses=ips,
        now=datetime.now(UTC),
        valid_for=timedelta(days=1),
    ).certificate


@pytest.mark.parametrize(
    ("sans", "name", "covered"),
    [
        (("tenantgate.tg.svc",), "tenantgate.tg.svc", True),
        (("Tenantgate.TG.svc",), "tenantgate.tg.svc", True),  # case-insensitive
        (("tenantgate.tg.svc",), "tenantgate.tg.svc.cluster.local", False),
        (("*.tg.svc",), "tenantgate.tg.svc", True),
        (("*.tg.svc",), "a.b.tg.svc", False),  # the leftmost label only
        (("*.tg.svc",), "tg.svc", False),
        (("tenantgate.tg.svc", "127.0.0.1"), "127.0.0.1", True),
        (("tenantgate.tg.svc", "127.0.0.1"), "10.0.0.1", False),
        (("127.0.0.1",), "localhost", False),
    ],
)
def test_covers_matches_names_as_a_tls_client_would(
    sans: tuple[str, ...], name: str, covered: bool
) -> None:
    assert covers(with_names(*sans), name) is covered
