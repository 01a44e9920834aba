"""Tests for admission.health: readiness checks and the /healthz and /readyz routes."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest
from starlette.applications import Starlette

from admission.health import PENDING, Check, Readiness, health_routes


def call(readiness: Readiness, method: str, path: str) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=Starlette(routes=health_routes(readiness)))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.request(method, path)

    return asyncio.run(go())


def test_starts_not_ready_until_config_and_certs_are_loaded() -> None:
    readiness = Readiness()

    report = readiness.report()

    assert report.ready is False
    assert dict(report.checks) == {
        "config": Check(ok=False, detail=PENDING),
        "certs": Check(ok=False, detail=PENDING),
    }


def test_ready_when_every_check_is_ok() -> None:
    readiness = Readiness()
    readiness.mark_ok("config", "examples/tenantgate.yaml")
    assert readiness.ready is False

    readiness.mark_ok("certs", "valid until 2026-03-14")

    assert readiness.ready is True


def test_a_new_failing_check_makes_it_unready() -> None:
    readiness = Readiness()
    readiness.mark_ok("config")
    readiness.mark_ok("certs")

    readiness.mark_failed("cluster", "pod list not synced")

    report = readiness.report()
    assert report.ready is False
    assert report.checks["cluster"] == Check(ok=False, detail="pod list not synced")


def test_custom_required_checks() -> None:
    assert Readiness(required=()).ready is True
    assert Readiness(required=("cluster",)).report().checks.keys() == {"cluster"}


def test_probe_is_evaluated_on_every_report() -> None:
    readiness = Readiness(required=())
    answers = iter([Check(ok=True, detail="1"), Check(ok=False, detail="2")])
    readiness.add_probe("certs", lambda: next(answers))

    assert readiness.report().checks["certs"] == Check(ok=True, detail="1")
    assert readiness.report().checks["certs"] == Check(ok=False, detail="2")


def test_probe_replaces_a_set_state_and_set_replaces_a_probe() -> None:
    readiness = Readiness()
    readiness.add_probe("certs", lambda: Check(ok=True, detail="probed"))
    assert readiness.report().checks["certs"].detail == "probed"

    readiness.mark_failed("certs", "expired")

    assert readiness.report().checks["certs"] == Check(ok=False, detail="expired")


def test_failing_probe_is_not_ok(caplog: pytest.LogCaptureFixture) -> None:
    readiness = Readiness(required=())

    def broken() -> Check:
        raise OSError("unreadable")

    readiness.add_probe("certs", broken)

    assert readiness.report().checks["certs"] == Check(ok=False, detail="probe raised OSError")
    assert "readiness probe certs raised" in caplog.text


def test_state_changes_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="admission.health")
    readiness = Readiness()

    readiness.mark_ok("config", "loaded")
    readiness.mark_ok("config", "reloaded")  # no change of state: no line
    readiness.mark_failed("config", "invalid")

    assert [r.getMessage() for r in caplog.records] == [
        "readiness check config is ok: loaded",
        "readiness check config is failing: invalid",
    ]


def test_updates_from_threads() -> None:
    readiness = Readiness(required=())

    def mark(index: int) -> None:
        for _ in range(200):
            readiness.mark_ok(f"check-{index}")
            readiness.report()

    threads = [threading.Thread(target=mark, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert set(readiness.report().checks) == {f"check-{i}" for i in range(4)}
    assert readiness.ready is True


def test_healthz_answers_while_serving() -> None:
    response = call(Readiness(), "GET", "/healthz")

    assert response.status_code == 200
    assert response.json() == {"alive": True}


def test_readyz_is_503_with_details_until_ready() -> None:
    readiness = Readiness()
    readiness.mark_ok("config", "loaded")

    response = call(readiness, "GET", "/readyz")

    assert response.status_code == 503
    assert response.json() == {
        "ready": False,
        "checks": {
            "certs": {"ok": False, "detail": PENDING},
            "config": {"ok": True, "detail": "loaded"},
        },
    }

    readiness.mark_ok("certs", "ok")
    response = call(readiness, "GET", "/readyz")

    assert response.status_code == 200
    assert response.json()["ready"] is True


def test_health_routes_are_get_only() -> None:
    readiness = Readiness()

    assert call(readiness, "POST", "/readyz").status_code == 405
    assert call(readiness, "HEAD", "/healthz").status_code == 200
