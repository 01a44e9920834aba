"""Server processes under test: ``tenantgate serve`` and the baseline, started and stopped.

Both listen on 127.0.0.1 with ports picked free beforehand (the servers log at ``warning``, so
there is no startup line to read a port from: per-request and per-expiry log lines would be
CPU the benchmark charges to the server). A server counts as started when its metrics port
answers ``/readyz`` with 200.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from bench import procstat

REPO: Final = Path(__file__).resolve().parent.parent
START_TIMEOUT: Final = 120.0  # a 10,000-tenant config takes a while to load on a busy machine


# Loopback only: never through a proxy from the environment.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ServerError(RuntimeError):
    """A server did not start, or died."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def tenantgate_executable() -> list[str]:
    """How to run ``tenantgate``: the installed script next to this Python, else the module."""
    script = Path(sys.executable).with_name("tenantgate")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from admission.cli import main; sys.exit(main())"]


@dataclass
class ServerProcess:
    """A started server: its process, its ports and the stderr it wrote."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    metrics_port: int
    ca_file: Path
    stderr: list[str] = field(default_factory=list)
    _reader: threading.Thread | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def cpu(self) -> procstat.CpuTimes:
        return procstat.cpu_times(self.pid)

    def rss_kib(self) -> int:
        return procstat.memory_kib(self.pid, "VmRSS")

    def alive(self) -> bool:
        return self.process.poll() is None

    def output(self, lines: int = 20) -> str:
        return "".join(self.stderr[-lines:])

    def stop(self, *, timeout: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait(timeout)
        if self._reader is not None:
            self._reader.join(timeout)
        return code


def start(
    name: str,
    argv: Sequence[str],
    *,
    cert_dir: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = START_TIMEOUT,
) -> ServerProcess:
    """Start a server listening on free ports of 127.0.0.1 and wait until it is ready."""
    port, metrics_port = free_port(), free_port()
    full_env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "TENANTGATE_CERT_DIR": str(cert_dir),
        "TENANTGATE_HOST": "127.0.0.1",
        "TENANTGATE_PORT": str(port),
        "TENANTGATE_METRICS_HOST": "127.0.0.1",
        "TENANTGATE_METRICS_PORT": str(metrics_port),
        "TENANTGATE_LOG_FORMAT": "json",
        "TENANTGATE_LOG_LEVEL": "warning",
        **(env or {}),
    }
    process = subprocess.Popen(
        list(argv),
        cwd=REPO,
        env=full_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    server = ServerProcess(name, process, port, metrics_port, cert_dir / "ca.crt")

    def drain() -> None:
        stream = process.stderr
        if stream is None:
            return
        with stream:
            for line in stream:
                server.stderr.append(line.decode(errors="replace"))
                del server.stderr[:-200]

    server._reader = threading.Thread(target=drain, name=f"{name}-stderr", daemon=True)
    server._reader.start()
    try:
        wait_ready(server, timeout=timeout)
    except BaseException:
        server.stop()
        raise
    return server


def wait_ready(server: ServerProcess, *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    url = f"http://127.0.0.1:{server.metrics_port}/readyz"
    while time.monotonic() < deadline:
        if not server.alive():
            raise ServerError(
                f"{server.name} exited with {server.process.returncode}:\n{server.output()}"
            )
        with (
            contextlib.suppress(OSError, urllib.error.URLError),
            _DIRECT.open(url, timeout=2) as response,
        ):
            if response.status == 200:
                return
        time.sleep(0.2)
    raise ServerError(f"{server.name} not ready after {timeout:.0f} s:\n{server.output()}")


def start_tenantgate(config: Path, *, cert_dir: Path) -> ServerProcess:
    """``tenantgate serve --offline`` on ``config``."""
    argv = [*tenantgate_executable(), "serve", "--offline", "--config", str(config)]
    return start("tenantgate", argv, cert_dir=cert_dir)


def start_baseline(*, cert_dir: Path) -> ServerProcess:
    """The no-op baseline (:mod:`bench.baseline`) on the same stack."""
    return start("baseline", [sys.executable, "-m", "bench.baseline"], cert_dir=cert_dir)
