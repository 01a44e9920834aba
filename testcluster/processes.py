"""One control-plane component as a child process, its output kept in a log file."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
from pathlib import Path
from typing import IO


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the component binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of ``path`` (empty when it does not exist)."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 256 * lines))
            text = handle.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class Component:
    """A child process (``binary name args...``) writing to ``log``."""

    def __init__(self, name: str, command: list[str], *, log: Path) -> None:
        self.name = name
        self.command = command
        self.log = log
        self._process: subprocess.Popen[bytes] | None = None
        self._handle: IO[bytes] | None = None

    def start(self) -> Component:
        self._handle = self.log.open("ab")
        self._process = subprocess.Popen(
            self.command,
            stdin=subprocess.DEVNULL,
            stdout=self._handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C at `make cluster` reaches the launcher, not us
        )
        return self

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def exited(self) -> int | None:
        """The exit code when the process has ended, else None."""
        return None if self._process is None else self._process.poll()

    def describe_exit(self) -> str:
        code = self.exited()
        return f"{self.name} exited with {code}; its log ends:\n{tail(self.log, 30)}"

    def stop(self, *, timeout: float = 10.0) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout)
        if self._handle is not None:
            with contextlib.suppress(OSError):
                self._handle.close()
            self._handle = None

    def kill(self) -> None:
        """SIGKILL, as a crash would end it."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
