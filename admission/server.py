"""Serving: the HTTPS webhook app and the plain-HTTP metrics app, in one process and one loop.

uvicorn is driven from code. tenantgate binds the sockets itself (so port 0 is resolved before
anything is announced), owns the signal handling for both servers, and hands uvicorn a TLS
context whose certificate follows the files in ``cert_dir`` (see :mod:`certs.tlscontext`).

Shutdown on SIGTERM/SIGINT: ``on_shutdown`` runs (readiness goes false), the webhook stops
accepting and finishes its in-flight requests within ``shutdown_grace_seconds``, then the
metrics server stops, so liveness probes keep answering while the webhook drains.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import math
import os
import signal
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

import uvicorn
from starlette.types import ASGIApp

import certs
from admission.settings import Settings

logger = logging.getLogger(__name__)

CERT_POLL_SECONDS = 1.0
# Longer than the API server's idle-connection timeout (90 s): the client, not the server, should
# close idle connections, or a request may race the server's close.
KEEP_ALIVE_SECONDS = 120
BACKLOG = 2048
_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class ServeError(Exception):
    """The server could not start (address in use, unusable certificates...)."""


@dataclass(frozen=True)
class Endpoints:
    """Where the servers listen, with port 0 resolved to the port actually bound."""

    host: str
    port: int
    metrics_host: str
    metrics_port: int

    @property
    def url(self) -> str:
        return f"https://{_netloc(self.host, self.port)}"

    @property
    def metrics_url(self) -> str:
        return f"http://{_netloc(self.metrics_host, self.metrics_port)}"


StartedCallback = Callable[[Endpoints], Awaitable[None] | None]
ShutdownCallback = Callable[[], Awaitable[None] | None]
CertificateCallback = Callable[[certs.CertificateInfo], None]


class _UvicornServer(uvicorn.Server):
    """A uvicorn server that leaves signals to :class:`WebhookServer`, which stops both."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class WebhookServer:
    """The two servers of one ``tenantgate serve`` process.

    ``serve()`` runs until a signal (when on the main thread) or :meth:`request_stop`.
    ``on_certificate`` is called in the event loop with the certificate served at start and
    after each reload, so readiness can check its validity without reading files.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        app: ASGIApp,
        metrics_app: ASGIApp,
        on_certificate: CertificateCallback | None = None,
        cert_poll_seconds: float = CERT_POLL_SECONDS,
    ) -> None:
        self._settings = settings
        self._app = app
        self._metrics_app = metrics_app
        self._on_certificate = on_certificate
        self._cert_poll_seconds = cert_poll_seconds
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stop_requested = False
        self._servers: list[_UvicornServer] = []
        self._tls: certs.ReloadingServerContext | None = None
        self.endpoints: Endpoints | None = None

    @property
    def certificate(self) -> certs.CertificateInfo | None:
        """The certificate new connections get, once serving."""
        return self._tls.certificate if self._tls is not None else None

    def request_stop(self) -> None:
        """Begin a graceful shutdown; safe from any thread, before or during ``serve()``."""
        self._stop_requested = True
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed in between
                loop.call_soon_threadsafe(stop.set)

    async def serve(
        self,
        *,
        on_started: StartedCallback | None = None,
        on_shutdown: ShutdownCallback | None = None,
    ) -> None:
        """Serve until stopped. Raises :class:`ServeError` when the servers cannot start."""
        settings = self._settings
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if self._stop_requested:
            self._stop.set()
        self._tls = await asyncio.to_thread(_load_tls, settings)
        self._certificate_loaded(self._tls.certificate)
        webhook_socket = _listen(settings.host, settings.port)
        try:
            metrics_socket = _listen(settings.metrics_host, settings.metrics_port)
        except BaseException:
            webhook_socket.close()
            raise
        webhook = _UvicornServer(self._config(self._app, tls=self._tls))
        metrics = _UvicornServer(self._config(self._metrics_app, tls=None))
        self._servers = [webhook, metrics]
        tasks = {
            webhook: asyncio.create_task(webhook.serve(sockets=[webhook_socket])),
            metrics: asyncio.create_task(metrics.serve(sockets=[metrics_socket])),
        }
        watcher: asyncio.Task[None] | None = None
        installed = self._install_signal_handlers()
        try:
            await _started(tasks)
            self.endpoints = Endpoints(
                host=settings.host,
                port=webhook_socket.getsockname()[1],
                metrics_host=settings.metrics_host,
                metrics_port=metrics_socket.getsockname()[1],
            )
            logger.info(
                "serving webhook on %s and metrics on %s",
                self.endpoints.url,
                self.endpoints.metrics_url,
                extra={
                    "port": self.endpoints.port,
                    "metrics_port": self.endpoints.metrics_port,
                    "serial": self._tls.certificate.serial_hex,
                    "not_after": self._tls.certificate.not_after,
                },
            )
            watcher = asyncio.create_task(self._watch_certificates(self._tls))
            if on_started is not None:
                await _call(on_started, self.endpoints)
            await _until_stopped(self._stop, tasks)
            logger.info("shutting down: finishing in-flight requests")
            if on_shutdown is not None:
                await _call(on_shutdown)
        finally:
            if watcher is not None:
                watcher.cancel()
                await asyncio.wait({watcher})
            # The webhook drains first; health and metrics answer until it is done.
            for server in (webhook, metrics):
                server.should_exit = True
                await asyncio.wait({tasks[server]})  # a failure was already raised above
            for sock in (webhook_socket, metrics_socket):
                sock.close()
            for sig in installed:
                self._loop.remove_signal_handler(sig)
        logger.info("stopped")

    def _config(self, app: ASGIApp, *, tls: certs.ReloadingServerContext | None) -> uvicorn.Config:
        settings = self._settings
        config = uvicorn.Config(
            app,
            lifespan="off",  # the runtime starts and stops explicitly, around serve()
            log_config=None,  # admission.logs configures logging for the whole process
            access_log=settings.log_level == "debug",
            proxy_headers=False,
            server_header=False,
            backlog=BACKLOG,
            timeout_keep_alive=KEEP_ALIVE_SECONDS,
            # uvicorn counts whole seconds; rounding up never cuts a request short.
            timeout_graceful_shutdown=math.ceil(settings.shutdown_grace_seconds),
        )
        config.load()
        # Set after load(): uvicorn would otherwise build its own context from file names.
        config.ssl = tls.context if tls is not None else None
        return config

    async def _watch_certificates(self, tls: certs.ReloadingServerContext) -> None:
        while True:
            await asyncio.sleep(self._cert_poll_seconds)
            try:
                if await asyncio.to_thread(tls.reload_if_changed):
                    self._certificate_loaded(tls.certificate)
            except Exception:
                logger.exception("certificate reload failed; keeping the current certificate")

    def _certificate_loaded(self, certificate: certs.CertificateInfo) -> None:
        if self._on_certificate is not None:
            self._on_certificate(certificate)

    def _install_signal_handlers(self) -> list[signal.Signals]:
        if threading.current_thread() is not threading.main_thread() or self._loop is None:
            return []
        installed = []
        for sig in _SIGNALS:
            try:
                self._loop.add_signal_handler(sig, self._on_signal, sig)
            except (NotImplementedError, RuntimeError):  # pragma: no cover - non-Unix loops
                continue
            installed.append(sig)
        return installed

    def _on_signal(self, sig: signal.Signals) -> None:
        if self._stop is not None and self._stop.is_set():
            # A second signal: stop waiting for in-flight requests.
            logger.warning("%s received again: exiting without waiting", sig.name)
            for server in self._servers:
                server.force_exit = True
            return
        logger.info("%s received", sig.name)
        self.request_stop()


async def serve(
    settings: Settings,
    *,
    app: ASGIApp,
    metrics_app: ASGIApp,
    on_started: StartedCallback | None = None,
    on_shutdown: ShutdownCallback | None = None,
    on_certificate: CertificateCallback | None = None,
) -> None:
    """Serve ``app`` over HTTPS and ``metrics_app`` over HTTP until SIGTERM or SIGINT.

    Creates TLS material in ``settings.cert_dir`` when the directory holds none. The callbacks
    are described on :class:`WebhookServer`.
    """
    server = WebhookServer(
        settings, app=app, metrics_app=metrics_app, on_certificate=on_certificate
    )
    await server.serve(on_started=on_started, on_shutdown=on_shutdown)


def run(
    settings: Settings,
    *,
    app: ASGIApp,
    metrics_app: ASGIApp,
    on_started: StartedCallback | None = None,
    on_shutdown: ShutdownCallback | None = None,
    on_certificate: CertificateCallback | None = None,
) -> None:
    """:func:`serve` in a new event loop; returns after a graceful shutdown."""
    asyncio.run(
        serve(
            settings,
            app=app,
            metrics_app=metrics_app,
            on_started=on_started,
            on_shutdown=on_shutdown,
            on_certificate=on_certificate,
        )
    )


def _load_tls(settings: Settings) -> certs.ReloadingServerContext:
    directory = settings.cert_dir
    try:
        if certs.ensure(directory, service=settings.service, namespace=settings.namespace):
            logger.info("created TLS material", extra={"cert_dir": str(directory)})
        paths = certs.MaterialPaths(directory)
        return certs.ReloadingServerContext(paths.tls_cert, paths.tls_key)
    except certs.CertError as exc:
        raise ServeError(str(exc)) from None


def _listen(host: str, port: int) -> socket.socket:
    try:
        family, *_, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        # Built by hand rather than with socket.create_server(): asyncio turns Nagle's algorithm
        # off (TCP_NODELAY) only on sockets whose proto is IPPROTO_TCP, and create_server()
        # leaves it 0. With Nagle on, every small response waits ~40 ms for the client's ACK.
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            if os.name == "posix":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                # "::" also accepts IPv4, as "0.0.0.0" would on an IPv4-only host.
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind(address[:2])
            sock.listen(BACKLOG)
        except BaseException:
            sock.close()
            raise
        return sock
    except OSError as exc:
        # Some errors carry the address in strerror; the plain reason reads better.
        errno = exc.errno if not isinstance(exc, socket.gaierror) else None
        reason = os.strerror(errno) if errno else (exc.strerror or str(exc))
        raise ServeError(f"cannot listen on {_netloc(host, port)}: {reason}") from None


async def _started(tasks: dict[_UvicornServer, asyncio.Task[None]]) -> None:
    # uvicorn offers no startup event; its startup with ready sockets takes a few loop turns.
    while not all(server.started for server in tasks):
        for task in tasks.values():
            if task.done():
                task.result()  # re-raises what stopped it
                raise ServeError("a server stopped during startup")
        await asyncio.sleep(0.01)


async def _until_stopped(
    stop: asyncio.Event, tasks: dict[_UvicornServer, asyncio.Task[None]]
) -> None:
    stopping = asyncio.create_task(stop.wait())
    try:
        done, _ = await asyncio.wait(
            {stopping, *tasks.values()}, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        stopping.cancel()
    for task in tasks.values():
        if task in done:
            task.result()
            raise ServeError("a server stopped unexpectedly")


async def _call(callback: Callable[..., Awaitable[None] | None], *args: object) -> None:
    result = callback(*args)
    if inspect.isawaitable(result):
        await result


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
