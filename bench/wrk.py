"""Saturation load with ``wrk`` (C, from Debian): install it if missing, feed it, read it.

``wrk`` is closed-loop: each connection sends its next request as soon as the previous answer
arrives, which is what "saturated throughput" means. The request bodies come from
:mod:`bench.workload` through ``bench/wrk.lua``. wrk's own CPU time is measured (it is a child
of this process) so the report can show the generator was not the bottleneck.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson

from bench.workload import Template, Workload, pair_ids

LUA_SCRIPT: Final = Path(__file__).resolve().parent / "wrk.lua"
MARKER: Final = "BENCH-JSON "


class WrkUnavailable(RuntimeError):
    """wrk is not installed and cannot be installed here."""


def ensure_wrk(progress: Callable[[str], None]) -> str:
    """The path of ``wrk``; installs the Debian package first when it is missing."""
    found = shutil.which("wrk")
    if found:
        return found
    apt = shutil.which("apt-get")
    if apt is None:
        raise WrkUnavailable("wrk is not installed and apt-get is not available: install wrk")
    prefix: list[str] = []
    if os.geteuid() != 0:
        sudo = shutil.which("sudo")
        if sudo is None:
            raise WrkUnavailable("wrk is not installed; run: sudo apt-get install -y wrk")
        prefix = [sudo, "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        [*prefix, apt, "update", "-q"],
        [*prefix, apt, "install", "-y", "-q", "--no-install-recommends", "wrk"],
    ):
        progress(f"wrk not found: running {' '.join(command)}")
        completed = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if completed.returncode != 0:
            tail = (completed.stderr or completed.stdout).strip().splitlines()[-3:]
            raise WrkUnavailable(f"{' '.join(command)} failed: {' / '.join(tail)}")
    found = shutil.which("wrk")
    if not found:
        raise WrkUnavailable("wrk is still not on PATH after apt-get install wrk")
    return found


def lua_string(data: bytes) -> bytes:
    """``data`` as a Lua long-bracket literal whose closing bracket does not occur in it."""
    level = 0
    while b"]" + b"=" * level + b"]" in data:
        level += 1
    equals = b"=" * level
    # A newline right after the opening bracket would be dropped by Lua: JSON never starts so.
    return b"[" + equals + b"[" + data + b"]" + equals + b"]"


def _lua_document(template: Template) -> bytes:
    parts = b",".join(lua_string(part) for part in template.parts)
    slots = b",".join(lua_string(slot.encode()) for slot in template.slots)
    return b"{parts={" + parts + b"},slots={" + slots + b"}}"


def write_templates(workload: Workload, path: Path) -> None:
    """The workload's pairs as the Lua table ``wrk.lua`` loads."""
    entries = [
        b"{mutate="
        + _lua_document(pair.mutate)
        + b",validate="
        + _lua_document(pair.validate)
        + b"}"
        for pair in workload.pairs
    ]
    path.write_bytes(b"return {\n" + b",\n".join(entries) + b"\n}\n")


def write_ids(path: Path, *, run: int, pairs: int) -> None:
    """``pairs`` lines of per-pod ids for run ``run``: mutate uid, validate uid, reservation id,
    pod uid, name suffix."""
    with path.open("w", encoding="ascii") as handle:
        for index in range(pairs):
            ids = pair_ids(run, index)
            handle.write(
                f"{ids.mutate_uid} {ids.validate_uid} {ids.reservation_id} "
                f"{ids.pod_uid} {ids.suffix}\n"
            )


@dataclass(frozen=True, slots=True)
class WrkResult:
    """What one wrk run measured (latencies in ms) and what wrk itself cost."""

    requests: int
    seconds: float
    errors: int
    not_allowed: int
    wrapped_pairs: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float
    wrk_cpu_seconds: float
    raw: dict[str, Any]

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "seconds": round(self.seconds, 3),
            "throughput_rps": round(self.throughput, 1),
            "errors": self.errors,
            "not_allowed": self.not_allowed,
            "p50_ms": round(self.p50_ms, 3),
            "p90_ms": round(self.p90_ms, 3),
            "p99_ms": round(self.p99_ms, 3),
            "max_ms": round(self.max_ms, 3),
            "mean_ms": round(self.mean_ms, 3),
            "generator_cpu_share": round(self.wrk_cpu_seconds / self.seconds, 3)
            if self.seconds
            else None,
            "ids_reused": self.wrapped_pairs,
        }


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def parse_output(text: str) -> dict[str, Any]:
    """The summary ``wrk.lua`` prints; ``WrkUnavailable`` if wrk printed none."""
    for line in text.splitlines():
        if line.startswith(MARKER):
            parsed: dict[str, Any] = orjson.loads(line[len(MARKER) :])
            return parsed
    raise WrkUnavailable(f"wrk printed no summary: {text.strip()[-300:]}")


def run_wrk(
    wrk: str,
    url: str,
    *,
    connections: int,
    seconds: float,
    templates: Path,
    ids: Path,
    timeout_seconds: int = 10,
) -> WrkResult:
    """Drive ``url`` with ``connections`` connections (one per wrk thread) for ``seconds``."""
    argv = [
        wrk,
        f"-t{connections}",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        f"--timeout={timeout_seconds}s",
        "-s",
        str(LUA_SCRIPT),
        url,
        "--",
        str(templates),
        str(ids),
        str(connections),
    ]
    before = _children_cpu()
    completed = subprocess.run(argv, capture_output=True, text=True, check=False)
    cpu = _children_cpu() - before
    if completed.returncode != 0:
        raise WrkUnavailable(f"wrk failed ({completed.returncode}): {completed.stderr.strip()}")
    raw = parse_output(completed.stdout)
    errors = sum(
        int(raw[key])
        for key in ("connect_errors", "read_errors", "write_errors", "status_errors", "timeouts")
    )
    return WrkResult(
        requests=int(raw["requests"]),
        seconds=int(raw["duration_us"]) / 1e6,
        errors=errors,
        not_allowed=int(raw["not_allowed"]),
        wrapped_pairs=int(raw["wrapped_pairs"]),
        p50_ms=int(raw["p50_us"]) / 1000,
        p90_ms=int(raw["p90_us"]) / 1000,
        p99_ms=int(raw["p99_us"]) / 1000,
        max_ms=int(raw["max_us"]) / 1000,
        mean_ms=float(raw["mean_us"]) / 1000,
        wrk_cpu_seconds=cpu,
        raw=raw,
    )
