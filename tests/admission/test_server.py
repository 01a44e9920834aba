"""Tests for admission.server over real TLS: ports chosen by the OS, clients verifying the CA.

Covers the TLS policy, keep-alive, the plain-HTTP metrics port, certificate rotation while a
client loop hammers the server, and SIGTERM with requests in flight (in a subprocess).
"""

from __future__ import annotations

import asyncio
import http.client
import logging
import shutil
import signal
import socket
import ssl
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

import certs
from admission import server as server_module
from admission.server import Endpoints, ServeError, WebhookServer
from tests.tlsclient import (
    STARTUP_TIMEOUT,
    RunningServer,
    client_context,
    local_settings,
    serving,
    start_process,
)


async def echo(request: Request) -> Response:
    client = request.client
    return JSONResponse({"path": request.url.path, "client_port": client.port if client else None})


async def healthz(_: Request) -> Response:
    return PlainTextResponse("ok")


def webhook_app() -> ASGIApp:
    return Starlette(routes=[Route("/{path:path}", echo, methods=["GET", "POST"])])


def metrics_app() -> ASGIApp:
    return Starlette(routes=[Route("/healthz", healthz)])


def draining_apps() -> tuple[ASGIApp, ASGIApp]:
    """For the SIGTERM subprocess: POST /slow waits until POST /release on the metrics port."""
    released = asyncio.Event()
    waiting = 0

    async def slow(_: Request) -> Response:
        nonlocal waiting
        waiting += 1
        try:
            await released.wait()
        finally:
            waiting -= 1
        return PlainTextResponse("done")

    async def inflight(_: Request) -> Response:
        return PlainTextResponse(str(waiting))

    async def release(_: Request) -> Response:
        released.set()
        return PlainTextResponse("released")

    app = Starlette(routes=[Route("/slow", slow, methods=["POST"]), Route("/inflight", inflight)])
    metrics = Starlette(
        routes=[Route("/healthz", healthz), Route("/release", release, methods=["POST"])]
    )
    return app, metrics


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting until {what}")
        time.sleep(0.01)


def peer_serial(sock: object) -> int:
    assert isinstance(sock, ssl.SSLSocket)
    der = sock.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def https(
    port: int, context: ssl.SSLContext, host: str = "127.0.0.1"
) -> http.client.HTTPSConnection:
    return http.client.HTTPSConnection(host, port, context=context, timeout=STARTUP_TIMEOUT)


def refused(port: int) -> bool:
    """Whether nothing listens on ``port`` any more; a connection reset as it is made means the
    listener is closing with it still queued (not closed yet): look again."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=STARTUP_TIMEOUT).close()
    except ConnectionRefusedError:
        return True
    except ConnectionResetError:
        return False
    return False


@pytest.mark.parametrize(
    ("error", "expected"),
    [(ConnectionRefusedError, True), (ConnectionResetError, False)],
    ids=["refused", "reset while the listener closes"],
)
def test_the_refused_probe_looks_again_after_a_reset(
    monkeypatch: pytest.MonkeyPatch, error: type[OSError], expected: bool
) -> None:
    """A SIGTERM test polls ``refused`` while the server closes its listener; a connection
    reset in that instant (seen once in a full run) is not the answer yet."""

    def connect(*args: object, **kwargs: object) -> socket.socket:
        raise error

    monkeypatch.setattr(socket, "create_connection", connect)
    assert refused(1) is expected


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    cert_dir = tmp_path_factory.mktemp("server") / "certs"  # does not exist: serve creates it
    with serving(local_settings(cert_dir), app=webhook_app(), metrics_app=metrics_app()) as running:
        yield running


def test_serve_creates_certificates_and_presents_them(server: RunningServer) -> None:
    cert_dir = server.ca_file.parent
    assert sorted(p.name for p in cert_dir.iterdir()) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    on_disk = certs.describe(cert_dir).serving
    assert server.server.certificate == on_disk
    connection = https(server.endpoints.port, client_context(server.ca_file))
    connection.request("GET", "/")
    assert connection.getresponse().status == 200
    assert peer_serial(connection.sock) == on_disk.serial
    connection.close()


def test_https_request_verified_against_the_ca(server: RunningServer) -> None:
    with server.client() as client:
        response = client.post("/mutate", content=b"{}")
    assert response.status_code == 200
    assert response.json()["path"] == "/mutate"
    assert response.http_version == "HTTP/1.1"
    assert "server" not in response.headers


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_certificate_names_match_local_addresses(server: RunningServer, host: str) -> None:
    connection = https(server.endpoints.port, client_context(server.ca_file), host=host)
    connection.request("GET", "/")
    assert connection.getresponse().status == 200
    connection.close()


def test_client_trusting_another_ca_is_refused(server: RunningServer, tmp_path: Path) -> None:
    certs.init(tmp_path, service="tenantgate", namespace="other")
    connection = https(server.endpoints.port, client_context(tmp_path / "ca.crt"))
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer"):
        connection.request("GET", "/")
    connection.close()


def test_name_not_in_the_certificate_is_refused(server: RunningServer) -> None:
    context = client_context(server.ca_file)
    with (
        socket.create_connection(("127.0.0.1", server.endpoints.port)) as raw,
        pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"),
    ):
        context.wrap_socket(raw, server_hostname="evil.example.com")


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_tls12_and_tls13_are_accepted(server: RunningServer, version: ssl.TLSVersion) -> None:
    context = client_context(server.ca_file, minimum_version=version, maximum_version=version)
    with (
        socket.create_connection(("127.0.0.1", server.endpoints.port)) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        assert (
            tls.version()
            == {ssl.TLSVersion.TLSv1_2: "TLSv1.2", ssl.TLSVersion.TLSv1_3: "TLSv1.3"}[version]
        )


def tls11_client(ca_file: Path) -> ssl.SSLContext:
    context = client_context(ca_file)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # that is the point
        context.minimum_version = ssl.TLSVersion.TLSv1_1
        context.maximum_version = ssl.TLSVersion.TLSv1_1
    context.set_ciphers("DEFAULT:@SECLEVEL=0")  # OpenSSL 3 otherwise refuses to offer TLS 1.1
    return context


def tls11_supported(client: ssl.SSLContext, ca: Path) -> bool:
    """Whether this OpenSSL can speak TLS 1.1 at all, against a permissive in-memory server."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        server.minimum_version = ssl.TLSVersion.TLSv1
    server.set_ciphers("DEFAULT:@SECLEVEL=0")
    server.load_cert_chain(ca.parent / "tls.crt", ca.parent / "tls.key")
    client_in, client_out, server_in, server_out = (ssl.MemoryBIO() for _ in range(4))
    tls_client = client.wrap_bio(client_in, client_out, server_hostname="localhost")
    tls_server = server.wrap_bio(server_in, server_out, server_side=True)
    for _ in range(10):
        for endpoint in (tls_client, tls_server):
            try:
                endpoint.do_handshake()
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLError:
                return False
        server_in.write(client_out.read())
        client_in.write(server_out.read())
    return tls_client.version() == "TLSv1.1"


