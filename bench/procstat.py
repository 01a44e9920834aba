"""Reading another process's CPU time and memory from ``/proc`` (Linux)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class ProcError(RuntimeError):
    """The process is gone or ``/proc`` is not readable."""


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """User and system CPU seconds of one process (its own threads, not its children)."""

    user: float
    system: float

    @property
    def total(self) -> float:
        return self.user + self.system

    def __sub__(self, other: CpuTimes) -> CpuTimes:
        return CpuTimes(self.user - other.user, self.system - other.system)


def parse_stat(text: str) -> CpuTimes:
    """``utime`` and ``stime`` (fields 14 and 15) of a ``/proc/<pid>/stat`` line.

    The command name (field 2) is in parentheses and may itself contain spaces or ``)``, so
    fields are counted from the last ``)``.
    """
    _, paren, rest = text.rpartition(")")
    if not paren:
        raise ProcError(f"not a /proc stat line: {text[:60]!r}")
    fields = rest.split()
    # rest starts at field 3 (state): utime is field 14, stime field 15.
    try:
        utime, stime = int(fields[11]), int(fields[12])
    except (IndexError, ValueError) as exc:
        raise ProcError(f"not a /proc stat line: {text[:60]!r}") from exc
    return CpuTimes(utime / CLOCK_TICKS, stime / CLOCK_TICKS)


def cpu_times(pid: int) -> CpuTimes:
    try:
        return parse_stat(Path(f"/proc/{pid}/stat").read_text())
    except OSError as exc:
        raise ProcError(f"cannot read /proc/{pid}/stat: {exc.strerror}") from exc


def parse_status_kib(text: str, field: str) -> int:
    """A ``kB`` field (``VmRSS``, ``VmHWM``...) of ``/proc/<pid>/status``, in KiB."""
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name == field:
            parts = value.split()
            if parts and parts[0].isdigit():
                return int(parts[0])
    raise ProcError(f"no {field} in /proc status")


def memory_kib(pid: int, field: str = "VmRSS") -> int:
    """Resident memory (``VmRSS``) or its peak (``VmHWM``) of ``pid`` in KiB."""
    try:
        return parse_status_kib(Path(f"/proc/{pid}/status").read_text(), field)
    except OSError as exc:
        raise ProcError(f"cannot read /proc/{pid}/status: {exc.strerror}") from exc


def mib(kib: int) -> float:
    return kib / 1024
