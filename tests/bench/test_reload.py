"""Tests for bench.reload: the event-loop lag of a config reload, measured on a real runtime."""

from __future__ import annotations

import asyncio

from bench import reload


def test_a_reload_is_measured_from_the_write_to_the_swap() -> None:
    result = reload.run(tenants=12, pods=0, seed=1, idle_seconds=0.2)

    assert result["tenants"] == 12
    assert result["config_bytes"] > 0
    assert result["reload_seconds"] > 0
    assert result["worst_lag_ms"] >= 0
    assert result["idle_worst_lag_ms"] >= 0


def test_the_monitor_sees_a_blocked_loop() -> None:
    async def blocked() -> list[float]:
        monitor = reload.LagMonitor()
        monitor.start()
        await asyncio.sleep(0.01)
        monitor.take()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 0.05
        while loop.time() < deadline:  # holds the loop, as a long GIL hold would
            pass
        await asyncio.sleep(0.01)
        lags = monitor.take()
        await monitor.stop()
        return lags

    assert max(asyncio.run(blocked())) >= 0.05 - reload.TICK_SECONDS