def test_tls11_client_is_refused(server: RunningServer) -> None:
    context = tls11_client(server.ca_file)
    if not tls11_supported(context, server.ca_file):
        pytest.skip("this OpenSSL cannot offer TLS 1.1, so the server's refusal is not testable")
    with (
        socket.create_connection(("127.0.0.1", server.endpoints.port)) as raw,
        pytest.raises((ssl.SSLError, ConnectionResetError)) as refusal,
    ):
        context.wrap_socket(raw, server_hostname="localhost")
    # asyncio may close before its protocol_version alert is flushed: the client then sees EOF.
    # tests/certs/test_tlscontext.py shows the server-side reason (UNSUPPORTED_PROTOCOL).
    if isinstance(refusal.value, ssl.SSLError):
        assert refusal.value.reason in {
            "TLSV1_ALERT_PROTOCOL_VERSION",
            "UNEXPECTED_EOF_WHILE_READING",
        }


def test_keep_alive_reuses_the_connection(server: RunningServer) -> None:
    with server.client() as client:
        first = client.get("/one")
        second = client.get("/two")
    assert first.status_code == second.status_code == 200
    assert "close" not in first.headers.get("connection", "")
    assert first.json()["client_port"] == second.json()["client_port"]


def test_metrics_port_serves_plain_http(server: RunningServer) -> None:
    with server.metrics_client() as client:
        response = client.get("/healthz")
    assert response.status_code == 200
    assert response.text == "ok"
    assert server.metrics_url.startswith("http://127.0.0.1:")
    assert server.endpoints.metrics_port not in (0, server.endpoints.port)


def test_plain_http_on_the_webhook_port_gets_no_answer(server: RunningServer) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", server.endpoints.port, timeout=30)
    connection.request("GET", "/")
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        connection.getresponse()
    connection.close()


def test_chosen_ports_are_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with (
        caplog.at_level(logging.INFO, logger="admission.server"),
        serving(local_settings(tmp_path), app=webhook_app()) as running,
    ):
        endpoints = running.endpoints
    (record,) = [r for r in caplog.records if r.getMessage().startswith("serving webhook")]
    assert record.getMessage() == (
        f"serving webhook on https://127.0.0.1:{endpoints.port} "
        f"and metrics on http://127.0.0.1:{endpoints.metrics_port}"
    )
    assert vars(record)["port"] == endpoints.port > 0
    assert vars(record)["metrics_port"] == endpoints.metrics_port > 0


