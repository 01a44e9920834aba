"""Tests for certs.material: init, ensure, rotate (with and without the CA) and the caBundle."""

from __future__ import annotations

import base64
import shutil
import ssl
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509

from certs.files import CertError
from certs.material import ca_bundle, ensure, init, rotate
from certs.validity import describe, problems, verify_chain

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
NAMES = (
    "tenantgate",
    "tenantgate.tg",
    "tenantgate.tg.svc",
    "tenantgate.tg.svc.cluster.local",
    "localhost",
)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("pristine") / "certs"
    init(directory, service="tenantgate", namespace="tg", now=NOW)
    return directory


@pytest.fixture
def material(pristine: Path, tmp_path: Path) -> Path:
    target = tmp_path / "certs"
    shutil.copytree(pristine, target)
    return target


def certificates(path: Path) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(path.read_bytes())


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_init_writes_the_four_files_with_private_keys_0600(pristine: Path) -> None:
    assert sorted(p.name for p in pristine.iterdir()) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert mode(pristine) == 0o700
    assert mode(pristine / "ca.key") == 0o600
    assert mode(pristine / "tls.key") == 0o600
    assert mode(pristine / "ca.crt") == 0o644
    assert mode(pristine / "tls.crt") == 0o644


def test_init_makes_a_separate_ca_and_leaf_whose_chain_verifies(pristine: Path) -> None:
    (ca,) = certificates(pristine / "ca.crt")
    (leaf,) = certificates(pristine / "tls.crt")
    assert ca != leaf
    assert ca.subject != leaf.subject
    assert (pristine / "ca.key").read_bytes() != (pristine / "tls.key").read_bytes()
    assert verify_chain([leaf], [ca], now=NOW) is None
    info = describe(pristine).serving
    assert info.dns_names == NAMES
    assert info.ip_addresses == ("127.0.0.1", "::1")


def test_init_returns_the_serving_certificate(tmp_path: Path) -> None:
    info = init(tmp_path / "c", service="svc", namespace="ns", valid_days=7, now=NOW)
    assert info == describe(tmp_path / "c").serving
    assert info.not_after == NOW + timedelta(days=7)


def test_init_refuses_to_replace_material_without_force(material: Path) -> None:
    before = (material / "ca.crt").read_bytes()
    with pytest.raises(CertError, match=r"already holds TLS material .*--force"):
        init(material, service="tenantgate", namespace="tg", now=NOW)
    assert (material / "ca.crt").read_bytes() == before
    init(material, service="tenantgate", namespace="tg", now=NOW, force=True)
    assert (material / "ca.crt").read_bytes() != before


def test_init_rejects_invalid_names_and_validity(tmp_path: Path) -> None:
    with pytest.raises(CertError, match="invalid service name 'Web'"):
        init(tmp_path / "c", service="Web", namespace="tg")
    with pytest.raises(CertError, match="validity must be at least one day"):
        init(tmp_path / "c", service="web", namespace="tg", valid_days=0)
    assert not (tmp_path / "c").exists()


def test_init_over_a_file_is_a_cert_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(CertError, match="is not a directory"):
        init(tmp_path / "file", service="web", namespace="tg")


def test_ensure_creates_material_only_when_there_is_none(tmp_path: Path) -> None:
    directory = tmp_path / "fresh"
    assert ensure(directory, service="tenantgate", namespace="tg", now=NOW)
    snapshot = {p.name: p.read_bytes() for p in directory.iterdir()}
    assert not ensure(directory, service="tenantgate", namespace="tg", now=NOW)
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == snapshot


def test_ensure_creates_in_an_existing_empty_directory(tmp_path: Path) -> None:
    assert ensure(tmp_path, service="tenantgate", namespace="tg", now=NOW)
    assert problems(tmp_path, now=NOW) == ()


def test_ensure_accepts_a_serving_pair_without_ca(material: Path) -> None:
    (material / "ca.crt").unlink()
    (material / "ca.key").unlink()
    assert not ensure(material, service="tenantgate", namespace="tg", now=NOW)
    assert not (material / "ca.crt").exists()


def test_ensure_refuses_partial_material(material: Path) -> None:
    (material / "tls.key").unlink()
    with pytest.raises(CertError, match=r"incomplete TLS material in .*: tls\.key missing"):
        ensure(material, service="tenantgate", namespace="tg", now=NOW)


def test_rotate_keeps_the_ca_and_issues_a_new_leaf(material: Path) -> None:
    ca_crt, ca_key = (material / "ca.crt").read_bytes(), (material / "ca.key").read_bytes()
    old = describe(material).serving
    old_key = (material / "tls.key").read_bytes()

    info = rotate(material, now=NOW + timedelta(days=1))

    assert (material / "ca.crt").read_bytes() == ca_crt
    assert (material / "ca.key").read_bytes() == ca_key
    assert (material / "tls.key").read_bytes() != old_key
    assert info.serial != old.serial
    assert info == describe(material).serving
    assert info.dns_names == old.dns_names
    assert info.ip_addresses == old.ip_addresses
    assert info.issuer == old.issuer
    assert mode(material / "tls.key") == 0o600
    assert problems(material, now=NOW + timedelta(days=1)) == ()


