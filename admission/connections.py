"""The webhook's HTTP/1.1 connections: read deadlines, idle timeout, a cap, and a graceful close.

uvicorn's h11 protocol closes a connection only when it stays idle after a response: a client
that connects and sends headers one byte a second, or connects and never sends, is held
forever. :class:`GuardedProtocol` adds, per connection:

* a header deadline: once the first byte of a request arrives, its head must be complete
  within ``header_timeout`` (a slowloris client is closed however it trickles);
* an idle timeout: a connection with no request under way (fresh, or after a response) is
  closed after ``idle_timeout``;
* a cap: past ``max_connections`` open connections, the one idle longest is closed to make
  room, and when none is idle the newcomer is closed;
* a graceful drain (:meth:`ConnectionGuard.drain`): idle connections are closed, a request
  under way is answered and its connection closed after it, a fresh connection has
  ``header_timeout`` to send its request.

The body deadline lives in :mod:`admission.bodylimit`, where the body is read; the TLS handshake
is bounded by the server (``ssl_handshake_timeout``). Everything here runs on the event loop.

It extends uvicorn's ``H11Protocol`` through the members its own keep-alive handling uses
(``conn``, ``cycle``, ``on_response_complete``, ``handle_events``), as of uvicorn 0.54;
``tests/adversarial/test_slow_clients.py`` fails if an upgrade changes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

import h11
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

logger = logging.getLogger(__name__)

CLOSE_REASONS: Final = ("header_timeout", "idle_timeout", "evicted", "over_capacity", "drained")


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """How long a connection may take, and how many may be open (from the settings)."""

    header_timeout: float
    idle_timeout: float
    max_connections: int


@dataclass
class ConnectionGuard:
    """The open connections of one server, and what has been closed for which reason."""

    limits: ConnectionLimits
    on_idle_drop: Callable[[], None] = lambda: None
    """Called when many connections have closed since the peak (to give memory back)."""
    closed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CLOSE_REASONS, 0))
    draining: bool = False
    _open: dict[GuardedProtocol, None] = field(default_factory=dict)
    _peak: int = 0

    @property
    def open_connections(self) -> int:
        return len(self._open)

    def protocol(self) -> type[GuardedProtocol]:
        """The protocol class to give uvicorn (``Config(http=...)``), bound to this guard."""
        bound: type[GuardedProtocol] = type("BoundProtocol", (GuardedProtocol,), {"guard": self})
        return bound

    def drain(self) -> None:
        """Begin a graceful close of every connection (see the module docstring)."""
        self.draining = True
        for connection in list(self._open):
            connection.drain()

    def count_close(self, reason: str) -> None:
        self.closed[reason] = self.closed.get(reason, 0) + 1

    def _admit(self, connection: GuardedProtocol) -> bool:
        """Whether ``connection`` may stay open; makes room by closing the longest idle one."""
        if len(self._open) >= self.limits.max_connections:
            idle = [c for c in self._open if c.idle_since is not None]
            if not idle:
                self.count_close("over_capacity")
                logger.warning(
                    "refused a connection: %d connections open, none idle (max_connections)",
                    len(self._open),
                )
                return False
            oldest = min(idle, key=lambda c: c.idle_since or 0.0)
            oldest.close("evicted")
        self._open[connection] = None
        self._peak = max(self._peak, len(self._open))
        return True

    def _forget(self, connection: GuardedProtocol) -> None:
        if self._open.pop(connection, 0) is None and len(self._open) <= self._peak // 2:
            if self._peak >= _RELEASE_AFTER_PEAK:
                self.on_idle_drop()
            self._peak = len(self._open)


# Below this many connections at the peak there is too little to give back to bother.
_RELEASE_AFTER_PEAK: Final = 64


class GuardedProtocol(H11Protocol):
    """uvicorn's h11 protocol with the deadlines, the cap and the drain of a
    :class:`ConnectionGuard` (see the module docstring)."""

    guard: ClassVar[ConnectionGuard]  # set by ConnectionGuard.protocol()

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._guard = self.guard
        self._deadline: asyncio.TimerHandle | None = None
        self._deadline_reason = ""
        self.idle_since: float | None = None
        self._admitted = False

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if not self._guard._admit(self):
            self.connections.discard(self)
            transport.abort()
            return
        self._admitted = True
        if self._guard.draining:
            self._arm("header_timeout", self._guard.limits.header_timeout)
            self.idle_since = self.loop.time()
        else:
            self._became_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._admitted:
            self._admitted = False
            self._guard._forget(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # uvicorn armed its keep-alive timer: the idle deadline here replaces it.
        self._unset_keepalive_if_required()
        self._follow()

    def handle_events(self) -> None:
        super().handle_events()
        if self._guard.draining and self.cycle is not None and not self.cycle.response_complete:
            self.cycle.keep_alive = False

    # -- the guard -----------------------------------------------------------------------

    def drain(self) -> None:
        """Close now if idle after a response; otherwise once the request under way is done."""
        if self.transport is None or self.transport.is_closing():
            return
        if self._busy():
            if self.cycle is not None:
                self.cycle.keep_alive = False
            return
        if self.idle_since is not None and self._served() and not self._buffered():
            self.close("drained")
            return
        # A fresh connection, or a request head still arriving: it has the header timeout.
        limit = self._guard.limits.header_timeout
        if self._deadline_reason != "header_timeout":
            self._arm("header_timeout", limit)

    def close(self, reason: str) -> None:
        """Close the connection (nothing is under way on it, or it ran out of time)."""
        if self.transport is None or self.transport.is_closing():
            return
        self._guard.count_close(reason)
        logger.debug("closing connection from %s: %s", self.client, reason)
        if self.conn.our_state != h11.ERROR:
            # A response under way cannot be ended cleanly: closing is all that is left.
            with contextlib.suppress(h11.LocalProtocolError):
                self.conn.send(h11.ConnectionClosed())
        self.transport.close()

    def _follow(self) -> None:
        """Set the deadline that applies to what the connection is doing now."""
        if self.transport is None or self.transport.is_closing():
            return
        if self._busy():
            # The app is reading the body (its own deadline) or answering.
            self._disarm()
            self.idle_since = None
            return
        if self._buffered() or self.conn.their_state is not h11.IDLE:
            # Part of a request head has arrived (or the rest of a refused body): the header
            # deadline runs from its first byte and is not extended by later ones.
            self.idle_since = None
            if self._deadline_reason != "header_timeout":
                self._arm("header_timeout", self._guard.limits.header_timeout)
            return
        self._became_idle()

    def _became_idle(self) -> None:
        if self.idle_since is None or self._deadline_reason != "idle_timeout":
            self.idle_since = self.loop.time()
            self._arm("idle_timeout", self._guard.limits.idle_timeout)

    def _busy(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _served(self) -> bool:
        return self.cycle is not None

    def _buffered(self) -> bool:
        data, _closed = self.conn.trailing_data
        return bool(data)

    def _arm(self, reason: str, seconds: float) -> None:
        self._disarm()
        self._deadline_reason = reason
        self._deadline = self.loop.call_later(seconds, self.close, reason)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._deadline_reason = ""
