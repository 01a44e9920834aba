"""Serving: the HTTPS webhook app and the plain-HTTP metrics app, in one process and one loop.

uvicorn is driven from code. tenantgate binds the sockets itself (so port 0 is resolved before
anything is announced), owns the signal handling for both servers, and hands uvicorn a TLS
context whose certificate follows the files in ``cert_dir`` (see :mod:`certs.tlscontext`).

Connections are guarded (:mod:`admission.connections`): a TLS handshake and a request head
must arrive within ``header_timeout_seconds``, an idle connection is closed after
``keep_alive_seconds``, and at most ``max_connections`` are open.

Shutdown. On SIGTERM ``on_shutdown`` runs at once (readiness goes false) and the webhook keeps
serving for ``shutdown_delay_seconds``, while the Service stops sending it new connections;
every response from then on says ``Connection: close``, so clients move their next request to
another replica. Then it stops accepting, closes its idle connections, answers every request
already under way (a request still arriving has its read deadline), and exits when the last
connection is closed or after ``shutdown_grace_seconds``; the metrics server stops last, so
liveness probes keep answering while the webhook drains. SIGINT (Ctrl-C) skips the delay; a
second signal stops without waiting.
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
from datetime import UTC, datetime, timedelta

import uvicorn
from prometheus_client import CollectorRegistry
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import certs
from admission.connections import ConnectionGuard, ConnectionLimits
from admission.health import Check, Readiness
from admission.metrics import CertificateCollector, ConnectionCollector
from admission.settings import Settings
from tenants.kube.informer import release_free_memory

logger = logging.getLogger(__name__)

CERT_POLL_SECONDS = 1.0
BACKLOG = 2048
_DRAIN_POLL_SECONDS = 0.05
SHUTDOWN_CHECK = "shutdown"
CERTIFICATE_CHECK = "certs"
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
    """A uvicorn server that leaves signals to :class:`WebhookServer`, which stops both, bounds
    TLS handshakes, and drains its connections through their :class:`ConnectionGuard`."""

    def __init__(
        self,
        config: uvicorn.Config,
        *,
        guard: ConnectionGuard,
        handshake_timeout: float,
        grace_seconds: float,
    ) -> None:
        super().__init__(config)
        self.guard = guard
        self._handshake_timeout = handshake_timeout
        self._grace_seconds = grace_seconds

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        # uvicorn's own startup, for ready sockets, plus the TLS deadlines it cannot set: the
        # handshake (asyncio's default is 60 s, during which a silent client holds a 256 KiB
        # TLS buffer) and the closing handshake.
        config = self.config
        loop = asyncio.get_running_loop()

        def create_protocol(_loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Protocol:
            protocol: asyncio.Protocol = config.http_protocol_class(  # type: ignore[call-arg]
                config=config,
                server_state=self.server_state,
                app_state=self.lifespan.state,
                _loop=_loop,
            )
            return protocol

        self.servers = []
        for sock in sockets or []:
            self.servers.append(
                await loop.create_server(
                    create_protocol,
                    sock=sock,
                    ssl=config.ssl,
                    backlog=config.backlog,
                    ssl_handshake_timeout=self._handshake_timeout if config.ssl else None,
                    # asyncio waits 30 s for the client's close_notify, which an idle client
                    # never sends: the connection, and shutdown, would wait that long.
                    ssl_shutdown_timeout=self._handshake_timeout if config.ssl else None,
                )
            )
        self.started = True

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        self.guard.drain()
        state = self.server_state
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._grace_seconds
        while (state.connections or state.tasks) and not self.force_exit:
            if loop.time() >= deadline:
                logger.warning(
                    "shutdown grace of %gs exceeded: closing %d connection(s), %d request(s) "
                    "unanswered",
                    self._grace_seconds,
                    len(state.connections),
                    len(state.tasks),
                )
                break
            await asyncio.sleep(_DRAIN_POLL_SECONDS)
        for task in list(state.tasks):
            task.cancel()
        for connection in list(state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.abort()
        if state.tasks:
            await asyncio.wait(set(state.tasks), timeout=1.0)


class WebhookServer:
    """The two servers of one ``tenantgate serve`` process.

    ``serve()`` runs until a signal (when on the main thread) or :meth:`request_stop`.
    ``on_certificate`` is called in the event loop with the certificate served at start and
    after each reload. With ``readiness``, the server keeps its ``certs`` check (the certificate
    it serves) and turns it unready at once when asked to stop; with ``registry``, it exposes
    its connection and certificate metrics there.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        app: ASGIApp,
        metrics_app: ASGIApp,
        on_certificate: CertificateCallback | None = None,
        cert_poll_seconds: float = CERT_POLL_SECONDS,
        registry: CollectorRegistry | None = None,
        readiness: Readiness | None = None,
    ) -> None:
        self._settings = settings
        self._readiness = readiness
        if registry is not None:
            registry.register(ConnectionCollector(lambda: self.connections))
            registry.register(CertificateCollector(lambda: self._tls))
        self._app = app
        self._metrics_app = metrics_app
        self._on_certificate = on_certificate
        self._cert_poll_seconds = cert_poll_seconds
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stop_requested = False
        self._delay_stop = False
        self._servers: list[_UvicornServer] = []
        self._tls: certs.ReloadingServerContext | None = None
        self.endpoints: Endpoints | None = None

    @property
    def certificate(self) -> certs.CertificateInfo | None:
        """The certificate new connections get, once serving."""
        return self._tls.certificate if self._tls is not None else None

    def request_stop(self, *, delay: bool = False) -> None:
        """Begin a graceful shutdown; safe from any thread, before or during ``serve()``.

        ``delay``: keep serving for ``shutdown_delay_seconds`` first (as on SIGTERM).
        """
        self._delay_stop = self._delay_stop or delay
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
        if self._readiness is not None:
            self._readiness.add_probe(CERTIFICATE_CHECK, self.certificate_check)
        webhook_socket = _listen(settings.host, settings.port)
        try:
            metrics_socket = _listen(settings.metrics_host, settings.metrics_port)
        except BaseException:
            webhook_socket.close()
            raise
        webhook_guard = self._guard()
        webhook = self._server(
            _DrainingApp(self._app, webhook_guard), guard=webhook_guard, tls=self._tls
        )
        metrics = self._server(self._metrics_app, guard=self._guard(), tls=None)
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
            if self._readiness is not None:
                self._readiness.mark_failed(SHUTDOWN_CHECK, "shutting down")
            if on_shutdown is not None:
                await _call(on_shutdown)
            await self._pre_stop(webhook_guard, tasks)
            logger.info("shutting down: closing idle connections, answering requests under way")
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

    def certificate_check(self) -> Check:
        """Readiness of the certificate served (not of the files): ok while it is valid and
        not about to expire; files that were refused are a detail, not a reason to be unready
        (every replica would leave the Service at once)."""
        tls = self._tls
        if tls is None:
            return Check(ok=False, detail="no certificate served yet")
        served = tls.certificate
        now = datetime.now(UTC)
        name = f"serving certificate {served.serial_hex}"
        if now < served.not_before:
            return Check(ok=False, detail=f"{name} is not valid before {served.not_before}")
        if now >= served.not_after:
            return Check(ok=False, detail=f"{name} expired at {served.not_after}")
        margin = timedelta(seconds=self._settings.certificate_expiry_margin_seconds)
        if served.not_after - now < margin:
            return Check(ok=False, detail=f"{name} expires at {served.not_after}: renew it")
        detail = f"{name} valid until {served.not_after}"
        if tls.problem is not None:
            detail += f"; degraded: new files refused, {tls.problem}"
        return Check(ok=True, detail=detail)

    @property
    def connections(self) -> ConnectionGuard | None:
        """The webhook's connections, once serving."""
        return self._servers[0].guard if self._servers else None

    def _guard(self) -> ConnectionGuard:
        settings = self._settings
        limits = ConnectionLimits(
            header_timeout=settings.header_timeout_seconds,
            idle_timeout=settings.keep_alive_seconds,
            max_connections=settings.max_connections,
        )
        return ConnectionGuard(limits, on_idle_drop=_release_memory_soon)

    def _server(
        self, app: ASGIApp, *, guard: ConnectionGuard, tls: certs.ReloadingServerContext | None
    ) -> _UvicornServer:
        settings = self._settings
        config = uvicorn.Config(
            app,
            http=guard.protocol(),
            lifespan="off",  # the runtime starts and stops explicitly, around serve()
            log_config=None,  # admission.logs configures logging for the whole process
            access_log=settings.log_level == "debug",
            proxy_headers=False,
            server_header=False,
            backlog=BACKLOG,
            # The guard's idle deadline replaces uvicorn's (which only follows a response).
            timeout_keep_alive=math.ceil(settings.keep_alive_seconds),
        )
        config.load()
        # Set after load(): uvicorn would otherwise build its own context from file names.
        config.ssl = tls.context if tls is not None else None
        return _UvicornServer(
            config,
            guard=guard,
            handshake_timeout=settings.header_timeout_seconds,
            grace_seconds=settings.shutdown_grace_seconds,
        )

    async def _pre_stop(
        self, guard: ConnectionGuard, tasks: dict[_UvicornServer, asyncio.Task[None]]
    ) -> None:
        """After SIGTERM: keep serving, unready, each response closing its connection."""
        delay = self._settings.shutdown_delay_seconds if self._delay_stop else 0.0
        guard.draining = True
        if delay <= 0:
            return
        logger.info("shutting down: not ready; serving %gs more before closing connections", delay)
        self._stop = stop = asyncio.Event()  # a second signal ends the delay
        waiting = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({waiting, *tasks.values()}, timeout=delay)
        finally:
            waiting.cancel()

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
        if self._stop_requested:
            # A second signal: stop waiting for in-flight requests.
            logger.warning("%s received again: exiting without waiting", sig.name)
            for server in self._servers:
                server.force_exit = True
            if self._stop is not None:
                self._stop.set()
            return
        logger.info("%s received", sig.name)
        # Only an orchestrator's SIGTERM waits for the Service to stop sending requests.
        self.request_stop(delay=sig == signal.SIGTERM)