def test_rotate_carries_over_custom_names(tmp_path: Path) -> None:
    init(tmp_path, service="web", namespace="prod", now=NOW)
    info = rotate(tmp_path, now=NOW)
    assert info.dns_names[:2] == ("web", "web.prod")


def test_rotate_with_ca_rolls_the_ca_and_old_clients_keep_verifying(material: Path) -> None:
    (old_ca,) = certificates(material / "ca.crt")
    old_ca_key = (material / "ca.key").read_bytes()
    later = NOW + timedelta(days=1)

    rotate(material, ca=True, now=later)

    new_ca, kept = certificates(material / "ca.crt")
    assert kept == old_ca
    assert new_ca.subject != old_ca.subject
    assert (material / "ca.key").read_bytes() != old_ca_key
    assert mode(material / "ca.key") == 0o600
    chain = certificates(material / "tls.crt")
    leaf, cross = chain
    assert leaf.issuer == new_ca.subject
    assert cross.subject == new_ca.subject
    assert cross.issuer == old_ca.subject
    assert verify_chain(chain, [old_ca], now=later) is None
    assert verify_chain(chain, [new_ca], now=later) is None
    assert verify_chain(chain, [new_ca, old_ca], now=later) is None
    assert problems(material, now=later) == ()


def test_rotate_after_a_ca_roll_keeps_serving_the_cross_signature(material: Path) -> None:
    (old_ca,) = certificates(material / "ca.crt")
    rotate(material, ca=True, now=NOW)
    cross = certificates(material / "tls.crt")[1]
    rotate(material, now=NOW)
    chain = certificates(material / "tls.crt")
    assert chain[1:] == [cross]
    assert verify_chain(chain, [old_ca], now=NOW) is None


def test_bundle_keeps_only_the_previous_ca(material: Path) -> None:
    (first,) = certificates(material / "ca.crt")
    rotate(material, ca=True, now=NOW)
    second = certificates(material / "ca.crt")[0]
    rotate(material, ca=True, now=NOW)
    bundle = certificates(material / "ca.crt")
    assert len(bundle) == 2
    assert bundle[1] == second
    assert first not in bundle


def test_rotate_refuses_an_expired_ca_but_rotate_ca_recovers(tmp_path: Path) -> None:
    init(tmp_path, service="tenantgate", namespace="tg", valid_days=1, ca_valid_days=2, now=NOW)
    later = NOW + timedelta(days=3)
    with pytest.raises(CertError, match=r"expired at .*rotate --ca"):
        rotate(tmp_path, now=later)
    rotate(tmp_path, ca=True, now=later)
    assert len(certificates(tmp_path / "ca.crt")) == 1  # an expired CA is not worth keeping
    assert len(certificates(tmp_path / "tls.crt")) == 1
    assert problems(tmp_path, now=later) == ()


def test_rotate_errors(material: Path, tmp_path: Path) -> None:
    with pytest.raises(CertError, match=r"certificate directory .*/missing does not exist"):
        rotate(tmp_path / "missing")
    other = tmp_path / "other"
    init(other, service="tenantgate", namespace="tg", now=NOW)
    shutil.copy(other / "ca.key", material / "ca.key")
    with pytest.raises(CertError, match=r"ca\.key does not match the first certificate in"):
        rotate(material, now=NOW)
    (material / "ca.key").write_text("garbage")
    with pytest.raises(CertError, match=r"ca\.key does not hold a valid PEM private key"):
        rotate(material, now=NOW)
    (material / "ca.key").unlink()
    with pytest.raises(CertError, match=r"ca\.key does not exist"):
        rotate(material, now=NOW)


def test_ca_bundle_is_base64_pem_that_ssl_accepts(material: Path) -> None:
    bundle = ca_bundle(material)
    pem = base64.b64decode(bundle, validate=True)
    assert pem == (material / "ca.crt").read_bytes()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cadata=pem.decode("ascii"))
    assert context.cert_store_stats()["x509_ca"] == 1


def test_ca_bundle_lists_both_cas_after_a_ca_roll(material: Path) -> None:
    rotate(material, ca=True, now=NOW)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cadata=base64.b64decode(ca_bundle(material)).decode())
    assert context.cert_store_stats()["x509_ca"] == 2


def test_ca_bundle_errors(material: Path, tmp_path: Path) -> None:
    with pytest.raises(CertError, match=r"certificate directory .* does not exist"):
        ca_bundle(tmp_path / "missing")
    shutil.copy(material / "tls.crt", material / "ca.crt")
    with pytest.raises(CertError, match="holds a certificate that is not a CA"):
        ca_bundle(material)
    (material / "ca.crt").unlink()
    with pytest.raises(CertError, match=r"ca\.crt does not exist"):
        ca_bundle(material)


def test_naive_now_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        init(tmp_path, service="a", namespace="b", now=datetime(2025, 1, 1))
