"""A TCP balancer: one stable address for the API server's webhook calls, in front of the
tenantgate replicas a test runs (TLS passes through, so the API server checks tenantgate's own
certificate).

Like kube-proxy in front of a Service: each new connection goes to the next backend that
accepts it, and sticks to it; connections to a killed backend break; with no backend the
connection is refused, as with a Service without endpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter

WAIT = 60.0


class Balancer:
    """Round robin over ``backends`` (ports on 127.0.0.1), changeable while it runs."""

    def __init__(self, backends: list[int] | None = None) -> None:
        self._backends = list(backends or [])
        self.port = 0
        self.connections: Counter[int] = Counter()
        self._next = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None
        self._open: dict[asyncio.StreamWriter, int] = {}  # both ends of a connection -> port

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def backends(self) -> list[int]:
        with self._lock:
            return list(self._backends)

    def set_backends(self, ports: list[int]) -> None:
        """Route new connections to ``ports``; open connections to dropped ones are cut."""
        with self._lock:
            dropped = set(self._backends) - set(ports)
            self._backends = list(ports)
            self.connections.clear()
        if dropped and self._loop is not None:
            self._loop.call_soon_threadsafe(self._cut, dropped)

    def _cut(self, ports: set[int] | None = None) -> None:
        """Close the connections to ``ports`` (every one when None)."""
        for writer, port in list(self._open.items()):
            if ports is None or port in ports:
                writer.close()

    def start(self) -> Balancer:
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._main()), name="balancer", daemon=True
        )
        self._thread.start()
        if not self._started.wait(WAIT):
            raise RuntimeError("the balancer did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(WAIT)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0, backlog=512)
        self.port = server.sockets[0].getsockname()[1]
        self._started.set()
        async with server:
            await self._stop.wait()
            self._cut()

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, int] | None:
        backends = self.backends
        for _ in range(len(backends)):
            with self._lock:
                port = backends[self._next % len(backends)]
                self._next += 1
            try:
                streams = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                continue
            with self._lock:
                self.connections[port] += 1
            return (*streams, port)
        return None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = await self._connect()
        if upstream is None:
            writer.close()
            return
        up_reader, up_writer, port = upstream
        self._open[writer] = port
        self._open[up_writer] = port

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    sink.close()

        # The balancer stopping with this connection open cancels this task, the top of its
        # stack: ending it quietly keeps asyncio from logging the cancellation as an error.
        try:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        finally:
            self._open.pop(writer, None)
            self._open.pop(up_writer, None)