async def serve(
    settings: Settings,
    *,
    app: ASGIApp,
    metrics_app: ASGIApp,
    on_started: StartedCallback | None = None,
    on_shutdown: ShutdownCallback | None = None,
    on_certificate: CertificateCallback | None = None,
    registry: CollectorRegistry | None = None,
    readiness: Readiness | None = None,
) -> None:
    """Serve ``app`` over HTTPS and ``metrics_app`` over HTTP until SIGTERM or SIGINT.

    Creates TLS material in ``settings.cert_dir`` when the directory holds none. The callbacks
    and the rest are described on :class:`WebhookServer`.
    """
    server = WebhookServer(
        settings,
        app=app,
        metrics_app=metrics_app,
        on_certificate=on_certificate,
        registry=registry,
        readiness=readiness,
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


class _DrainingApp:
    """Adds ``Connection: close`` to every response once the server is draining."""

    def __init__(self, app: ASGIApp, guard: ConnectionGuard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def closing(message: Message) -> None:
            if message["type"] == "http.response.start" and self.guard.draining:
                headers = [(k, v) for k, v in message.get("headers", ()) if k != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive, closing)


def _release_memory_soon() -> None:
    # Freed TLS buffers (256 KiB a connection) stay mapped in glibc's arenas until trimmed.
    asyncio.get_running_loop().call_later(1.0, _release_memory_in_thread)


def _release_memory_in_thread() -> None:
    # Not worth an error when the loop is shutting down its executor: the process is ending.
    with contextlib.suppress(RuntimeError):
        asyncio.get_running_loop().run_in_executor(None, release_free_memory)


def _load_tls(settings: Settings) -> certs.ReloadingServerContext:
    directory = settings.cert_dir
    try:
        if certs.ensure(directory, service=settings.service, namespace=settings.namespace):
            logger.info("created TLS material", extra={"cert_dir": str(directory)})
        paths = certs.MaterialPaths(directory)
        return certs.ReloadingServerContext(
            paths.tls_cert,
            paths.tls_key,
            ca_file=paths.ca_cert,
            names=settings.certificate_names,
        )
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
