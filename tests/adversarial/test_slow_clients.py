"""Slow, stalled and silent clients against a real server over TLS (raw sockets), while a
normal client's reviews keep being answered correctly.

The server runs with short read deadlines so that each attack ends quickly; what is checked is
who closed what and what was answered, never how fast.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.adversarial.support import (
    LOCALHOST,
    Server,
    closed_by_peer,
    request_head,
    running_server,
    tls_socket,
    wait_for,
)

# Short, so that each attack ends quickly; long enough that a normal client on a loaded
# machine never meets one between two of its requests.
HEADER_TIMEOUT = 2.0
BODY_TIMEOUT = 2.0
KEEP_ALIVE = 5.0
MAX_CONNECTIONS = 40
FLAGS = (
    "--header-timeout-seconds",
    str(HEADER_TIMEOUT),
    "--body-timeout-seconds",
    str(BODY_TIMEOUT),
    "--keep-alive-seconds",
    str(KEEP_ALIVE),
    "--max-connections",
    str(MAX_CONNECTIONS),
)
# Bounds a hang only: every deadline above is a few seconds.
PATIENCE = 30.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(tmp_path_factory.mktemp("certs"), *FLAGS) as running:
        yield running


@dataclass
class NormalTraffic:
    """A client posting reviews back to back, as the API server would, on its own thread."""

    server: Server
    answered: int = 0
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        index = 0
        while not self._stop.is_set():
            with self.server.connection() as connection:
                # Fewer requests than the idle timeout would allow between them: one connection.
                for _ in range(50):
                    if self._stop.is_set():
                        break
                    index += 1
                    path = "/mutate" if index % 2 else "/validate"
                    try:
                        connection.review(path, uid=f"normal-{index}")
                    except Exception as exc:
                        self.failures.append(f"{path} #{index}: {exc!r}")
                        break
                    self.answered += 1


@contextmanager
def normal_traffic(server: Server) -> Iterator[NormalTraffic]:
    traffic = NormalTraffic(server)
    thread = threading.Thread(target=traffic.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: traffic.answered > 0 or bool(traffic.failures), what="a first review")
        yield traffic
    finally:
        traffic._stop.set()
        thread.join(PATIENCE)
    assert traffic.failures == []


def test_slowloris_headers_are_closed_while_reviews_are_answered(server: Server) -> None:
    head = request_head("/validate", length=10, extra=[f"X-Pad-{i}: {'a' * 20}" for i in range(8)])
    before = server.metric("tenantgate_connections_closed_total", reason="header_timeout")
    with normal_traffic(server) as traffic:
        sockets = [tls_socket(server) for _ in range(10)]
        sent = [0] * len(sockets)
        closed = [False] * len(sockets)
        deadline = time.monotonic() + PATIENCE
        # One byte a socket every 0.1 s: the head would take ~35 s to send.
        while not all(closed) and time.monotonic() < deadline:
            for index, sock in enumerate(sockets):
                if closed[index]:
                    continue
                try:
                    sock.sendall(head[sent[index] : sent[index] + 1])
                    sent[index] += 1
                except OSError:
                    closed[index] = True
            time.sleep(0.1)
        for sock in sockets:
            sock.close()
        answered_during_attack = traffic.answered
    assert all(closed)
    assert max(sent) < len(head)  # cut off before the head was complete
    assert answered_during_attack > 0
    after = server.metric("tenantgate_connections_closed_total", reason="header_timeout")
    assert after - before >= len(sockets)


def test_a_stalled_body_gets_a_408_and_its_connection_closed(server: Server) -> None:
    before = server.metric("tenantgate_http_errors_total", code="408", reason="body_timeout")
    with normal_traffic(server):
        sockets = [tls_socket(server) for _ in range(5)]
        for sock in sockets:
            sock.sendall(request_head("/mutate", length=10_000) + b'{"apiVersion": ')
        answers = []
        for sock in sockets:
            sock.settimeout(PATIENCE)
            answer = b""
            while True:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                answer += chunk
            answers.append(answer)
            sock.close()
    for answer in answers:
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408 ")
        assert b"connection: close" in head.lower()
        assert body == f"request body not received within {BODY_TIMEOUT:g}s".encode()
    after = server.metric("tenantgate_http_errors_total", code="408", reason="body_timeout")
    assert after - before == len(answers)


def test_idle_connections_are_closed(server: Server) -> None:
    with normal_traffic(server):
        fresh = [tls_socket(server) for _ in range(10)]
        used = []
        for _ in range(5):
            connection = server.connection()
            connection.review("/validate", uid="before-idling")
            used.append(connection)
        assert all(closed_by_peer(sock, timeout=PATIENCE) for sock in fresh)
        assert all(closed_by_peer(c.connection.sock, timeout=PATIENCE) for c in used)
    for sock in fresh:
        sock.close()
    for connection in used:
        connection.close()


def test_past_the_cap_the_longest_idle_connection_makes_room(server: Server) -> None:
    before = server.metric("tenantgate_connections_closed_total", reason="evicted")
    idle = [tls_socket(server) for _ in range(MAX_CONNECTIONS)]
    try:
        # The cap is reached by idle connections: a client still gets in and is answered.
        with server.connection() as connection:
            connection.review("/mutate", uid="past-the-cap")
        assert closed_by_peer(idle[0], timeout=PATIENCE)
    finally:
        for sock in idle:
            sock.close()
    assert server.metric("tenantgate_connections_closed_total", reason="evicted") > before


def test_memory_held_by_many_idle_connections_is_returned(tmp_path: Path) -> None:
    """Each TLS connection holds a 256 KiB read buffer: 300 of them are ~75 MiB, which must go
    back to the OS once they are closed (here by the idle timeout), not stay mapped."""
    flags = ("--keep-alive-seconds", "1", "--max-connections", "1000")
    with running_server(tmp_path / "certs", *flags) as server:
        with server.connection() as connection:
            connection.review("/validate", uid="warm-up")
        wait_for(lambda: server.metric("tenantgate_connections_open") == 0, what="no connection")
        baseline = server.rss_kib()
        idle = [tls_socket(server) for _ in range(300)]
        peak = server.rss_kib()
        assert all(closed_by_peer(sock, timeout=PATIENCE) for sock in idle)
        for sock in idle:
            sock.close()
        grown = peak - baseline
        assert grown > 30 * 1024  # the connections did cost memory
        wait_for(
            lambda: server.rss_kib() - baseline < grown // 3,
            what=f"RSS back near {baseline} KiB (peak {peak} KiB)",
        )


def test_a_client_that_never_starts_tls_is_closed(server: Server) -> None:
    """asyncio would wait 60 s for a ClientHello; the header deadline bounds the handshake."""
    with normal_traffic(server):
        silent = [socket.create_connection((LOCALHOST, server.port)) for _ in range(10)]
        assert all(closed_by_peer(sock, timeout=PATIENCE) for sock in silent)
    for sock in silent:
        sock.close()
    assert server.errors() == []
