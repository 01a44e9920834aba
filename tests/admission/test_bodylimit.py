"""Tests for admission.bodylimit, driven with raw ASGI messages."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.types import Message, Receive, Scope, Send

from admission.bodylimit import BodyLimitMiddleware


@dataclass
class Client:
    """Feeds the request body in chunks and records what the middleware pulled and sent."""

    chunks: Sequence[bytes]
    pulled: int = 0
    sent: list[Message] = field(default_factory=list)
    disconnect_after: int | None = None

    async def receive(self) -> Message:
        if self.disconnect_after is not None and self.pulled >= self.disconnect_after:
            return {"type": "http.disconnect"}
        if self.pulled >= len(self.chunks):
            return {"type": "http.disconnect"}
        chunk = self.chunks[self.pulled]
        self.pulled += 1
        return {"type": "http.request", "body": chunk, "more_body": self.pulled < len(self.chunks)}

    async def send(self, message: Message) -> None:
        self.sent.append(message)

    @property
    def status(self) -> int:
        status: int = self.sent[0]["status"]
        return status

    @property
    def headers(self) -> dict[bytes, bytes]:
        return dict(self.sent[0]["headers"])

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent[1:])


@dataclass
class EchoApp:
    """Reads the whole body like a handler would, answers 200 with it, and keeps the calls."""

    bodies: list[bytes] = field(default_factory=list)
    later_messages: list[Message] = field(default_factory=list)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            self.bodies.append(scope["type"].encode())
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        self.bodies.append(body)
        self.later_messages.append(await receive())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})


def http_scope(*headers: tuple[bytes, bytes], path: str = "/mutate") -> Scope:
    return {"type": "http", "method": "POST", "path": path, "headers": list(headers)}


def run(middleware: BodyLimitMiddleware, client: Client, scope: Scope | None = None) -> Client:
    asyncio.run(middleware(scope or http_scope(), client.receive, client.send))
    return client


def test_body_under_limit_reaches_the_app_whole() -> None:
    app = EchoApp()
    client = run(BodyLimitMiddleware(app, max_body_bytes=10), Client([b"abc", b"def", b""]))

    assert client.status == 200
    assert app.bodies == [b"abcdef"]
    assert client.body == b"abcdef"


def test_body_at_the_limit_is_accepted() -> None:
    app = EchoApp()
    client = run(BodyLimitMiddleware(app, max_body_bytes=6), Client([b"abc", b"def"]))

    assert client.status == 200
    assert app.bodies == [b"abcdef"]


def test_after_the_body_the_app_hears_the_server_again() -> None:
    # e.g. a disconnect: the replayed body must not hide it from the app.
    app = EchoApp()
    run(BodyLimitMiddleware(app, max_body_bytes=10), Client([b"abc"]))

    assert app.later_messages == [{"type": "http.disconnect"}]


def test_declared_length_over_limit_is_refused_unread() -> None:
    app = EchoApp()
    client = Client([b"x" * 11])
    run(
        BodyLimitMiddleware(app, max_body_bytes=10),
        client,
        http_scope((b"content-length", b"11")),
    )

    assert client.status == 413
    assert client.body == b"request body exceeds the limit of 10 bytes"
    assert client.pulled == 0
    assert app.bodies == []


def test_refusal_is_plain_text_and_keeps_the_connection() -> None:
    client = run(
        BodyLimitMiddleware(EchoApp(), max_body_bytes=10),
        Client([]),
        http_scope((b"Content-Length", b"4194305")),
    )

    assert b"connection" not in client.headers  # see the module docstring
    assert client.headers[b"content-type"] == b"text/plain; charset=utf-8"
    assert client.headers[b"content-length"] == str(len(client.body)).encode()


def test_streamed_body_over_limit_stops_being_read() -> None:
    app = EchoApp()
    client = Client([b"x" * 4] * 100)  # chunked: no Content-Length
    run(BodyLimitMiddleware(app, max_body_bytes=10), client)

    assert client.status == 413
    assert client.body == b"request body exceeds the limit of 10 bytes"
    assert client.pulled == 3  # 12 bytes read, 388 left on the wire
    assert app.bodies == []


def test_understated_length_is_still_counted() -> None:
    app = EchoApp()
    client = Client([b"x" * 8, b"x" * 8])
    run(
        BodyLimitMiddleware(app, max_body_bytes=10),
        client,
        http_scope((b"content-length", b"5")),
    )

    assert client.status == 413
    assert app.bodies == []


@pytest.mark.parametrize("value", [b"", b"ten", b"-1", b"1e3", b"\xb2"])
def test_unparseable_length_is_refused(value: bytes) -> None:
    app = EchoApp()
    client = run(
        BodyLimitMiddleware(app, max_body_bytes=10),
        Client([b"x"]),
        http_scope((b"content-length", value)),
    )

    assert client.status == 400
    assert client.body == b"invalid Content-Length header"
    assert app.bodies == []


def test_disconnect_while_reading_calls_nothing() -> None:
    app = EchoApp()
    client = Client([b"a", b"b", b"c"], disconnect_after=1)
    run(BodyLimitMiddleware(app, max_body_bytes=10), client)

    assert client.sent == []
    assert app.bodies == []


def test_non_http_scopes_pass_through() -> None:
    app = EchoApp()
    client = Client([])
    asyncio.run(
        BodyLimitMiddleware(app, max_body_bytes=1)(
            {"type": "lifespan"}, client.receive, client.send
        )
    )

    assert app.bodies == [b"lifespan"]


def test_reject_hook_hears_status_and_reason() -> None:
    heard: list[tuple[str, int, str]] = []

    def hook(scope: Scope, status: int, reason: str) -> None:
        heard.append((scope["path"], status, reason))

    middleware = BodyLimitMiddleware(EchoApp(), max_body_bytes=2, on_reject=hook)
    run(middleware, Client([b"abc"]), http_scope(path="/validate"))
    run(middleware, Client([]), http_scope((b"content-length", b"x")))

    assert heard == [("/validate", 413, "body_too_large"), ("/mutate", 400, "bad_length")]


@pytest.mark.parametrize("limit", [0, -1])
def test_limit_must_be_positive(limit: int) -> None:
    with pytest.raises(ValueError, match="max_body_bytes must be positive"):
        BodyLimitMiddleware(EchoApp(), max_body_bytes=limit)


def test_refusal_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("WARNING", logger="admission.bodylimit")
    run(BodyLimitMiddleware(EchoApp(), max_body_bytes=1), Client([b"abc"]))

    messages: list[Any] = [r.getMessage() for r in caplog.records]
    assert messages == ["refused POST /mutate: request body exceeds the limit of 1 bytes"]


def test_over_a_real_connection_a_client_still_sending_gets_the_413() -> None:
    # Through uvicorn: the refusal must reach a client that writes its whole body before reading
    # (httpx does), and the connection must stay usable afterwards.
    async def echo(scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": message["body"]})

    async def scenario() -> list[tuple[int, bytes]]:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen()  # connections wait in the backlog until uvicorn accepts them
        port = sock.getsockname()[1]
        app = BodyLimitMiddleware(echo, max_body_bytes=1024)
        server = uvicorn.Server(uvicorn.Config(app, log_level="error", lifespan="off"))
        serving = asyncio.create_task(server.serve(sockets=[sock]))

        async def chunked() -> AsyncIterator[bytes]:
            for _ in range(4096):
                yield b"x" * 1024

        answers = []
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
                for content in (b"x" * (8 * 1024 * 1024), chunked(), b"small"):
                    response = await client.post("/mutate", content=content)
                    answers.append((response.status_code, response.content))
        finally:
            server.should_exit = True
            await serving
        return answers

    assert asyncio.run(scenario()) == [
        (413, b"request body exceeds the limit of 1024 bytes"),
        (413, b"request body exceeds the limit of 1024 bytes"),
        (200, b"small"),
    ]
