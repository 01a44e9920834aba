"""Tests for ``tenantgate certs``: init, rotate, ca-bundle and show through the real CLI."""

from __future__ import annotations

import base64
import shutil
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509

import certs
from admission.cli import main


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TENANTGATE_CERT_DIR", "TENANTGATE_SERVICE", "TENANTGATE_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("pristine") / "certs"
    assert (
        main(["certs", "init", "--service", "web", "--namespace", "prod", "--dir", str(directory)])
        == 0
    )
    return directory


@pytest.fixture
def material(pristine: Path, tmp_path: Path) -> Path:
    target = tmp_path / "certs"
    shutil.copytree(pristine, target)
    return target


def serial(path: Path) -> int:
    return x509.load_pem_x509_certificates(path.read_bytes())[0].serial_number


def test_init_creates_material_for_the_service(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "certs"
    code = main(
        ["certs", "init", "--service", "web", "--namespace", "prod", "--dir", str(directory)]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith(f"created a CA and a serving certificate in {directory}\n")
    assert "web.prod.svc.cluster.local" in out
    info = certs.describe(directory)
    assert info.serving.dns_names[:3] == ("web", "web.prod", "web.prod.svc")
    assert f"serial:      {info.serving.serial_hex}" in out
    assert stat.S_IMODE((directory / "tls.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((directory / "ca.key").stat().st_mode) == 0o600


def test_init_defaults_come_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TENANTGATE_CERT_DIR", str(tmp_path / "from-env"))
    monkeypatch.setenv("TENANTGATE_SERVICE", "gate")
    assert main(["certs", "init"]) == 0
    names = certs.describe(tmp_path / "from-env").serving.dns_names
    assert names[:3] == ("gate", "gate.tenantgate-system", "gate.tenantgate-system.svc")


def test_init_ignores_the_environment_for_what_flags_give(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TENANTGATE_PORT", "not-a-port")
    args = ["--service", "a", "--namespace", "b", "--dir", str(tmp_path)]
    assert main(["certs", "init", *args]) == 0


def test_init_refuses_existing_material_unless_forced(
    material: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = serial(material / "ca.crt")
    assert (
        main(["certs", "init", "--service", "web", "--namespace", "prod", "--dir", str(material)])
        == 1
    )
    err = capsys.readouterr().err
    assert err.startswith(f"tenantgate certs: error: {material} already holds TLS material")
    assert serial(material / "ca.crt") == before
    args = ["--service", "web", "--namespace", "prod", "--dir", str(material), "--force"]
    assert main(["certs", "init", *args]) == 0
    assert serial(material / "ca.crt") != before


def test_init_rejects_an_invalid_service_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--service", "Web_1", "--namespace", "prod", "--dir", str(tmp_path)]
    assert main(["certs", "init", *args]) == 1
    assert "tenantgate certs: error: invalid service name 'Web_1'" in capsys.readouterr().err


def test_rotate_keeps_the_ca(material: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ca = (material / "ca.crt").read_bytes()
    old = serial(material / "tls.crt")
    assert main(["certs", "rotate", "--dir", str(material)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"rotated the serving certificate in {material}\n")
    assert (material / "ca.crt").read_bytes() == ca
    new = serial(material / "tls.crt")
    assert new != old
    assert f"{new:X}" in out
    assert "caBundle" not in out


def test_rotate_ca_keeps_the_old_ca_in_the_bundle(
    material: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (old_ca,) = x509.load_pem_x509_certificates((material / "ca.crt").read_bytes())
    assert main(["certs", "rotate", "--ca", "--dir", str(material)]) == 0
    assert "update the caBundle" in capsys.readouterr().out
    bundle = x509.load_pem_x509_certificates((material / "ca.crt").read_bytes())
    assert len(bundle) == 2
    assert bundle[1] == old_ca


def test_rotate_uses_the_directory_from_the_environment(
    material: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TENANTGATE_CERT_DIR", str(material))
    old = serial(material / "tls.crt")
    assert main(["certs", "rotate"]) == 0
    assert serial(material / "tls.crt") != old


def test_rotate_errors(material: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["certs", "rotate", "--dir", str(tmp_path / "missing")]) == 1
    assert capsys.readouterr().err == (
        f"tenantgate certs: error: certificate directory {tmp_path / 'missing'} does not exist\n"
    )
    (material / "ca.key").write_text("not a key")
    assert main(["certs", "rotate", "--dir", str(material)]) == 1
    assert capsys.readouterr().err == (
        f"tenantgate certs: error: {material / 'ca.key'} does not hold a valid PEM private key\n"
    )
    (material / "ca.key").unlink()
    (material / "ca.key").mkdir()
    assert main(["certs", "rotate", "--dir", str(material)]) == 1
    assert capsys.readouterr().err == (
        f"tenantgate certs: error: cannot read {material / 'ca.key'}: Is a directory\n"
    )


def test_ca_bundle_prints_base64_pem_that_ssl_accepts(
    material: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["certs", "ca-bundle", "--dir", str(material)]) == 0
    out = capsys.readouterr().out
    assert out.endswith("\n")
    assert out.count("\n") == 1
    pem = base64.b64decode(out.strip(), validate=True)
    assert pem == (material / "ca.crt").read_bytes()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cadata=pem.decode("ascii"))
    assert context.cert_store_stats()["x509_ca"] == 1


def test_ca_bundle_without_ca_crt(material: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (material / "ca.crt").unlink()
    assert main(["certs", "ca-bundle", "--dir", str(material)]) == 1
    assert (
        capsys.readouterr().err
        == f"tenantgate certs: error: {material / 'ca.crt'} does not exist\n"
    )


def test_show_describes_usable_material(material: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["certs", "show", "--dir", str(material)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("serving certificate (tls.crt):\n  subject:     CN=web.prod.svc\n")
    names = "web, web.prod, web.prod.svc, web.prod.svc.cluster.local, localhost, 127.0.0.1, ::1"
    assert f"names:       {names}\n" in out
    assert "CA bundle (ca.crt):\n  CN=tenantgate-ca-" in out


def test_show_exits_1_on_a_problem(
    material: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    certs.init(tmp_path / "other", service="web", namespace="prod")
    shutil.copy(tmp_path / "other" / "tls.key", material / "tls.key")
    assert main(["certs", "show", "--dir", str(material)]) == 1
    assert capsys.readouterr().err == (
        f"tenantgate certs: problem: {material / 'tls.key'} does not match the certificate in "
        f"{material / 'tls.crt'}\n"
    )


def test_invalid_environment_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TENANTGATE_PORT", "not-a-port")
    assert main(["certs", "ca-bundle"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tenantgate certs: error: invalid TENANTGATE_* environment: port: ")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["certs"], "the following arguments are required: ACTION"),
        (["certs", "rotate", "--valid-days", "0"], "argument --valid-days: must be at least 1: 0"),
        (
            ["certs", "init", "--ca-valid-days", "x"],
            "argument --ca-valid-days: not a whole number: 'x'",
        ),
    ],
)
def test_usage_errors_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