def test_existing_material_is_served_unchanged(tmp_path: Path) -> None:
    info = certs.init(tmp_path, service="tenantgate", namespace="tg")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with serving(local_settings(tmp_path), app=webhook_app()) as running:
        assert running.server.certificate == info
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_port_in_use_is_a_serve_error(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        server = WebhookServer(
            local_settings(tmp_path, port=port), app=webhook_app(), metrics_app=metrics_app()
        )
        with pytest.raises(ServeError, match=f"cannot listen on 127.0.0.1:{port}: Address already"):
            asyncio.run(server.serve())


def test_unusable_certificates_are_a_serve_error(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("")
    server = WebhookServer(local_settings(tmp_path), app=webhook_app(), metrics_app=metrics_app())
    with pytest.raises(ServeError, match="incomplete TLS material"):
        asyncio.run(server.serve())


def test_stop_requested_before_serving_returns_after_startup(tmp_path: Path) -> None:
    server = WebhookServer(local_settings(tmp_path), app=webhook_app(), metrics_app=metrics_app())
    started: list[Endpoints] = []
    server.request_stop()
    asyncio.run(server.serve(on_started=started.append))
    assert len(started) == 1
    assert refused(started[0].port)


def test_shutdown_grace_bounds_the_wait_for_stuck_requests(tmp_path: Path) -> None:
    entered = threading.Event()
    never = asyncio.Event()

    async def stuck(_: Request) -> Response:
        entered.set()
        await never.wait()
        return PlainTextResponse("unreachable")

    app = Starlette(routes=[Route("/stuck", stuck)])
    outcome: list[object] = []
    settings = local_settings(tmp_path, shutdown_grace_seconds=0.5)
    with serving(settings, app=app) as running:

        def call() -> None:
            connection = https(running.endpoints.port, client_context(running.ca_file))
            try:
                connection.request("GET", "/stuck")
                outcome.append(connection.getresponse().status)
            except (OSError, http.client.HTTPException) as exc:
                outcome.append(exc)
            finally:
                connection.close()

        caller = threading.Thread(target=call)
        caller.start()
        assert entered.wait(STARTUP_TIMEOUT)
    # Leaving the block stopped the server: it returned although the request never finished.
    caller.join(STARTUP_TIMEOUT)
    assert len(outcome) == 1
    assert outcome[0] != 200


def test_endpoint_urls() -> None:
    endpoints = Endpoints(host="::", port=8443, metrics_host="0.0.0.0", metrics_port=8080)
    assert endpoints.url == "https://[::]:8443"
    assert endpoints.metrics_url == "http://0.0.0.0:8080"


@dataclass(frozen=True)
class Attempt:
    started: float
    finished: float
    serial: int | None
    error: str | None


class Hammer:
    """Worker threads sending requests until stopped: fresh connections, plus one kept alive."""

    def __init__(self, port: int, context: ssl.SSLContext, *, workers: int = 3) -> None:
        self._port, self._context = port, context
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.fresh: list[Attempt] = []
        self.kept: list[Attempt] = []
        self._threads = [threading.Thread(target=self._fresh_loop) for _ in range(workers)]
        self._threads.append(threading.Thread(target=self._kept_loop))

    def __enter__(self) -> Hammer:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(STARTUP_TIMEOUT)

    def snapshot(self) -> tuple[list[Attempt], list[Attempt]]:
        with self._lock:
            return list(self.fresh), list(self.kept)

    def _fresh_loop(self) -> None:
        while not self._stop.is_set():
            connection = https(self._port, self._context)
            attempt = self._send(connection, time.monotonic())
            connection.close()
            with self._lock:
                self.fresh.append(attempt)

    def _kept_loop(self) -> None:
        connection = https(self._port, self._context)
        while not self._stop.is_set():
            attempt = self._send(connection, time.monotonic())
            with self._lock:
                self.kept.append(attempt)
        connection.close()

    def _send(self, connection: http.client.HTTPSConnection, started: float) -> Attempt:
        try:
            connection.request("POST", "/validate", body=b"{}")
            response = connection.getresponse()
            response.read()
            serial = peer_serial(connection.sock)
        except (OSError, http.client.HTTPException) as exc:
            return Attempt(started, time.monotonic(), None, repr(exc))
        error = None if response.status == 200 else f"HTTP {response.status}"
        return Attempt(started, time.monotonic(), serial, error)


@pytest.mark.parametrize("roll_ca", [False, True], ids=["serving-cert", "ca-and-serving-cert"])
def test_rotation_under_load_fails_no_request(tmp_path: Path, roll_ca: bool) -> None:
    cert_dir = tmp_path / "certs"
    certs.init(cert_dir, service="tenantgate", namespace="tg")
    old_ca = tmp_path / "old-ca.crt"
    shutil.copy(cert_dir / "ca.crt", old_ca)  # what clients were given before the rotation
    served: list[int] = []
    with serving(
        local_settings(cert_dir),
        app=webhook_app(),
        on_certificate=lambda c: served.append(c.serial),
    ) as running:
        old_serial = certs.describe(cert_dir).serving.serial
        with Hammer(running.endpoints.port, client_context(old_ca)) as hammer:
            wait_until(
                lambda: sum(a.serial == old_serial for a in hammer.snapshot()[0]) >= 10,
                "requests succeed before the rotation",
            )
            new_serial = certs.rotate(cert_dir, ca=roll_ca).serial
            wait_until(
                lambda: any(a.serial == new_serial for a in hammer.snapshot()[0]),
                "a new connection presents the new certificate",
            )
            swapped = min(a.finished for a in hammer.snapshot()[0] if a.serial == new_serial)
            wait_until(
                lambda: (
                    sum(a.started > swapped for a in hammer.snapshot()[0]) >= 10
                    and sum(a.started > swapped for a in hammer.snapshot()[1]) >= 3
                ),
                "more requests after the swap",
            )
        fresh, kept = hammer.snapshot()
        # A client given the new bundle verifies too.
        connection = https(running.endpoints.port, client_context(cert_dir / "ca.crt"))
        connection.request("GET", "/")
        assert connection.getresponse().status == 200
        assert peer_serial(connection.sock) == new_serial
        connection.close()

    assert [a.error for a in fresh + kept if a.error] == []
    assert served == [old_serial, new_serial]
    assert {a.serial for a in fresh if a.started > swapped} == {new_serial}
    # The kept-alive connection outlived the rotation with the certificate it started with.
    assert {a.serial for a in kept} == {old_serial}
    assert any(a.started > swapped for a in kept)


def test_sigterm_finishes_in_flight_requests_then_exits_0(tmp_path: Path) -> None:
    cert_dir = tmp_path / "certs"
    certs.init(cert_dir, service="tenantgate", namespace="tg")
    process = start_process(
        [sys.executable, "-m", "tests.tlsclient", f"{__name__}:draining_apps"],
        env={
            "TENANTGATE_CERT_DIR": str(cert_dir),
            "TENANTGATE_HOST": "127.0.0.1",
            "TENANTGATE_PORT": "0",
            "TENANTGATE_METRICS_HOST": "127.0.0.1",
            "TENANTGATE_METRICS_PORT": "0",
            "TENANTGATE_SHUTDOWN_GRACE_SECONDS": "120",
        },
    )
    try:
        port, metrics_port = process.endpoints()
        context = client_context(cert_dir / "ca.crt")
        results: list[tuple[int, bytes]] = []

        def slow_request() -> None:
            connection = https(port, context)
            connection.request("POST", "/slow", body=b"{}")
            response = connection.getresponse()
            results.append((response.status, response.read()))
            connection.close()

        def inflight() -> int:
            connection = https(port, context)
            connection.request("GET", "/inflight")
            count = int(connection.getresponse().read())
            connection.close()
            return count

        workers = [threading.Thread(target=slow_request) for _ in range(4)]
        for worker in workers:
            worker.start()
        wait_until(lambda: inflight() == 4, "four requests are in flight")

        process.process.send_signal(signal.SIGTERM)

        wait_until(lambda: refused(port), "the webhook stops accepting connections")
        assert process.process.poll() is None  # still draining
        assert results == []
        # Health and metrics answer while the webhook drains.
        metrics = http.client.HTTPConnection("127.0.0.1", metrics_port, timeout=STARTUP_TIMEOUT)
        metrics.request("GET", "/healthz")
        assert metrics.getresponse().read() == b"ok"
        metrics.request("POST", "/release")
        assert metrics.getresponse().read() == b"released"
        metrics.close()

        for worker in workers:
            worker.join(STARTUP_TIMEOUT)
        assert results == [(200, b"done")] * 4
        assert process.process.wait(STARTUP_TIMEOUT) == 0
    finally:
        process.stop()
    process.wait_for_log(lambda e: e.get("msg") == "SIGTERM received")
    process.wait_for_log(lambda e: e.get("msg") == "stopped")


def test_accepted_connections_have_nagle_off() -> None:
    # asyncio sets TCP_NODELAY on accepted sockets only when the listening socket's proto is
    # IPPROTO_TCP; without it every small response waits for the client's delayed ACK.
    listener = server_module._listen("127.0.0.1", 0)
    options: list[int] = []

    async def scenario() -> None:
        seen = asyncio.Event()

        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sock = writer.get_extra_info("socket")
            options.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            seen.set()
            writer.close()

        async with await asyncio.start_server(accepted, sock=listener):
            _, writer = await asyncio.open_connection(*listener.getsockname()[:2])
            await seen.wait()
            writer.close()

    asyncio.run(asyncio.wait_for(scenario(), timeout=30))
    assert len(options) == 1
    assert options[0] != 0
