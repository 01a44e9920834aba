"""Tests for certs.tlscontext: the server context and swapping in renewed certificates.

Handshakes run over in-memory BIOs: deterministic, no sockets. The server tests in
tests/admission/test_server.py cover the same behaviour over real connections.
"""

from __future__ import annotations

import logging
import os
import shutil
import ssl
import warnings
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509

from certs.files import (
    CertError,
    certificates_pem,
    private_key_pem,
    read_certificates,
    read_issuer_key,
)
from certs.issuing import Issued, issue_ca, issue_serving, serving_names
from certs.material import init, rotate
from certs.tlscontext import ReloadingServerContext, server_context


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("pristine") / "certs"
    init(directory, service="tenantgate", namespace="tg")
    return directory


@pytest.fixture
def material(pristine: Path, tmp_path: Path) -> Path:
    target = tmp_path / "certs"
    shutil.copytree(pristine, target)
    return target


def client_context(ca_file: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cafile=ca_file)
    return context


def handshake(server: ssl.SSLContext, client: ssl.SSLContext, *, name: str = "localhost") -> int:
    """Complete a TLS handshake in memory; the serial of the certificate the server presented."""
    client_in, client_out, server_in, server_out = (ssl.MemoryBIO() for _ in range(4))
    tls_client = client.wrap_bio(client_in, client_out, server_hostname=name)
    tls_server = server.wrap_bio(server_in, server_out, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(20):
        for side, endpoint in (("client", tls_client), ("server", tls_server)):
            if not done[side]:
                try:
                    endpoint.do_handshake()
                    done[side] = True
                except ssl.SSLWantReadError:
                    pass
        server_in.write(client_out.read())
        client_in.write(server_out.read())
        if all(done.values()):
            break
    der = tls_client.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def serial(path: Path) -> int:
    return x509.load_pem_x509_certificates(path.read_bytes())[0].serial_number


def test_server_context_is_tls12_or_later(material: Path) -> None:
    context = server_context(material / "tls.crt", material / "tls.key")
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.options & ssl.OP_NO_COMPRESSION
    assert handshake(context, client_context(material / "ca.crt")) == serial(material / "tls.crt")


def test_tls12_and_tls13_clients_connect(material: Path) -> None:
    context = server_context(material / "tls.crt", material / "tls.key")
    client = client_context(material / "ca.crt")
    client.maximum_version = ssl.TLSVersion.TLSv1_2
    assert handshake(context, client) == serial(material / "tls.crt")
    client.minimum_version = client.maximum_version = ssl.TLSVersion.TLSv1_3
    assert handshake(context, client) == serial(material / "tls.crt")


def test_tls11_client_is_refused_for_its_version(material: Path) -> None:
    context = server_context(material / "tls.crt", material / "tls.key")
    client = client_context(material / "ca.crt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # that is the point
        client.minimum_version = client.maximum_version = ssl.TLSVersion.TLSv1_1
    client.set_ciphers("DEFAULT:@SECLEVEL=0")  # OpenSSL 3 otherwise refuses to offer TLS 1.1
    # Offer TLS 1.1 together with TLS 1.2-capable suites, so only the version can be refused.
    with pytest.raises(ssl.SSLError) as refusal:
        handshake(context, client)
    if refusal.value.reason == "NO_PROTOCOLS_AVAILABLE":
        pytest.skip("this OpenSSL cannot offer TLS 1.1")
    assert refusal.value.reason == "UNSUPPORTED_PROTOCOL"


def test_server_context_errors(material: Path, tmp_path: Path) -> None:
    with pytest.raises(CertError, match=r"missing\.crt does not exist"):
        server_context(material / "missing.crt", material / "tls.key")
    with pytest.raises(CertError, match=r"missing\.key does not exist"):
        server_context(material / "tls.crt", material / "missing.key")
    (tmp_path / "garbage.crt").write_text("garbage")
    with pytest.raises(CertError, match=r"cannot load .*garbage\.crt with .*tls\.key: "):
        server_context(tmp_path / "garbage.crt", material / "tls.key")
    other = tmp_path / "other"
    init(other, service="tenantgate", namespace="tg")
    with pytest.raises(
        CertError, match=r"cannot load .*tls\.crt with .*tls\.key: KEY_VALUES_MISMATCH"
    ):
        server_context(material / "tls.crt", other / "tls.key")


def test_reload_presents_the_new_certificate_to_new_handshakes(material: Path) -> None:
    reloading = ReloadingServerContext(material / "tls.crt", material / "tls.key")
    client = client_context(material / "ca.crt")
    first = serial(material / "tls.crt")
    assert reloading.certificate.serial == first
    assert handshake(reloading.context, client) == first
    assert not reloading.reload_if_changed()

    rotate(material)

    assert handshake(reloading.context, client) == first  # not yet reloaded
    assert reloading.reload_if_changed()
    second = serial(material / "tls.crt")
    assert second != first
    assert reloading.certificate.serial == second
    assert handshake(reloading.context, client) == second
    assert handshake(reloading.context, client, name="tenantgate.tg.svc") == second
    assert not reloading.reload_if_changed()


def test_half_written_pair_keeps_the_old_certificate_until_complete(
    material: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reloading = ReloadingServerContext(material / "tls.crt", material / "tls.key")
    client = client_context(material / "ca.crt")
    first = reloading.certificate.serial
    staged = tmp_path / "staged"
    shutil.copytree(material, staged)
    rotate(staged)

    shutil.copy(staged / "tls.key", material / "tls.key")  # the key lands first
    with caplog.at_level(logging.WARNING, logger="certs.tlscontext"):
        assert not reloading.reload_if_changed()
        assert not reloading.reload_if_changed()  # same files: neither retried nor re-logged
    assert [r.getMessage() for r in caplog.records] == [
        "keeping the current serving certificate: "
        f"{material / 'tls.key'} does not match the certificate in {material / 'tls.crt'}"
    ]
    assert reloading.stale
    assert reloading.rejections["key_mismatch"] == 1
    assert handshake(reloading.context, client) == first

    shutil.copy(staged / "tls.crt", material / "tls.crt")
    assert reloading.reload_if_changed()
    assert handshake(reloading.context, client) == serial(staged / "tls.crt")


def test_missing_files_keep_the_old_certificate(material: Path) -> None:
    reloading = ReloadingServerContext(material / "tls.crt", material / "tls.key")
    first = reloading.certificate.serial
    (material / "tls.crt").unlink()
    assert not reloading.reload_if_changed()
    assert handshake(reloading.context, client_context(material / "ca.crt")) == first


def test_secret_volume_symlink_swap_is_detected(material: Path, tmp_path: Path) -> None:
    # The kubelet's layout: tls.crt -> ..data/tls.crt, ..data -> ..<timestamp>/, swapped atomically.
    volume = tmp_path / "volume"
    volume.mkdir()
    first = volume / "..2025_01"
    shutil.copytree(material, first)
    (volume / "..data").symlink_to(first.name)
    for name in ("ca.crt", "tls.crt", "tls.key"):
        (volume / name).symlink_to(f"..data/{name}")
    reloading = ReloadingServerContext(volume / "tls.crt", volume / "tls.key")
    client = client_context(volume / "ca.crt")
    old = reloading.certificate.serial

    second = volume / "..2025_02"
    shutil.copytree(first, second)
    rotate(second)
    (volume / "..data_tmp").symlink_to(second.name)
    os.replace(volume / "..data_tmp", volume / "..data")

    assert reloading.reload_if_changed()
    assert reloading.certificate.serial == serial(second / "tls.crt") != old
    assert handshake(reloading.context, client) == reloading.certificate.serial


def test_initial_load_errors_are_cert_errors(tmp_path: Path) -> None:
    with pytest.raises(CertError, match=r"cannot read .*tls\.crt: No such file"):
        ReloadingServerContext(tmp_path / "tls.crt", tmp_path / "tls.key")


def test_rewritten_identical_files_are_not_a_reload(
    material: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reloading = ReloadingServerContext(material / "tls.crt", material / "tls.key")
    before = reloading.certificate
    data = (material / "tls.crt").read_bytes()
    (material / "tls.crt").unlink()
    (material / "tls.crt").write_bytes(data)  # a new inode, same certificate
    with caplog.at_level(logging.INFO, logger="certs.tlscontext"):
        assert not reloading.reload_if_changed()
    assert caplog.records == []
    assert reloading.certificate == before
    rotate(material)
    assert reloading.reload_if_changed()
    assert reloading.certificate != before


# --- refusing certificates nobody could verify ---------------------------------------------

NOW = datetime.now(UTC)


def write_pair(directory: Path, issued: Issued) -> None:
    (directory / "tls.crt").write_bytes(certificates_pem([issued.certificate]))
    (directory / "tls.key").write_bytes(private_key_pem(issued.key))


def directory_ca(directory: Path) -> Issued:
    return Issued(
        certificate=read_certificates(directory / "ca.crt")[0],
        key=read_issuer_key(directory / "ca.key"),
    )


NAMES = serving_names("tenantgate", "tg")


def leaf(
    ca: Issued,
    *,
    names: tuple[str, ...] = NAMES,
    now: datetime = NOW,
    valid_for: timedelta = timedelta(days=30),
) -> Issued:
    return issue_serving(ca, dns_names=names, now=now, valid_for=valid_for)


@pytest.mark.parametrize(
    ("reason", "make", "message"),
    [
        (
            "expired",
            lambda ca: leaf(ca, now=NOW - timedelta(days=3), valid_for=timedelta(days=1)),
            "the certificate expired at",
        ),
        (
            "not_yet_valid",
            lambda ca: leaf(ca, now=NOW + timedelta(days=1)),
            "the certificate is not valid before",
        ),
        (
            "untrusted",
            lambda _: leaf(issue_ca(now=NOW, valid_for=timedelta(days=90))),
            "the certificate does not verify against the CA:",
        ),
        (
            "wrong_names",
            lambda ca: leaf(ca, names=("other.example.com",)),
            "the certificate does not cover",
        ),
    ],
    ids=["expired", "not-yet-valid", "foreign-ca", "wrong-names"],
)
def test_a_certificate_clients_cannot_verify_is_refused(
    material: Path, reason: str, make: Callable[[Issued], Issued], message: str
) -> None:
    reloading = ReloadingServerContext(
        material / "tls.crt", material / "tls.key", ca_file=material / "ca.crt"
    )
    first = reloading.certificate.serial
    write_pair(material, make(directory_ca(material)))

    assert not reloading.reload_if_changed()

    assert handshake(reloading.context, client_context(material / "ca.crt")) == first
    assert reloading.stale
    assert reloading.problem is not None
    assert reloading.problem.startswith(f"{material / 'tls.crt'}: {message}")
    assert reloading.rejections[reason] == 1
    assert sum(reloading.rejections.values()) == 1

    # A good pair then goes live and clears the problem.
    write_pair(material, leaf(directory_ca(material)))
    assert reloading.reload_if_changed()
    assert [reloading.stale, reloading.problem] == [False, None]
    assert handshake(reloading.context, client_context(material / "ca.crt")) != first


def test_a_leaf_of_a_new_ca_rotated_together_is_taken(material: Path) -> None:
    reloading = ReloadingServerContext(
        material / "tls.crt", material / "tls.key", ca_file=material / "ca.crt"
    )
    new_ca = issue_ca(now=NOW, valid_for=timedelta(days=90))
    (material / "ca.crt").write_bytes(certificates_pem([new_ca.certificate]))
    write_pair(material, leaf(new_ca))

    assert reloading.reload_if_changed()
    assert not reloading.stale
    # The new CA is now the one a later leaf must chain to.
    write_pair(material, leaf(issue_ca(now=NOW, valid_for=timedelta(days=90))))
    assert not reloading.reload_if_changed()
    assert reloading.rejections["untrusted"] == 1


def test_names_default_to_those_of_the_certificate_served_at_start(material: Path) -> None:
    reloading = ReloadingServerContext(material / "tls.crt", material / "tls.key")
    assert set(NAMES) <= set(reloading.names)
    given = ReloadingServerContext(
        material / "tls.crt", material / "tls.key", names=("tenantgate.tg.svc",)
    )
    write_pair(material, leaf(directory_ca(material), names=("tenantgate.tg.svc",)))
    assert given.reload_if_changed()
    assert not reloading.reload_if_changed()  # fewer names than the certificate it replaces
    assert reloading.rejections["wrong_names"] == 1


def test_a_certificate_not_valid_yet_is_taken_once_it_is(material: Path) -> None:
    clock = [NOW]
    reloading = ReloadingServerContext(
        material / "tls.crt",
        material / "tls.key",
        ca_file=material / "ca.crt",
        clock=lambda: clock[0],
    )
    write_pair(material, leaf(directory_ca(material), now=NOW + timedelta(hours=1)))
    assert not reloading.reload_if_changed()
    assert not reloading.reload_if_changed()
    assert reloading.rejections["not_yet_valid"] == 1  # counted once, not every poll

    clock[0] = NOW + timedelta(hours=2)
    assert reloading.reload_if_changed()
    assert not reloading.stale
