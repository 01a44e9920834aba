"""Tests for certs.issuing: the CA, the serving certificate and cross-signatures, in memory."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509
from cryptography.x509 import verification
from cryptography.x509.oid import ExtendedKeyUsageOID

from certs.issuing import (
    CLOCK_SKEW,
    LOCAL_IPS,
    Issued,
    cross_sign,
    issue_ca,
    issue_serving,
    san_names,
    serving_names,
)

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
YEAR = timedelta(days=365)


@pytest.fixture(scope="module")
def ca() -> Issued:
    return issue_ca(now=NOW, valid_for=10 * YEAR)


@pytest.fixture(scope="module")
def serving(ca: Issued) -> Issued:
    return issue_serving(
        ca, dns_names=serving_names("tenantgate", "tg-system"), now=NOW, valid_for=YEAR
    )


def verify(
    leaf: x509.Certificate,
    roots: list[x509.Certificate],
    *extra: x509.Certificate,
    name: str = "tenantgate.tg-system.svc",
) -> list[x509.Certificate]:
    verifier = (
        verification.PolicyBuilder()
        .store(verification.Store(roots))
        .time(NOW)
        .build_server_verifier(x509.DNSName(name))
    )
    return verifier.verify(leaf, list(extra))


def test_serving_names_cover_every_way_the_service_is_reached() -> None:
    assert serving_names("tenantgate", "tg-system") == (
        "tenantgate",
        "tenantgate.tg-system",
        "tenantgate.tg-system.svc",
        "tenantgate.tg-system.svc.cluster.local",
        "localhost",
    )


@pytest.mark.parametrize(
    ("service", "namespace", "message"),
    [
        ("Tenantgate", "ns", "invalid service name 'Tenantgate'"),
        ("1gate", "ns", "invalid service name '1gate'"),
        ("gate-", "ns", "invalid service name 'gate-'"),
        ("a" * 64, "ns", "invalid service name"),
        ("", "ns", "invalid service name ''"),
        ("gate", "team_a", "invalid namespace 'team_a'"),
        ("gate", "a.b", "invalid namespace 'a.b'"),
        ("gate", "n" * 64, "invalid namespace"),
    ],
)
def test_serving_names_reject_invalid_kubernetes_names(
    service: str, namespace: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        serving_names(service, namespace)


def test_namespace_may_start_with_a_digit() -> None:
    assert serving_names("gate", "1team")[1] == "gate.1team"


def test_ca_is_a_self_signed_ca_with_only_signing_key_usage(ca: Issued) -> None:
    cert = ca.certificate
    assert cert.subject == cert.issuer
    cert.verify_directly_issued_by(cert)
    constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical
    assert constraints.value.ca
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage)
    assert usage.critical
    assert usage.value.key_cert_sign
    assert usage.value.crl_sign
    assert not usage.value.digital_signature
    assert not usage.value.key_encipherment
    assert cert.not_valid_before_utc == NOW - CLOCK_SKEW
    assert cert.not_valid_after_utc == NOW + 10 * YEAR


def test_each_ca_gets_a_unique_name() -> None:
    first = issue_ca(now=NOW, valid_for=YEAR).certificate.subject
    second = issue_ca(now=NOW, valid_for=YEAR).certificate.subject
    assert first != second


def test_serving_certificate_is_distinct_from_and_signed_by_the_ca(
    ca: Issued, serving: Issued
) -> None:
    leaf = serving.certificate
    assert leaf.subject != ca.certificate.subject
    assert leaf.issuer == ca.certificate.subject
    assert leaf.serial_number != ca.certificate.serial_number
    assert leaf.public_key() != ca.certificate.public_key()
    leaf.verify_directly_issued_by(ca.certificate)
    constraints = leaf.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert not constraints.ca
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    aki = leaf.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    ski = ca.certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert aki.key_identifier == ski.digest


def test_serving_certificate_names(serving: Issued) -> None:
    dns_names, ips = san_names(serving.certificate)
    assert dns_names == serving_names("tenantgate", "tg-system")
    assert ips == (ipaddress.IPv4Address("127.0.0.1"), ipaddress.IPv6Address("::1"))
    assert ips == LOCAL_IPS


@pytest.mark.parametrize(
    "name",
    [
        "tenantgate",
        "tenantgate.tg-system.svc",
        "tenantgate.tg-system.svc.cluster.local",
        "localhost",
    ],
)
def test_serving_certificate_verifies_for_each_name(ca: Issued, serving: Issued, name: str) -> None:
    chain = verify(serving.certificate, [ca.certificate], name=name)
    assert chain == [serving.certificate, ca.certificate]


def test_serving_certificate_does_not_verify_for_other_names(ca: Issued, serving: Issued) -> None:
    with pytest.raises(verification.VerificationError):
        verify(serving.certificate, [ca.certificate], name="tenantgate.other.svc")


def test_serving_certificate_never_outlives_its_ca() -> None:
    short_ca = issue_ca(now=NOW, valid_for=timedelta(days=30))
    leaf = issue_serving(short_ca, dns_names=["x"], now=NOW, valid_for=YEAR)
    assert leaf.certificate.not_valid_after_utc == short_ca.certificate.not_valid_after_utc


def test_an_expired_ca_cannot_issue() -> None:
    old = issue_ca(now=NOW - 2 * YEAR, valid_for=YEAR)
    with pytest.raises(ValueError, match="the CA expired at"):
        issue_serving(old, dns_names=["x"], now=NOW, valid_for=YEAR)


def test_common_name_stays_within_64_characters(ca: Issued) -> None:
    names = serving_names("s" * 63, "n" * 63)
    leaf = issue_serving(ca, dns_names=names, now=NOW, valid_for=YEAR).certificate
    common_name = leaf.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value
    assert common_name == "s" * 63
    assert san_names(leaf)[0] == names


def test_serving_certificate_needs_a_name(ca: Issued) -> None:
    with pytest.raises(ValueError, match="at least one DNS name or IP address"):
        issue_serving(ca, dns_names=[], ip_addresses=[], now=NOW, valid_for=YEAR)


def test_naive_time_is_rejected() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        issue_ca(now=datetime(2025, 1, 1), valid_for=YEAR)


def test_cross_signed_ca_lets_clients_of_the_old_ca_verify_the_new_leaf(ca: Issued) -> None:
    successor = issue_ca(now=NOW, valid_for=10 * YEAR)
    cross = cross_sign(successor.certificate, by=ca, now=NOW)
    leaf = issue_serving(successor, dns_names=["tenantgate.tg-system.svc"], now=NOW, valid_for=YEAR)

    assert cross.subject == successor.certificate.subject
    assert cross.issuer == ca.certificate.subject
    assert cross.public_key() == successor.certificate.public_key()
    assert cross.not_valid_after_utc <= ca.certificate.not_valid_after_utc
    # Old bundle: leaf -> cross-signed successor -> old CA.
    chain = verify(leaf.certificate, [ca.certificate], cross)
    assert chain == [leaf.certificate, cross, ca.certificate]
    # New bundle: the successor itself is the anchor.
    assert verify(leaf.certificate, [successor.certificate], cross)[-1] == successor.certificate
    # Without the cross-signature an old-bundle client cannot verify.
    with pytest.raises(verification.VerificationError):
        verify(leaf.certificate, [ca.certificate])


def test_san_names_of_a_certificate_without_san(ca: Issued) -> None:
    assert san_names(ca.certificate) == ((), ())
