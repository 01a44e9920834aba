"""Pure ASGI middleware that reads a request body whole, within a size limit and a deadline,
before the app runs.

A declared ``Content-Length`` over the limit is refused without reading a byte; a chunked body is
read only until it crosses the limit. The accepted body is buffered once and replayed to the app,
so an app that swallows exceptions cannot defeat the limit.

The refusal deliberately does not say ``Connection: close``: closing a socket with unread data
makes the kernel reset it, and a client still sending its body then loses the 413. The server
(uvicorn) instead discards the rest of the body as it arrives, without buffering it, and the
connection stays usable.

A body that does not arrive whole within ``body_timeout`` seconds of the request head (a client
that stalls after a few bytes) gets a 408 that closes the connection: nothing more is coming
on it to be discarded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger(__name__)

RejectHook = Callable[[Scope, int, str], None]
"""Called with the scope, the HTTP status sent (400 or 413) and the metrics reason label."""


class BodyLimitMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int,
        body_timeout: float | None = None,
        on_reject: RejectHook | None = None,
    ) -> None:
        if max_body_bytes <= 0:
            raise ValueError(f"max_body_bytes must be positive, got {max_body_bytes}")
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout = body_timeout
        self.on_reject = on_reject

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        declared = _content_length(scope)
        if declared == -1:
            await self._reject(scope, send, 400, "invalid Content-Length header", "bad_length")
            return
        if declared is not None and declared > self.max_body_bytes:
            await self._reject_too_large(scope, send)
            return

        chunks: list[bytes] = []
        try:
            async with asyncio.timeout(self.body_timeout):
                complete = await self._read(scope, receive, send, chunks)
        except TimeoutError:
            await self._reject(
                scope,
                send,
                408,
                f"request body not received within {self.body_timeout:g}s",
                "body_timeout",
                close=True,
            )
            return
        if complete:
            await self.app(scope, _replay(b"".join(chunks), receive), send)

    async def _read(self, scope: Scope, receive: Receive, send: Send, chunks: list[bytes]) -> bool:
        """Read the body into ``chunks``; False when it was refused or the client left."""
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return False  # nobody is left to answer
            chunk: bytes = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await self._reject_too_large(scope, send)
                return False
            if chunk:
                chunks.append(chunk)
            if not message.get("more_body", False):
                return True

    async def _reject_too_large(self, scope: Scope, send: Send) -> None:
        await self._reject(
            scope,
            send,
            413,
            f"request body exceeds the limit of {self.max_body_bytes} bytes",
            "body_too_large",
        )

    async def _reject(
        self,
        scope: Scope,
        send: Send,
        status: int,
        reason: str,
        label: str,
        *,
        close: bool = False,
    ) -> None:
        logger.warning("refused %s %s: %s", scope.get("method", ""), scope.get("path", ""), reason)
        if self.on_reject is not None:
            self.on_reject(scope, status, label)
        body = reason.encode()
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(body)).encode()),
        ]
        if close:
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    """The declared body size, ``None`` when absent, ``-1`` when unparseable."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() and text.isascii() else -1
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that yields ``body`` once, then defers to the server (for disconnects)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
