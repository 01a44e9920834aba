"""Server under load: ``tenantgate serve`` against the no-op baseline, over TLS with keep-alive.

Both servers run at once on the same machine, each idle while the other is measured, and the
measurements alternate between them (saturation, then each fixed rate), so that a noisy
neighbour slows both alike. For every run the server process's CPU time (user + system, from
``/proc/<pid>/stat``) is divided by the reviews it answered.

The ledger stays bounded and never refuses: every tenant's quota is far above what a run books,
each pod gets unique request and pod uids (so every review is a first admission), and the
config's ``reservationTTLSeconds`` (30 s) lets the runtime's sweep expire the reservations, which
offline are never confirmed by a stored pod.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson

from bench import loadgen, servers, stats
from bench.configgen import config_yaml
from bench.core import next_run
from bench.servers import ServerProcess
from bench.workload import Workload
from bench.wrk import WrkResult, ensure_wrk, run_wrk, write_ids, write_templates

REPO: Final = Path(__file__).resolve().parent.parent
Progress = Callable[[str], None]
# Ids for this many pods per second of wrk run: above any saturated rate seen on 2 cores
# (the baseline answers ~5,000 reviews, 2,500 pods, per second; threads use them unevenly).
_PAIRS_PER_SECOND: Final = 4000


@dataclass(frozen=True, slots=True)
class LoadPlan:
    connections: int
    warmup_seconds: float
    saturation_seconds: float
    rate_seconds: float
    rates: tuple[int, ...]


def _cpu_us_per_review(cpu_seconds: float, reviews: int) -> float | None:
    return round(cpu_seconds / reviews * 1e6, 1) if reviews else None


class _Runner:
    def __init__(self, workdir: Path, workload: Workload, plan: LoadPlan, wrk: str) -> None:
        self.workdir = workdir
        self.plan = plan
        self.wrk = wrk
        self.lua_templates = workdir / "pairs.lua"
        write_templates(workload, self.lua_templates)
        self.json_templates = workdir / "pairs.json"
        loadgen.write_templates(
            [(p.mutate, p.validate) for p in workload.pairs], self.json_templates
        )

    def saturate(self, server: ServerProcess, seconds: float) -> tuple[WrkResult, dict[str, Any]]:
        run = next_run()
        ids = self.workdir / f"ids-{run}.txt"
        write_ids(ids, run=run, pairs=int(seconds * _PAIRS_PER_SECOND) + 1000)
        before = server.cpu()
        result = run_wrk(
            self.wrk,
            server.url,
            connections=self.plan.connections,
            seconds=seconds,
            templates=self.lua_templates,
            ids=ids,
        )
        _check_alive(server)
        cpu = (server.cpu() - before).total
        ids.unlink()
        figures = result.to_json()
        figures["server_cpu_seconds"] = round(cpu, 3)
        figures["cpu_us_per_review"] = _cpu_us_per_review(cpu, result.requests)
        return result, figures

    def fixed_rate(self, server: ServerProcess, rate: int) -> dict[str, Any]:
        argv = [
            sys.executable,
            "-m",
            "bench.loadgen",
            "--port",
            str(server.port),
            "--ca",
            str(server.ca_file),
            "--templates",
            str(self.json_templates),
            "--rate",
            str(rate),
            "--seconds",
            str(self.plan.rate_seconds),
            "--connections",
            str(self.plan.connections),
            "--run",
            str(next_run() + 1000 * rate),
        ]
        before = server.cpu()
        completed = subprocess.run(
            argv, cwd=REPO, capture_output=True, text=True, check=False, timeout=600
        )
        _check_alive(server)
        cpu = (server.cpu() - before).total
        if completed.returncode != 0:
            raise RuntimeError(f"load generator failed: {completed.stderr.strip()[-500:]}")
        figures: dict[str, Any] = orjson.loads(completed.stdout)
        figures["server_cpu_seconds"] = round(cpu, 3)
        figures["cpu_us_per_review"] = _cpu_us_per_review(cpu, int(figures["requests"]))
        return figures


def _check_alive(server: ServerProcess) -> None:
    if not server.alive():
        raise servers.ServerError(
            f"{server.name} exited with {server.process.returncode} under load:\n{server.output()}"
        )


def _order(names: Sequence[str], turn: int) -> list[str]:
    # Alternate who goes first, so that neither always runs right after the other's load.
    return list(names) if turn % 2 == 0 else list(reversed(names))


def run_server_load(
    workload: Workload,
    config: Mapping[str, Any],
    *,
    plan: LoadPlan,
    progress: Progress,
) -> dict[str, Any]:
    """Measure both servers; returns the ``server`` section of the results."""
    wrk = ensure_wrk(progress)
    with tempfile.TemporaryDirectory(prefix="tenantgate-bench-") as tmp:
        workdir = Path(tmp)
        config_path = workdir / "tenantgate.yaml"
        config_path.write_text(config_yaml(config), encoding="utf-8")
        cert_dir = workdir / "certs"
        runner = _Runner(workdir, workload, plan, wrk)
        progress("server: starting tenantgate serve --offline and the baseline")
        started: dict[str, ServerProcess] = {}
        try:
            # One after the other: the first creates the TLS material both use.
            started["tenantgate"] = servers.start_tenantgate(config_path, cert_dir=cert_dir)
            started["baseline"] = servers.start_baseline(cert_dir=cert_dir)
            return _measure(runner, started, plan=plan, progress=progress)
        finally:
            for server in started.values():
                server.stop()


def _measure(
    runner: _Runner,
    started: dict[str, ServerProcess],
    *,
    plan: LoadPlan,
    progress: Progress,
) -> dict[str, Any]:
    names = ("tenantgate", "baseline")
    rss_idle = {name: round(server.rss_kib() / 1024, 1) for name, server in started.items()}
    for name in names:
        progress(f"server: warming up {name} ({plan.warmup_seconds:.0f} s)")
        runner.saturate(started[name], plan.warmup_seconds)

    saturation: dict[str, dict[str, Any]] = {}
    for name in _order(names, 0):
        progress(f"server: saturating {name} ({plan.saturation_seconds:.0f} s, wrk)")
        _, saturation[name] = runner.saturate(started[name], plan.saturation_seconds)

    rates: dict[str, dict[str, dict[str, Any]]] = {}
    for turn, rate in enumerate(plan.rates, start=1):
        rates[str(rate)] = {}
        for name in _order(names, turn):
            progress(f"server: {name} at {rate} reviews/s ({plan.rate_seconds:.0f} s)")
            rates[str(rate)][name] = runner.fixed_rate(started[name], rate)

    for name, server in started.items():
        if not server.alive():
            raise servers.ServerError(f"{name} died during the load:\n{server.output()}")
    rss_loaded = {name: round(server.rss_kib() / 1024, 1) for name, server in started.items()}

    tenantgate, baseline = saturation["tenantgate"], saturation["baseline"]
    errors = int(tenantgate["errors"]) + sum(
        int(runs["tenantgate"]["errors"]) for runs in rates.values()
    )
    return {
        "throughput_rps": tenantgate["throughput_rps"],
        "baseline_throughput_rps": baseline["throughput_rps"],
        "throughput_ratio": _round(
            stats.ratio(tenantgate["throughput_rps"], baseline["throughput_rps"])
        ),
        "cpu_us_per_review": tenantgate["cpu_us_per_review"],
        "baseline_cpu_us_per_review": baseline["cpu_us_per_review"],
        "cpu_ratio": _round(
            stats.ratio(tenantgate["cpu_us_per_review"], baseline["cpu_us_per_review"])
        ),
        "p99_ms": {rate: runs["tenantgate"].get("p99_ms") for rate, runs in rates.items()},
        "baseline_p99_ms": {rate: runs["baseline"].get("p99_ms") for rate, runs in rates.items()},
        "errors": errors,
        "connections": plan.connections,
        "saturation": saturation,
        "rates": rates,
        "rss_idle_mib": rss_idle,
        "rss_after_load_mib": rss_loaded,
        "plan": {
            "saturation_seconds": plan.saturation_seconds,
            "rate_seconds": plan.rate_seconds,
            "warmup_seconds": plan.warmup_seconds,
        },
    }


def _round(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None
