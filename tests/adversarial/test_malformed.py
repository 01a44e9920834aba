"""Hostile bodies against a real server over TLS: each one is a counted 400 on a connection that
stays open, and the server's memory stays flat over thousands of them."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from tests.adversarial.support import (
    REVIEW_FIXTURES,
    Server,
    fixture_body,
    running_server,
)

CREATE = fixture_body()
# Before the fix each of these answered 500, closed the connection and kept ~110 KiB.
INVALID_UTF8 = CREATE.replace(b'"app": "', b'"app": "\xff\xfe', 1)
DEEP = CREATE.replace(b'"status": {}', b'"status": ' + b'{"a":' * 1_100 + b"1" + b"}" * 1_100, 1)
WARM_UP = 300
STREAM = 3_000
# A leak of 110 KiB a request is 320 MiB over the stream; allocator noise is a few MiB.
RSS_GROWTH_LIMIT_KIB = 48 * 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running_server(tmp_path_factory.mktemp("certs")) as running:
        yield running


def test_the_hostile_bodies_are_really_hostile() -> None:
    assert INVALID_UTF8 != CREATE
    assert DEEP != CREATE


def send_hostile(server: Server, count: int) -> set[int]:
    statuses: set[int] = set()
    with server.connection() as connection:
        for index in range(count):
            path = "/mutate" if index % 2 else "/validate"
            body = INVALID_UTF8 if index % 3 else DEEP
            status, payload, headers = connection.post(path, body)
            statuses.add(status)
            assert b"\n" not in payload
            assert headers.get("connection") != "close"
        assert connection.connects == 1  # one keep-alive connection throughout
    return statuses


def test_hostile_bodies_are_counted_400s_and_memory_stays_flat(server: Server) -> None:
    before = server.metric("tenantgate_http_errors_total", endpoint="mutate", code="400")
    assert send_hostile(server, WARM_UP) == {400}
    settled = server.rss_kib()

    assert send_hostile(server, STREAM) == {400}

    grown = server.rss_kib() - settled
    assert grown < RSS_GROWTH_LIMIT_KIB, f"RSS grew {grown} KiB over {STREAM} hostile requests"
    counted = server.metric("tenantgate_http_errors_total", endpoint="mutate", code="400")
    assert counted - before == (WARM_UP + STREAM) // 2
    assert server.errors() == []


def mutated(raw: bytes, rng: random.Random) -> bytes:
    """``raw`` with a few bytes changed, cut, or with a hostile value spliced in."""
    choice = rng.randrange(4)
    if choice == 0:
        position = rng.randrange(len(raw))
        return raw[:position] + bytes([rng.randrange(256)]) + raw[position + 1 :]
    if choice == 1:
        return raw[: rng.randrange(len(raw))]
    hostile = rng.choice(
        [b'"\xff"', b"1" * 5000, b"1e999", b"[" * 1_100, b'{"a":' * 1_100, b"NaN", b"\x00", b"{}"]
    )
    spots = [i for i, byte in enumerate(raw) if byte == ord(":")]
    spot = rng.choice(spots) + 1
    if choice == 2:
        return raw[:spot] + hostile + raw[spot:]
    end = raw.find(b",", spot)
    return raw[:spot] + hostile + (raw[end:] if end > 0 else b"")


def test_thousands_of_mutated_real_reviews_never_get_a_5xx(server: Server) -> None:
    rng = random.Random(11)
    bodies = [path.read_bytes() for path in REVIEW_FIXTURES]
    statuses: dict[int, int] = {}
    settled = 0
    with server.connection() as connection:
        for index in range(2_500):
            if index == 500:
                settled = server.rss_kib()
            body = mutated(rng.choice(bodies), rng)
            path = "/mutate" if index % 2 else "/validate"
            status, payload, _ = connection.post(path, body)
            statuses[status] = statuses.get(status, 0) + 1
            assert status < 500, f"{path} answered {status} to {body[:300]!r}: {payload!r}"
    assert statuses.get(400, 0) > 0  # the mutations do break bodies
    grown = server.rss_kib() - settled
    assert grown < RSS_GROWTH_LIMIT_KIB, f"RSS grew {grown} KiB over 2,000 mutated reviews"
    assert server.errors() == []
