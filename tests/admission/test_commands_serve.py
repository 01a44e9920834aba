"""Tests for ``tenantgate serve``: flags over environment, exit codes, the runtime lifecycle."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

import certs
from admission import cli
from admission.cli import main
from admission.commands import serve as serve_command
from admission.server import Endpoints
from admission.settings import Settings
from tests.tlsclient import STARTUP_TIMEOUT, client, local_settings, start_process


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("TENANTGATE_"):
            monkeypatch.delenv(name)
    root, uvicorn = logging.getLogger(), logging.getLogger("uvicorn.error")
    handlers, level, uvicorn_level = list(root.handlers), root.level, uvicorn.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    uvicorn.setLevel(uvicorn_level)


def settings_for(*argv: str) -> Settings:
    return serve_command.settings_from_args(cli.build_parser().parse_args(["serve", *argv]))


async def hello(_: Request) -> Response:
    return PlainTextResponse("hello")


@dataclass
class FakeRuntime:
    """Stands in for admission.runtime's Runtime: two tiny apps and a recorded lifecycle."""

    events: list[str] = field(default_factory=list)
    app: ASGIApp = field(default_factory=lambda: Starlette(routes=[Route("/", hello)]))
    metrics_app: ASGIApp = field(default_factory=lambda: Starlette(routes=[Route("/", hello)]))

    async def startup(self) -> None:
        self.events.append("startup")

    async def shutdown(self) -> None:
        self.events.append("shutdown")


@dataclass
class ListeningRuntime(FakeRuntime):
    served: list[int] = field(default_factory=list)

    def certificate_loaded(self, certificate: certs.CertificateInfo) -> None:
        self.events.append("certificate")
        self.served.append(certificate.serial)


def test_flags_map_to_settings() -> None:
    settings = settings_for(
        "--config", "tenants.yaml", "--cert-dir", "/certs", "--host", "127.0.0.1",
        "--port", "0", "--metrics-host", "::1", "--metrics-port", "9090",
        "--log-format", "json", "--log-level", "debug", "--max-body-bytes", "1024",
        "--service", "gate", "--namespace", "ops", "--kubeconfig", "/kube/config",
        "--offline", "--shutdown-grace-seconds", "2.5",
    )  # fmt: skip
    assert settings == Settings(
        config=Path("tenants.yaml"),
        cert_dir=Path("/certs"),
        host="127.0.0.1",
        port=0,
        metrics_host="::1",
        metrics_port=9090,
        log_format="json",
        log_level="debug",
        max_body_bytes=1024,
        service="gate",
        namespace="ops",
        kubeconfig=Path("/kube/config"),
        offline=True,
        shutdown_grace_seconds=2.5,
    )


def test_flags_override_the_environment_and_only_given_flags_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TENANTGATE_PORT", "9443")
    monkeypatch.setenv("TENANTGATE_METRICS_PORT", "9090")
    monkeypatch.setenv("TENANTGATE_OFFLINE", "true")
    settings = settings_for("--port", "0", "--no-offline")
    assert settings.port == 0
    assert settings.metrics_port == 9090
    assert settings.offline is False
    assert settings_for().port == 9443
    assert settings_for().offline is True


def test_defaults_without_flags_or_environment() -> None:
    assert settings_for() == Settings()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--port", "70000"], "--port: Input should be less than or equal to 65535 (got '70000')"),
        (["--max-body-bytes", "0"], "--max-body-bytes: Input should be greater than 0"),
        (["--shutdown-grace-seconds", "soon"], "--shutdown-grace-seconds: Input should be"),
    ],
)
def test_invalid_values_exit_2_naming_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["serve", *argv]) == 2
    assert f"tenantgate serve: error: {message}" in capsys.readouterr().err


def test_unknown_log_format_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["serve", "--log-format", "xml"])
    assert exit_info.value.code == 2
    assert "argument --log-format: invalid choice: 'xml'" in capsys.readouterr().err


def test_serve_runtime_starts_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    runtime = ListeningRuntime()
    settings = local_settings(tmp_path / "certs")
    answers: list[str] = []

    def request_then_terminate(endpoints: Endpoints) -> None:
        with client(endpoints.url, tmp_path / "certs" / "ca.crt") as https:
            answers.append(https.get("/").text)
        with httpx.Client(base_url=endpoints.metrics_url, trust_env=False) as plain:
            answers.append(plain.get("/").text)
        # Only signal when serve() handles SIGTERM: the default action would end pytest itself.
        if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN, None):
            os.kill(os.getpid(), signal.SIGTERM)

    def on_started(endpoints: Endpoints) -> None:
        runtime.events.append("listening")
        threading.Thread(target=request_then_terminate, args=(endpoints,)).start()

    asyncio.run(serve_command.serve_runtime(settings, runtime, on_started=on_started))

    assert runtime.events == ["startup", "certificate", "listening", "shutdown"]
    assert runtime.served == [certs.describe(tmp_path / "certs").serving.serial]
    assert answers == ["hello", "hello"]
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_serve_exits_1_when_it_cannot_listen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runtime = FakeRuntime()
    monkeypatch.setattr(serve_command, "_runtime_builder", lambda: lambda _settings: runtime)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        argv = ["serve", "--host", "127.0.0.1", "--port", str(port), "--metrics-port", "0"]
        code = cli.main([*argv, "--cert-dir", str(tmp_path), "--log-format", "json"])
    assert code == 1
    assert runtime.events == ["startup", "shutdown"]
    assert f'"msg":"cannot serve: cannot listen on 127.0.0.1:{port}: Address already in use"' in (
        capsys.readouterr().err
    )


@pytest.mark.skipif(
    importlib.util.find_spec("admission.runtime") is None,
    reason="admission.runtime (build_runtime) is not in the tree yet",
)
def test_tenantgate_serve_end_to_end(tmp_path: Path) -> None:
    cert_dir = tmp_path / "certs"
    argv = ["serve", "--offline", "--cert-dir", str(cert_dir), "--log-format", "json"]
    argv += [
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--metrics-host",
        "127.0.0.1",
        "--metrics-port",
        "0",
    ]
    process = start_process([sys.executable, "-m", "admission.cli", *argv])
    try:
        port, metrics_port = process.endpoints()
        with client(f"https://127.0.0.1:{port}", cert_dir / "ca.crt") as https:
            assert https.get("/healthz").status_code == 200
        with httpx.Client(trust_env=False) as plain:
            assert plain.get(f"http://127.0.0.1:{metrics_port}/healthz").status_code == 200
        process.process.send_signal(signal.SIGTERM)
        assert process.process.wait(STARTUP_TIMEOUT) == 0
    finally:
        process.stop()


def test_help_shows_the_defaults_of_config_and_cert_dir(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])

    text = " ".join(capsys.readouterr().out.split())
    assert (
        "--config FILE tenants/profiles config file (default: $TENANTGATE_CONFIG, else the" in text
    )
    assert "embedded example, examples/tenantgate.yaml)" in text
    assert "(default: $TENANTGATE_CERT_DIR, else .tenantgate/certs)" in text
