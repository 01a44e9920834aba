"""Shared test helpers: a real tenantgate server on free ports, and clients that verify its CA.

* :func:`serving` runs :class:`admission.server.WebhookServer` in a thread (in-process, fast).
* :func:`start_process` runs a server in a subprocess (signals, exit codes); it reads the
  bound ports from the JSON startup log line. ``python -m tests.tlsclient MODULE:FACTORY``
  serves the ``(app, metrics_app)`` pair returned by ``FACTORY()``, settings from
  ``TENANTGATE_*``.
* :func:`client_context` / :func:`client` trust exactly the given CA file and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import queue
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from starlette.types import ASGIApp

from admission.logs import configure_logging
from admission.server import CertificateCallback, Endpoints, WebhookServer, run
from admission.settings import Settings

REPO = Path(__file__).resolve().parent.parent
STARTUP_TIMEOUT = 60.0  # generous: the machine is shared; this only bounds a hang


def local_settings(cert_dir: Path, **overrides: Any) -> Settings:
    """Settings for a server on loopback with both ports chosen by the OS."""
    values: dict[str, Any] = {
        "cert_dir": cert_dir,
        "host": "127.0.0.1",
        "port": 0,
        "metrics_host": "127.0.0.1",
        "metrics_port": 0,
    }
    values.update(overrides)
    return Settings(**values)


def client_context(ca_file: Path, **versions: ssl.TLSVersion) -> ssl.SSLContext:
    """A client context that verifies the server (name included) against ``ca_file`` only.

    ``versions`` may set ``minimum_version`` / ``maximum_version``.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cafile=ca_file)
    for name, version in versions.items():
        setattr(context, name, version)
    return context


def client(base_url: str, ca_file: Path, **kwargs: Any) -> httpx.Client:
    """An httpx client for ``base_url`` verifying ``ca_file``; ignores proxy variables."""
    return httpx.Client(
        base_url=base_url, verify=client_context(ca_file), trust_env=False, **kwargs
    )


@dataclass
class RunningServer:
    """A server started by :func:`serving`."""

    server: WebhookServer
    endpoints: Endpoints
    ca_file: Path

    @property
    def url(self) -> str:
        return self.endpoints.url

    @property
    def metrics_url(self) -> str:
        return self.endpoints.metrics_url

    def client(self, **kwargs: Any) -> httpx.Client:
        return client(self.url, self.ca_file, **kwargs)

    def metrics_client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.metrics_url, trust_env=False, **kwargs)


@contextlib.contextmanager
def serving(
    settings: Settings,
    *,
    app: ASGIApp,
    metrics_app: ASGIApp | None = None,
    on_certificate: CertificateCallback | None = None,
    cert_poll_seconds: float = 0.1,
) -> Iterator[RunningServer]:
    """Run the real server in a background thread for the duration of the ``with`` block."""
    server = WebhookServer(
        settings,
        app=app,
        metrics_app=metrics_app if metrics_app is not None else app,
        on_certificate=on_certificate,
        cert_poll_seconds=cert_poll_seconds,
    )
    started = threading.Event()
    failure: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(server.serve(on_started=lambda _: started.set()))
        except BaseException as exc:
            failure.append(exc)
        finally:
            started.set()

    thread = threading.Thread(target=target, name="tenantgate-test-server", daemon=True)
    thread.start()
    try:
        if not started.wait(STARTUP_TIMEOUT):
            raise TimeoutError("server did not start")
        if failure:
            raise failure[0]
        assert server.endpoints is not None
        yield RunningServer(server, server.endpoints, settings.cert_dir / "ca.crt")
    finally:
        server.request_stop()
        thread.join(STARTUP_TIMEOUT)
    if failure:
        raise failure[0]


@dataclass
class ServerProcess:
    """A server subprocess whose stderr (JSON log lines) is collected as it arrives."""

    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    _queue: queue.Queue[str | None] = field(default_factory=queue.Queue)
    _reader: threading.Thread | None = None

    def wait_for_log(
        self, predicate: Callable[[Mapping[str, Any]], bool], *, timeout: float = STARTUP_TIMEOUT
    ) -> Mapping[str, Any]:
        """The first JSON log entry satisfying ``predicate``, including ones already seen."""
        deadline = time.monotonic() + timeout
        for line in list(self.lines):
            entry = _json_line(line)
            if entry is not None and predicate(entry):
                return entry
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no matching log line; output so far:\n{self.output}")
            try:
                received = self._queue.get(timeout=remaining)
            except queue.Empty:
                continue
            if received is None:
                raise RuntimeError(f"server exited; output:\n{self.output}")
            entry = _json_line(received)
            if entry is not None and predicate(entry):
                return entry

    def endpoints(self) -> tuple[int, int]:
        """The (webhook, metrics) ports from the startup log line."""
        entry = self.wait_for_log(lambda e: "port" in e and "metrics_port" in e)
        return int(entry["port"]), int(entry["metrics_port"])

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def stop(self, *, timeout: float = STARTUP_TIMEOUT) -> int:
        if self.process.poll() is None:
            self.process.terminate()
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait(timeout)
        if self._reader is not None:
            self._reader.join(timeout)
        return code


def start_process(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path = REPO
) -> ServerProcess:
    """Start ``argv`` with stderr captured; ``env`` is added to a copy of this environment."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    paths = [str(REPO), *filter(None, [full_env.get("PYTHONPATH", "")])]
    full_env["PYTHONPATH"] = os.pathsep.join(paths)
    process = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=full_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    result = ServerProcess(process)

    def drain() -> None:
        assert process.stderr is not None
        with process.stderr:
            for line in process.stderr:
                result.lines.append(line)
                result._queue.put(line)
        result._queue.put(None)

    result._reader = threading.Thread(target=drain, name="tenantgate-test-stderr", daemon=True)
    result._reader.start()
    return result


def _json_line(line: str) -> Mapping[str, Any] | None:
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) else None


def main(argv: Sequence[str]) -> int:
    """``python -m tests.tlsclient MODULE:FACTORY``: serve a test app pair until SIGTERM."""
    if len(argv) != 1 or ":" not in argv[0]:
        print("usage: python -m tests.tlsclient MODULE:FACTORY", file=sys.stderr)
        return 2
    module_name, factory_name = argv[0].split(":", 1)
    factory = getattr(importlib.import_module(module_name), factory_name)
    app, metrics_app = factory()
    settings = Settings()
    configure_logging("json", settings.log_level)
    run(settings, app=app, metrics_app=metrics_app)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
