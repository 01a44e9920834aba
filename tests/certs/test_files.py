"""Tests for certs.files: reading PEM with clear errors, atomic private writes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, x25519

from certs.files import (
    CertError,
    MaterialPaths,
    read_certificates,
    read_issuer_key,
    read_private_key,
    require_directory,
    write_atomic,
)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_write_atomic_creates_private_file_even_with_permissive_umask(tmp_path: Path) -> None:
    target = tmp_path / "tls.key"
    previous = os.umask(0)
    try:
        write_atomic(target, b"secret", mode=0o600)
    finally:
        os.umask(previous)
    assert target.read_bytes() == b"secret"
    assert mode(target) == 0o600


def test_write_atomic_replaces_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "tls.crt"
    target.write_bytes(b"old")
    inode = target.stat().st_ino
    write_atomic(target, b"new", mode=0o644)
    assert target.read_bytes() == b"new"
    assert mode(target) == 0o644
    assert target.stat().st_ino != inode  # a rename, not an in-place rewrite
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tls.crt"]


def test_write_atomic_into_a_missing_directory_is_a_cert_error(tmp_path: Path) -> None:
    with pytest.raises(CertError, match=r"cannot write .*missing/tls\.key"):
        write_atomic(tmp_path / "missing" / "tls.key", b"x", mode=0o600)


def test_write_atomic_failure_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "tls.crt"
    target.mkdir()  # os.replace cannot put a file over a directory
    with pytest.raises(CertError, match="cannot write"):
        write_atomic(target, b"x", mode=0o644)
    assert target.is_dir()
    assert [p.name for p in tmp_path.iterdir()] == ["tls.crt"]


def test_require_directory(tmp_path: Path) -> None:
    assert require_directory(tmp_path) == MaterialPaths(tmp_path)
    with pytest.raises(CertError, match=r"certificate directory .*/nope does not exist"):
        require_directory(tmp_path / "nope")
    file = tmp_path / "file"
    file.write_text("")
    with pytest.raises(CertError, match="is not a directory"):
        require_directory(file)


def test_material_paths_use_secret_key_names(tmp_path: Path) -> None:
    names = [p.name for p in MaterialPaths(tmp_path).all]
    assert names == ["ca.crt", "ca.key", "tls.crt", "tls.key"]


def test_read_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(CertError, match=r"/tls\.crt does not exist"):
        read_certificates(tmp_path / "tls.crt")
    (tmp_path / "tls.crt").write_text("not a certificate")
    with pytest.raises(CertError, match=r"tls\.crt does not hold a valid PEM certificate"):
        read_certificates(tmp_path / "tls.crt")
    (tmp_path / "dir.key").mkdir()
    with pytest.raises(CertError, match=r"cannot read .*dir\.key: Is a directory"):
        read_private_key(tmp_path / "dir.key")


def test_invalid_key_error_does_not_echo_the_file(tmp_path: Path) -> None:
    path = tmp_path / "tls.key"
    path.write_text("-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWJ5dGVz\n-----END PRIVATE KEY-----\n")
    with pytest.raises(CertError) as info:
        read_private_key(path)
    assert str(info.value) == f"{path} does not hold a valid PEM private key"


def test_encrypted_key_is_refused(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    path = tmp_path / "ca.key"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"pw"),
        )
    )
    with pytest.raises(CertError, match="is encrypted"):
        read_private_key(path)


def test_issuer_key_must_be_able_to_sign(tmp_path: Path) -> None:
    path = tmp_path / "ca.key"
    path.write_bytes(
        x25519.X25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(CertError, match="cannot sign certificates"):
        read_issuer_key(path)
