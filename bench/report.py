"""Targets, the table printed at the end of a run, and the machine the run happened on.

The targets are those of issue 6, the reload one of issue 11, the cohorts one of issue 23
and the two of pod groups. A figure that was not measured at the size a target names (a
``--quick`` run uses smaller sizes) is shown with ``n/a`` rather than judged.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Final, Literal

REPO: Final = Path(__file__).resolve().parent.parent
Status = Literal["meets", "misses", "n/a"]


@dataclass(frozen=True, slots=True)
class Target:
    """A goal for one figure: ``value <op> limit``."""

    key: str
    title: str
    unit: str
    op: Literal["<=", ">=", "=="]
    limit: float

    def judge(self, value: float | None) -> Status:
        if value is None:
            return "n/a"
        if self.op == "<=":
            return "meets" if value <= self.limit else "misses"
        if self.op == ">=":
            return "meets" if value >= self.limit else "misses"
        return "meets" if value == self.limit else "misses"

    def describe(self) -> str:
        return f"{self.op} {_number(self.limit)}{self.unit}"


TARGETS: Final = (
    Target("core_us_per_pair", "core: CPU per mutate+validate pair (~10 KB pod)", " µs", "<=", 250),
    Target("throughput_ratio", "server: saturated throughput / baseline", "x", ">=", 0.5),
    Target("p99_500_ms", "server: p99 latency at 500 reviews/s", " ms", "<=", 5),
    Target("server_errors", "server: errors (all tenantgate runs)", "", "==", 0),
    Target("tenants_ratio", "scale: CPU/pair, 10 -> 10,000 tenants", "x", "<=", 1.2),
    Target("ledger_ratio", "scale: CPU/pair, 1,000 -> 150,000 live pods", "x", "<=", 1.2),
    Target("rules_ratio", "scale: CPU/pair, 10 -> 1,000 rules", "x", "<=", 2),
    Target("rest_rss_mib", "memory: RSS, 10,000 tenants + 150,000 pods", " MiB", "<=", 200),
    Target("rebuild_seconds", "memory: ledger rebuild of 150,000 pods", " s", "<=", 10),
    Target("queue_release_p99_ms", "queue: release latency p99, 1,000 queued", " ms", "<=", 100),
    Target("queue_reeval_ratio", "queue: CPU/re-evaluation, 100 -> 10,000 queued", "x", "<=", 1.5),
    Target("queue_admission_ratio", "queue: admission CPU, queued / admitted", "x", "<=", 3),
    Target("queue_bytes_per_pod", "queue: memory per queued pod", " B", "<=", 2048),
    Target("reload_lag_ms", "reload: worst loop lag, 10,000-tenant config", " ms", "<=", 50),
    Target(
        "cohorts_ratio", "cohorts: CPU/pair, 1,000 tenants in 50 cohorts / none", "x", "<=", 1.2
    ),
    Target("groups_admission_ratio", "groups: admission CPU, member / plain pod", "x", "<=", 1.5),
    Target(
        "groups_release_p99_ms", "groups: booking + releasing 64 members, p99", " ms", "<=", 1000
    ),
    Target(
        "cluster_wall_ratio", "cluster: 2,000 creates, with / without webhooks", "x", "<=", 1.25
    ),
    Target(
        "cluster_added_p99_ms", "cluster: 2,000 creates, p99 added by webhooks", " ms", "<=", 15
    ),
)


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the table: a figure, or a figure with its target and verdict."""

    title: str
    value: str
    target: str = ""
    status: str = ""


def _number(value: float) -> str:
    if value == int(value) and abs(value) >= 1:
        return f"{int(value):,}"
    return f"{value:.3g}" if abs(value) < 10 else f"{value:,.1f}"


def show(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{_number(value)}{unit}"


def judged_rows(figures: Mapping[str, float | None], applicable: Mapping[str, bool]) -> list[Row]:
    """A row per target; ``applicable[key]`` false means measured at another size (n/a)."""
    rows = []
    for target in TARGETS:
        value = figures.get(target.key)
        status = target.judge(value) if applicable.get(target.key, True) else "n/a"
        rows.append(Row(target.title, show(value, target.unit), target.describe(), status))
    return rows


def verdicts(
    figures: Mapping[str, float | None], applicable: Mapping[str, bool]
) -> list[dict[str, Any]]:
    """The targets with value and status, for the JSON results."""
    return [
        {
            "key": target.key,
            "title": target.title,
            "value": figures.get(target.key),
            "target": target.describe(),
            "status": target.judge(figures.get(target.key))
            if applicable.get(target.key, True)
            else "n/a",
        }
        for target in TARGETS
    ]


def table(rows: Sequence[Row], *, heading: str = "figure") -> str:
    """Rows as a fixed-width text table; target and status columns only if a row has them."""
    judged = any(row.target or row.status for row in rows)
    widths = [
        max([len(heading), *(len(row.title) for row in rows)]),
        max([5, *(len(row.value) for row in rows)]),
        max([6, *(len(row.target) for row in rows)]),
    ]
    header = f"{heading:<{widths[0]}}  {'value':>{widths[1]}}"
    if judged:
        header += f"  {'target':<{widths[2]}}  status"
    lines = [header, "-" * len(header)]
    for row in rows:
        line = f"{row.title:<{widths[0]}}  {row.value:>{widths[1]}}"
        if judged:
            line += f"  {row.target:<{widths[2]}}  {row.status}"
        lines.append(line.rstrip())
    return "\n".join(lines)


# --------------------------------------------------------------------------- machine


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _cpu_model() -> str:
    for line in _read("/proc/cpuinfo").splitlines():
        if line.lower().startswith("model name"):
            return line.partition(":")[2].strip()
    return platform.processor() or "unknown"


def _memory_mib() -> int | None:
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return None


def _package(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _run(argv: list[str]) -> str | None:
    try:
        completed = subprocess.run(
            argv, cwd=REPO, capture_output=True, text=True, check=False, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    output = (completed.stdout or completed.stderr).strip()
    return output.splitlines()[0] if output else None


def machine() -> dict[str, Any]:
    """Where the run happened: hardware, OS, Python, key packages, load, git revision."""
    wrk = shutil.which("wrk")
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    git = shutil.which("git")
    return {
        "cpu": _cpu_model(),
        "logical_cpus": os.cpu_count(),
        "memory_mib": _memory_mib(),
        "os": f"{platform.system()} {platform.release()}",
        "distribution": next(
            (
                line.partition("=")[2].strip('"')
                for line in _read("/etc/os-release").splitlines()
                if line.startswith("PRETTY_NAME=")
            ),
            None,
        ),
        "python": platform.python_version(),
        "packages": {
            name: _package(name)
            for name in ("uvicorn", "starlette", "pydantic", "orjson", "jsonpatch", "immutables")
        },
        "wrk": _run([wrk, "-v"]) if wrk else None,
        "load_average": [round(value, 2) for value in load] if load else None,
        "git_commit": _run([git, "rev-parse", "--short", "HEAD"]) if git else None,
        "git_dirty": bool(_run([git, "status", "--porcelain"])) if git else None,
    }
