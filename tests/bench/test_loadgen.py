"""The fixed-rate load generator against a small local TLS server (no timing asserted)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

import certs
from bench import loadgen
from bench.workload import Template, Workload


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> certs.MaterialPaths:
    directory = tmp_path_factory.mktemp("certs")
    certs.init(directory, service="tenantgate", namespace="tenantgate-system")
    return certs.MaterialPaths(directory)


Answer = Callable[[bytes, bytes], tuple[int, bytes]]


async def serve(material: certs.MaterialPaths, answer: Answer) -> asyncio.Server:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(material.tls_cert, material.tls_key)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                path = head.split(b" ")[1]
                status, body = answer(path, await reader.readexactly(length))
                writer.write(
                    b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\n" % status
                    + b"content-length: %d\r\n\r\n" % len(body)
                    + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)


def run(material: certs.MaterialPaths, answer: Answer, workload: Workload) -> dict[str, object]:
    async def main() -> dict[str, object]:
        server = await serve(material, answer)
        port = server.sockets[0].getsockname()[1]
        try:
            return await loadgen.generate(
                host="127.0.0.1",
                port=port,
                context=loadgen.client_context(material.ca_cert),
                pairs=[(p.mutate, p.validate) for p in workload.pairs],
                rate=100,
                seconds=0.3,
                connections=2,
                run=1,
            )
        finally:
            server.close()
            await server.wait_closed()

    return asyncio.run(main())


def allow(path: bytes, body: bytes) -> tuple[int, bytes]:
    uid = orjson.loads(body)["request"]["uid"]
    return 200, orjson.dumps({"response": {"uid": uid, "allowed": True}})


def test_every_scheduled_pod_sends_its_two_reviews(
    material: certs.MaterialPaths, workload: Workload
) -> None:
    seen: list[tuple[bytes, str]] = []

    def record(path: bytes, body: bytes) -> tuple[int, bytes]:
        seen.append((path, orjson.loads(body)["request"]["uid"]))
        return allow(path, body)

    result = run(material, record, workload)

    assert result["errors"] == 0
    assert result["requests"] == result["scheduled_reviews"] == len(seen)
    assert result["target_rps"] == 100
    assert [path for path, _ in seen[:2]] in ([b"/mutate", b"/validate"], [b"/mutate", b"/mutate"])
    assert sorted(path for path, _ in seen).count(b"/mutate") == len(seen) // 2
    assert len({uid for _, uid in seen}) == len(seen)  # every request is a new one
    for key in ("p50_ms", "p99_ms", "generator_cpu_share", "schedule_lag_p99_ms"):
        assert isinstance(result[key], float)


def test_denials_and_http_errors_are_counted(
    material: certs.MaterialPaths, workload: Workload
) -> None:
    def deny_validate(path: bytes, body: bytes) -> tuple[int, bytes]:
        if path == b"/validate":
            return 200, b'{"response": {"allowed": false}}'
        return allow(path, body)

    def fail(path: bytes, body: bytes) -> tuple[int, bytes]:
        return 500, b"boom"

    denied = run(material, deny_validate, workload)
    failed = run(material, fail, workload)

    pods = int(str(denied["scheduled_reviews"])) // 2
    assert denied["not_allowed"] == denied["errors"] == pods
    assert denied["requests"] == pods  # the mutate half of each pod
    assert failed["requests"] == 0
    assert failed["errors"] == int(str(failed["scheduled_reviews"])) // 2  # no validate after


def test_templates_file_round_trips(tmp_path: Path, workload: Workload) -> None:
    pairs = [(p.mutate, p.validate) for p in workload.pairs]
    path = tmp_path / "pairs.json"

    loadgen.write_templates(pairs, path)

    assert loadgen.load_templates(path) == pairs
    assert all(isinstance(t, Template) for pair in loadgen.load_templates(path) for t in pair)
