"""Event-loop lag while a server reloads a large config, in its own process.

``python -m bench.reload --tenants N [--pods P]`` builds the runtime as ``tenantgate serve
--config FILE --offline`` does (:func:`admission.runtime.build_runtime`), optionally hands it P
stored pods as the first cluster sync would (as :mod:`bench.rest` does), starts its background
work, and measures how late a task that sleeps 1 ms at a time wakes up:

* for a few seconds with nothing happening (what the machine itself costs);
* from the moment a changed config (another ``reservationTTLSeconds``) is written until the
  runtime serves it: the file is read, validated and compiled in a child process, and the
  policy unpickled, swapped in and the old one freed in the serving one.

A review that arrives meanwhile waits at most about the worst lag before it is handled. Full
collections of the cyclic garbage collector that ran during the reload are timed too.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import orjson

from admission.runtime import Timings, build_runtime
from admission.settings import Settings
from bench.configgen import GeneratedPolicy, config_yaml, generate_config
from bench.memory import run_json
from bench.rebuild import Timer, pod_pages, read_pods
from bench.stack import settle
from bench.workload import build_workload
from tenants.kube.informer import release_free_memory

TICK_SECONDS: Final = 0.001
IDLE_SECONDS: Final = 3.0
RELOAD_TIMEOUT: Final = 600.0  # a 10,000-tenant config on a busy machine
POLL_SECONDS: Final = 0.05
Progress = Callable[[str], None]


class LagMonitor:
    """A task that sleeps :data:`TICK_SECONDS` at a time and keeps how late each wake-up is."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(TICK_SECONDS)
            self.lags.append(max(0.0, time.perf_counter() - before - TICK_SECONDS))

    def take(self) -> list[float]:
        """The lags since the last call."""
        taken, self.lags = self.lags, []
        return taken

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


class FullCollections:
    """How long each full (generation 2) collection took while installed."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._started = 0.0

    def __enter__(self) -> FullCollections:
        gc.callbacks.append(self._on_gc)
        return self

    def __exit__(self, *_: object) -> None:
        gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds.append(time.perf_counter() - self._started)


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def _add_pods(runtime: Any, *, pods: int, seed: int) -> None:
    policy = runtime.policy
    generated = GeneratedPolicy(
        policy, {}, len(policy.tenants), len(policy.classifier.config.rules)
    )
    workload = build_workload(generated, pairs=200, seed=seed)
    timer = Timer()
    facts = read_pods(pod_pages(workload, generated, pods=pods, run=seed), timer=timer)
    timer.close()
    settle(runtime.controller.replace_pods(facts, now=time.time(), initial=True))
    del facts, workload
    gc.collect()
    release_free_memory()


async def _reload(
    runtime: Any, config: Path, staged: Path, *, ttl: int, idle_seconds: float
) -> dict[str, Any]:
    await runtime.startup()
    monitor = LagMonitor()
    monitor.start()
    try:
        await asyncio.sleep(idle_seconds)
        idle = monitor.take()
        with FullCollections() as collections:
            started = time.perf_counter()
            # As a ConfigMap update: the new file appears whole.
            await asyncio.to_thread(staged.replace, config)
            deadline = started + RELOAD_TIMEOUT
            while runtime.policy.reservation_ttl != ttl:
                if runtime.config_error is not None:
                    raise RuntimeError(f"the reload was refused: {runtime.config_error}")
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"no reload within {RELOAD_TIMEOUT:.0f} s")
                await asyncio.sleep(POLL_SECONDS)
            # What the reload leaves to do after the swap (freeing the old policy, trimming).
            await asyncio.sleep(1.0)
            seconds = time.perf_counter() - started
            during = monitor.take()
    finally:
        await monitor.stop()
        await runtime.shutdown()
    return {
        "reload_seconds": round(seconds, 2),
        "worst_lag_ms": _ms(max(during, default=0.0)),
        "late_ticks_over_10ms": sum(lag > 0.010 for lag in during),
        "idle_worst_lag_ms": _ms(max(idle, default=0.0)),
        "full_collections": len(collections.seconds),
        "worst_full_collection_ms": _ms(max(collections.seconds, default=0.0)),
    }


def run(
    *, tenants: int, pods: int, seed: int, idle_seconds: float = IDLE_SECONDS
) -> dict[str, Any]:
    document = generate_config(tenants=tenants)
    with tempfile.TemporaryDirectory(prefix="tenantgate-bench-reload-") as tmp:
        config = Path(tmp) / "tenantgate.yaml"
        config.write_text(config_yaml(document), encoding="utf-8")
        # The changed file, written in advance: writing it is not the server's work.
        ttl = document["reservationTTLSeconds"] + 1
        staged = Path(tmp) / "tenantgate.yaml.new"
        staged.write_text(config_yaml(dict(document, reservationTTLSeconds=ttl)), "utf-8")
        settings = Settings(config=config, offline=True, cert_dir=Path(tmp) / "certs")
        runtime = build_runtime(settings, timings=Timings(config_poll_seconds=POLL_SECONDS))
        if pods:
            _add_pods(runtime, pods=pods, seed=seed)
        size = staged.stat().st_size
        result = asyncio.run(_reload(runtime, config, staged, ttl=ttl, idle_seconds=idle_seconds))
    return {"tenants": tenants, "pods": pods, "config_bytes": size, **result}


def measure(*, tenants: int, pods: int, seed: int, progress: Progress) -> dict[str, Any]:
    """:func:`run` in a fresh process, so that nothing the bench holds counts."""
    progress(f"reload: event-loop lag while a {tenants}-tenant config reloads ({pods} pods)")
    return run_json(
        "bench.reload", "--tenants", str(tenants), "--pods", str(pods), "--seed", str(seed)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.reload", description=__doc__)
    parser.add_argument("--tenants", type=int, default=10_000)
    parser.add_argument("--pods", type=int, default=0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    result = run(tenants=args.tenants, pods=args.pods, seed=args.seed)
    sys.stdout.write(orjson.dumps(result).decode() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
