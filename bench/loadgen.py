"""An open-loop, fixed-rate load generator over TLS with keep-alive (``python -m bench.loadgen``).

wrk only saturates: it sends the next request when the previous answer arrives. A fixed rate
needs requests scheduled by the clock, and latency measured from the *scheduled* start, so that
a slow answer delays the requests queued behind it and shows in their latency too (no
"coordinated omission", the way wrk2 measures). Pod creations are scheduled every
``2 / rate`` seconds; a free connection sends the pod's ``/mutate`` review and then its
``/validate`` review (the second's latency counts from the end of the first).

To show it is not the bottleneck, the report includes the generator's own CPU use (user+system
over wall time: it must stay well below one core), how late the scheduler ran, and the rate
achieved against the rate asked. It runs as its own process, so its CPU is not the bench's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import ssl
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench import stats
from bench.workload import Template, pair_ids

# How long answers may still arrive after the last pod was scheduled: what is still queued or
# unanswered then counts as errors (a server far behind its rate would otherwise take forever).
MAX_DRAIN_SECONDS = 15.0


@dataclass
class Tally:
    """What a run measured."""

    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    not_allowed: int = 0
    lags: list[float] = field(default_factory=list)
    last_done: float = 0.0
    error_samples: list[str] = field(default_factory=list)

    def error(self, what: str) -> None:
        self.errors += 1
        if len(self.error_samples) < 5:
            self.error_samples.append(what)


class Connection:
    """One keep-alive HTTP/1.1 connection over TLS; reconnects after a failure."""

    def __init__(self, host: str, port: int, context: ssl.SSLContext) -> None:
        self._host, self._port, self._context = host, port, context
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._prefix = f"Host: {host}:{port}\r\nContent-Type: application/json\r\n".encode()

    async def open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection(self._host, self._port, ssl=self._context)
        self._reader, self._writer = reader, writer
        return reader, writer

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await self._writer.wait_closed()
        self._reader = self._writer = None

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """(status, body) of one POST; raises OSError/IncompleteReadError on failures."""
        reader, writer = self._reader, self._writer
        if reader is None or writer is None:
            reader, writer = await self.open()
        writer.write(
            b"POST "
            + path.encode()
            + b" HTTP/1.1\r\n"
            + self._prefix
            + b"Content-Length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body
        )
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        payload = await reader.readexactly(length) if length else b""
        return status, payload


def load_templates(path: Path) -> list[tuple[Template, Template]]:
    """The pairs written by :func:`write_templates`."""
    document: list[dict[str, Any]] = orjson.loads(path.read_bytes())
    pairs = []
    for entry in document:
        docs = []
        for key in ("mutate", "validate"):
            item = entry[key]
            docs.append(
                Template(tuple(part.encode() for part in item["parts"]), tuple(item["slots"]))
            )
        pairs.append((docs[0], docs[1]))
    return pairs


def write_templates(pairs: list[tuple[Template, Template]], path: Path) -> None:
    def encode(template: Template) -> dict[str, Any]:
        return {"parts": [p.decode() for p in template.parts], "slots": list(template.slots)}

    path.write_bytes(orjson.dumps([{"mutate": encode(m), "validate": encode(v)} for m, v in pairs]))


async def _send(connection: Connection, path: str, body: bytes, tally: Tally) -> bool:
    try:
        status, payload = await connection.post(path, body)
    except (OSError, asyncio.IncompleteReadError, ssl.SSLError, ValueError) as exc:
        tally.error(f"{path}: {type(exc).__name__}: {exc}")
        await connection.close()
        return False
    if status != 200:
        tally.error(f"{path}: HTTP {status}: {payload[:200]!r}")
        return False
    if b'"allowed":true' not in payload:
        tally.not_allowed += 1
        tally.error(f"{path}: not allowed: {payload[:300]!r}")
        return False
    return True


async def generate(
    *,
    host: str,
    port: int,
    context: ssl.SSLContext,
    pairs: list[tuple[Template, Template]],
    rate: float,
    seconds: float,
    connections: int,
    run: int,
) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    tally = Tally()
    pool = [Connection(host, port, context) for _ in range(connections)]
    for connection in pool:
        await connection.open()
    jobs: asyncio.Queue[tuple[int, float] | None] = asyncio.Queue()
    interval = 2.0 / rate  # one pod = two reviews
    usage_before = resource.getrusage(resource.RUSAGE_SELF)
    wall_before = time.perf_counter()
    start = loop.time() + 0.05
    end = start + seconds

    async def schedule() -> int:
        index = 0
        while (intended := start + index * interval) < end:
            delay = intended - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tally.lags.append(max(0.0, loop.time() - intended))
            jobs.put_nowait((index, intended))
            index += 1
        for _ in pool:
            jobs.put_nowait(None)
        return index

    in_flight: set[int] = set()

    async def work(connection: Connection) -> None:
        while (job := await jobs.get()) is not None:
            index, intended = job
            in_flight.add(index)
            mutate, validate = pairs[index % len(pairs)]
            ids = pair_ids(run, index)
            if await _send(connection, "/mutate", mutate.render(ids.mutate_values()), tally):
                mutated = loop.time()
                tally.latencies.append(mutated - intended)
                body = validate.render(ids.validate_values())
                if await _send(connection, "/validate", body, tally):
                    done = loop.time()
                    tally.latencies.append(done - mutated)
                    tally.last_done = done
            in_flight.discard(index)

    workers = [asyncio.create_task(work(connection)) for connection in pool]
    scheduled = await schedule()
    drain = min(MAX_DRAIN_SECONDS, max(2.0, seconds))
    _, pending = await asyncio.wait(workers, timeout=max(0.0, end - loop.time()) + drain)
    for task in pending:
        task.cancel()
    # Pods never sent, or cut off at the end, count as one error each.
    unfinished = len(in_flight)
    while not jobs.empty():
        unfinished += jobs.get_nowait() is not None
    wall = time.perf_counter() - wall_before
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (usage.ru_utime - usage_before.ru_utime) + (usage.ru_stime - usage_before.ru_stime)
    for connection in pool:
        await connection.close()

    completed = len(tally.latencies)
    span = max(tally.last_done - start, seconds) if completed else seconds
    latency = stats.Latency.of(tally.latencies).to_json() if tally.latencies else {}
    return {
        "target_rps": rate,
        "achieved_rps": round(completed / span, 1),
        "scheduled_reviews": 2 * scheduled,
        "requests": completed,
        "errors": tally.errors + unfinished,
        "unfinished_pods": unfinished,
        "not_allowed": tally.not_allowed,
        "error_samples": tally.error_samples,
        "seconds": round(span, 3),
        "connections": connections,
        **latency,
        "generator_cpu_share": round(cpu / wall, 3) if wall else None,
        "schedule_lag_p99_ms": round(stats.percentile(tally.lags, 99) * 1000, 3)
        if tally.lags
        else None,
        "schedule_lag_max_ms": round(max(tally.lags) * 1000, 3) if tally.lags else None,
    }


def client_context(ca_file: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cafile=ca_file)
    return context


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.loadgen", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ca", type=Path, required=True, help="CA bundle of the server")
    parser.add_argument("--templates", type=Path, required=True)
    parser.add_argument("--rate", type=float, required=True, help="reviews per second")
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--run", type=int, required=True, help="id namespace of this run")
    args = parser.parse_args(argv)
    if args.rate <= 0 or args.seconds <= 0 or args.connections < 1:
        parser.error("--rate, --seconds and --connections must be positive")
    result = asyncio.run(
        generate(
            host=args.host,
            port=args.port,
            context=client_context(args.ca),
            pairs=load_templates(args.templates),
            rate=args.rate,
            seconds=args.seconds,
            connections=args.connections,
            run=args.run,
        )
    )
    sys.stdout.write(orjson.dumps(result).decode() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
