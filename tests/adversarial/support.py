"""A real ``tenantgate serve`` in a subprocess, and the clients that attack it, on 127.0.0.1.

The server runs offline on the embedded config (or a given one) so that every review goes
through the whole decision stack. Its memory is read from ``/proc/PID/status`` (VmRSS).
:class:`KeepAliveClient` posts reviews on one TLS connection and says when the server closed
it; raw sockets (:func:`tls_socket`) play the slow or silent clients.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
from prometheus_client.parser import text_string_to_metric_families

from tests.tlsclient import STARTUP_TIMEOUT, ServerProcess, client_context, start_process

FIXTURES = Path(__file__).parent.parent / "fixtures" / "reviews"
EXAMPLE_CONFIG = (Path(__file__).parent.parent.parent / "examples" / "tenantgate.yaml").read_text()
REVIEW_FIXTURES = tuple(sorted(FIXTURES.glob("*.json")))
JSON_HEADERS = {"content-type": "application/json"}
LOCALHOST = "127.0.0.1"


def fixture_body(name: str = "v1-create-pod.json") -> bytes:
    return (FIXTURES / name).read_bytes()


def broken_config(tenants: int) -> str:
    """The example config with ``tenants`` more tenants, each with two problems."""
    lines = [EXAMPLE_CONFIG.rstrip()]
    for index in range(tenants):
        lines += [
            f"  broken-{index}:",
            f"    namespaces: [broken-{index}]",
            '    quota: {guaranteed: {cpu: "lots"}}',
            "    bogus: 1",
        ]
    return "\n".join(lines) + "\n"


def review_body(*, uid: str, name: str = "v1-create-pod.json") -> bytes:
    """A fixture review with a fresh uid (the answer must echo it)."""
    document: dict[str, Any] = orjson.loads(fixture_body(name))
    document["request"]["uid"] = uid
    return orjson.dumps(document)


@dataclass
class Server:
    """A running ``tenantgate serve`` subprocess."""

    process: ServerProcess
    cert_dir: Path
    port: int
    metrics_port: int

    @property
    def pid(self) -> int:
        return self.process.process.pid

    @property
    def ca_file(self) -> Path:
        return self.cert_dir / "ca.crt"

    def rss_kib(self) -> int:
        """The server's resident memory now, in KiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS in /proc status")

    def context(self) -> ssl.SSLContext:
        return client_context(self.ca_file)

    def connection(self, *, timeout: float = STARTUP_TIMEOUT) -> KeepAliveClient:
        return KeepAliveClient(self, timeout=timeout)

    def metrics(self) -> httpx.Client:
        return httpx.Client(
            base_url=f"http://{LOCALHOST}:{self.metrics_port}", trust_env=False, timeout=30
        )

    def readyz(self) -> tuple[int, dict[str, Any]]:
        with self.metrics() as plain:
            answer = plain.get("/readyz")
        document: dict[str, Any] = answer.json()
        return answer.status_code, document

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples of ``name`` on ``/metrics`` that carry ``labels``."""
        with self.metrics() as plain:
            text = plain.get("/metrics").text
        return sum(
            float(sample.value)
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
        )

    def errors(self) -> list[Mapping[str, Any]]:
        """Log entries at error level or above, tracebacks, and lines that are not JSON."""
        return [
            entry
            for entry in self.log_entries()
            if str(entry.get("level", "")).lower() in ("error", "critical", "raw")
            or "Traceback" in str(entry)
        ]

    def log_entries(self) -> list[Mapping[str, Any]]:
        entries: list[Mapping[str, Any]] = []
        for line in self.process.lines:
            try:
                entry = orjson.loads(line)
            except orjson.JSONDecodeError:
                entries.append({"level": "RAW", "message": line})
                continue
            if isinstance(entry, dict):
                entries.append(entry)
        return entries


def serve_argv(cert_dir: Path, *extra: str) -> list[str]:
    argv = [sys.executable, "-m", "admission.cli", "serve", "--offline"]
    argv += ["--cert-dir", str(cert_dir), "--log-format", "json"]
    argv += ["--host", LOCALHOST, "--port", "0", "--metrics-host", LOCALHOST, "--metrics-port", "0"]
    # No pre-stop delay when a test ends the server (a test of shutdown sets its own).
    argv += ["--shutdown-delay-seconds", "0"]
    return [*argv, *extra]


@contextmanager
def running_server(
    cert_dir: Path, *extra: str, env: Mapping[str, str] | None = None, ready: bool = True
) -> Iterator[Server]:
    """``tenantgate serve --offline`` with ``extra`` flags, until the block ends (once ready,
    unless ``ready`` is false)."""
    process = start_process(serve_argv(cert_dir, *extra), env=env)
    try:
        port, metrics_port = process.endpoints()
        server = Server(process, cert_dir, port, metrics_port)
        if ready:
            wait_for(lambda: server.readyz()[0] == 200, what="the server to be ready")
        yield server
    finally:
        process.stop()


def wait_for(condition: Callable[[], bool], *, what: str, timeout: float = STARTUP_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


class KeepAliveClient:
    """POSTs on one TLS connection, as the API server does; knows when it had to reconnect."""

    def __init__(self, server: Server, *, timeout: float) -> None:
        self.server = server
        self.connection = http.client.HTTPSConnection(
            LOCALHOST, server.port, context=server.context(), timeout=timeout
        )
        self.connects = 0

    def post(self, path: str, body: bytes) -> tuple[int, bytes, Mapping[str, str]]:
        if self.connection.sock is None:
            self.connects += 1
        self.connection.request("POST", path, body=body, headers=JSON_HEADERS)
        response = self.connection.getresponse()
        payload = response.read()
        headers = {k.lower(): v for k, v in response.getheaders()}
        if response.will_close:
            self.connection.close()
        return response.status, payload, headers

    def review(self, path: str, *, uid: str, name: str = "v1-create-pod.json") -> dict[str, Any]:
        """Post a fixture review; returns its response (asserting a 200 that echoes ``uid``)."""
        status, payload, _ = self.post(path, review_body(uid=uid, name=name))
        if status != 200:
            raise AssertionError(f"{path} answered {status}: {payload[:200]!r}")
        response: dict[str, Any] = orjson.loads(payload)["response"]
        if response["uid"] != uid:
            raise AssertionError(f"{path} answered uid {response['uid']}, expected {uid}")
        return response

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> KeepAliveClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def tls_socket(server: Server, *, timeout: float = STARTUP_TIMEOUT) -> ssl.SSLSocket:
    """A TLS connection to the webhook, handshake done, nothing sent."""
    raw = socket.create_connection((LOCALHOST, server.port), timeout=timeout)
    return server.context().wrap_socket(raw, server_hostname=LOCALHOST)


def closed_by_peer(sock: socket.socket | ssl.SSLSocket, *, timeout: float) -> bool:
    """Whether the server closes ``sock`` within ``timeout`` (reading and discarding)."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        sock.settimeout(remaining)
        try:
            data = sock.recv(65536)
        except TimeoutError:
            return False
        except (ConnectionError, ssl.SSLError, OSError):
            return True
        if not data:
            return True


def request_head(path: str, *, length: int, extra: Sequence[str] = ()) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: {LOCALHOST}",
        "Content-Type: application/json",
        f"Content-Length: {length}",
        *extra,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()
