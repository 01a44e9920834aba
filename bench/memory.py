"""Memory and rebuild: the ledger rebuilt from N pods, and a server's RSS at rest holding them.

Both run in their own processes (:mod:`bench.rebuild`, :mod:`bench.rest`), so what the bench
itself holds never counts.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import orjson

from bench import loadgen, procstat, servers
from bench.configgen import compile_generated, config_yaml, generate_config
from bench.core import next_run
from bench.workload import build_workload

REPO: Final = Path(__file__).resolve().parent.parent
Progress = Callable[[str], None]
REST_TIMEOUT: Final = 900.0  # loading 10,000 tenants and listing 150,000 pods on a busy machine


def run_json(module: str, *options: str) -> dict[str, Any]:
    """``python -m MODULE OPTIONS...`` in a fresh process: the JSON it prints."""
    completed = subprocess.run(
        [sys.executable, "-m", module, *options],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"{module} failed: {completed.stderr.strip()[-800:]}")
    result: dict[str, Any] = orjson.loads(completed.stdout)
    return result


def rebuild(*, tenants: int, pods: int, seed: int) -> dict[str, Any]:
    """Time and peak RSS of a ledger rebuild, measured in a fresh process."""
    return run_json(
        "bench.rebuild", "--tenants", str(tenants), "--pods", str(pods), "--seed", str(seed)
    )


def rest(*, tenants: int, pods: int, seed: int, progress: Progress) -> dict[str, Any]:
    """RSS of a serving process with ``tenants`` tenants and ``pods`` tracked pods.

    Measured once ready, and again at rest after a short load (200 reviews/s for 3 s) has
    loaded every code path the requests take.
    """
    document = generate_config(tenants=tenants)
    generated = compile_generated(document)
    workload = build_workload(generated, pairs=100, seed=seed)
    with tempfile.TemporaryDirectory(prefix="tenantgate-bench-rest-") as tmp:
        workdir = Path(tmp)
        config = workdir / "tenantgate.yaml"
        config.write_text(config_yaml(document), encoding="utf-8")
        templates = workdir / "pairs.json"
        loadgen.write_templates([(p.mutate, p.validate) for p in workload.pairs], templates)
        argv = [
            sys.executable, "-m", "bench.rest",
            "--config", str(config), "--pods", str(pods), "--seed", str(seed),
        ]  # fmt: skip
        progress(f"memory: starting a server with {tenants} tenants and {pods} tracked pods")
        started = time.perf_counter()
        server = servers.start(
            "tenantgate-rest", argv, cert_dir=workdir / "certs", timeout=REST_TIMEOUT
        )
        try:
            startup = time.perf_counter() - started
            ready_kib = server.rss_kib()
            load = [
                sys.executable, "-m", "bench.loadgen",
                "--port", str(server.port), "--ca", str(server.ca_file),
                "--templates", str(templates), "--rate", "200", "--seconds", "3",
                "--run", str(next_run() + 77_000),
            ]  # fmt: skip
            completed = subprocess.run(
                load, cwd=REPO, capture_output=True, text=True, check=False, timeout=300
            )
            if completed.returncode != 0:
                raise RuntimeError(f"load generator failed: {completed.stderr.strip()[-500:]}")
            warm: dict[str, Any] = orjson.loads(completed.stdout)
            time.sleep(2)
            rest_kib = server.rss_kib()
            peak_kib = procstat.memory_kib(server.pid, "VmHWM")
        finally:
            server.stop()
    return {
        "tenants": tenants,
        "pods": pods,
        "startup_seconds": round(startup, 1),
        "rss_ready_mib": round(ready_kib / 1024, 1),
        "rss_at_rest_mib": round(rest_kib / 1024, 1),
        "peak_rss_mib": round(peak_kib / 1024, 1),
        "warm_load": {
            "requests": warm.get("requests"),
            "errors": warm.get("errors"),
            "p99_ms": warm.get("p99_ms"),
        },
    }
