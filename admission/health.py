"""Liveness and readiness: named readiness checks and the ``/healthz`` and ``/readyz`` routes.

Readiness starts false: the required checks (``config`` and ``certs`` by default) are pending
until whoever loads them marks them. Other checks (e.g. ``cluster``) join when first set, or as
probes evaluated on each ``/readyz``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

logger = logging.getLogger(__name__)

REQUIRED_CHECKS = ("config", "certs")
PENDING = "not loaded yet"


@dataclass(frozen=True, slots=True)
class Check:
    """The state of one readiness check; ``detail`` says why, for whoever reads ``/readyz``."""

    ok: bool
    detail: str = ""


Probe = Callable[[], Check]
"""Evaluated on each readiness report, in the event loop: it must be cheap and not block."""


@dataclass(frozen=True, slots=True)
class ReadinessReport:
    ready: bool
    checks: Mapping[str, Check]

    def to_json(self) -> dict[str, Any]:
        return {
            "ready": self.ready,
            "checks": {
                name: {"ok": check.ok, "detail": check.detail}
                for name, check in sorted(self.checks.items())
            },
        }


class Readiness:
    """Named checks, each ok or not with a detail; ready when every check is ok.

    Safe to update from any thread (the certificate watcher or a config reloader may run in one).
    """

    def __init__(self, *, required: Iterable[str] = REQUIRED_CHECKS) -> None:
        self._lock = threading.Lock()
        self._checks: dict[str, Check] = {
            name: Check(ok=False, detail=PENDING) for name in required
        }
        self._probes: dict[str, Probe] = {}

    def set(self, name: str, *, ok: bool, detail: str = "") -> None:
        """Record the state of check ``name`` (adding it if new); replaces a probe of that name."""
        with self._lock:
            previous = self._checks.get(name)
            self._checks[name] = Check(ok=ok, detail=detail)
            self._probes.pop(name, None)
        if previous is None or previous.ok != ok:
            logger.log(
                logging.INFO if ok else logging.WARNING,
                "readiness check %s is %s%s",
                name,
                "ok" if ok else "failing",
                f": {detail}" if detail else "",
            )

    def mark_ok(self, name: str, detail: str = "") -> None:
        self.set(name, ok=True, detail=detail)

    def mark_failed(self, name: str, detail: str) -> None:
        self.set(name, ok=False, detail=detail)

    def add_probe(self, name: str, probe: Probe) -> None:
        """Compute check ``name`` by calling ``probe`` on every report (replaces a set state)."""
        with self._lock:
            self._probes[name] = probe
            self._checks.pop(name, None)

    def report(self) -> ReadinessReport:
        with self._lock:
            checks = dict(self._checks)
            probes = list(self._probes.items())
        for name, probe in probes:
            checks[name] = _run_probe(name, probe)
        ready = all(check.ok for check in checks.values())
        return ReadinessReport(ready=ready, checks=MappingProxyType(checks))

    @property
    def ready(self) -> bool:
        return self.report().ready


def _run_probe(name: str, probe: Probe) -> Check:
    try:
        return probe()
    except Exception as exc:
        logger.exception("readiness probe %s raised", name)
        return Check(ok=False, detail=f"probe raised {type(exc).__name__}")


def health_routes(readiness: Readiness) -> list[Route]:
    """``GET /healthz`` (alive while the process serves) and ``GET /readyz``."""

    async def healthz(request: Request) -> Response:
        return JSONResponse({"alive": True})

    async def readyz(request: Request) -> Response:
        report = readiness.report()
        return JSONResponse(report.to_json(), status_code=200 if report.ready else 503)

    return [
        Route("/healthz", healthz, methods=["GET"], name="healthz"),
        Route("/readyz", readyz, methods=["GET"], name="readyz"),
    ]
