"""Several replicas: throughput and compare-and-swap retries of the shared ledger.

Runs the scenario of ``tests/integration/test_ha.py`` (the real control plane, tenantgate
processes behind its TCP balancer, concurrent pod creates for one tenant whose ceiling admits
exactly N) in a subprocess per variant, each starting its own control plane, and reports
each one's creates per second and ledger counters: one replica on the memory backend (the
baseline), three replicas sharing ``TenantLedger`` objects, and three replicas under conflict
storms.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    backend: str
    replicas: int
    storms: int = 0

    def argv(self, *, pods: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "tests.integration.test_ha",
            "--json",
            f"--pods={pods}",
            f"--backend={self.backend}",
            f"--replicas={self.replicas}",
            f"--storms={self.storms}",
        ]


VARIANTS = (
    Variant("memory, 1 replica", "memory", 1),
    Variant("kubernetes, 3 replicas", "kubernetes", 3),
    Variant("kubernetes, 3 replicas, 4 conflict storms", "kubernetes", 3, storms=4),
)


def run_variant(variant: Variant, *, pods: int) -> dict[str, Any]:
    """One scenario run; its summary (``admitted``, ``throughput_rps``, ``cas_conflicts``...)."""
    completed = subprocess.run(
        variant.argv(pods=pods),
        cwd=ROOT,
        capture_output=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
    )
    lines = [line for line in completed.stdout.splitlines() if line.startswith(b"{")]
    if completed.returncode != 0 or not lines:
        tail = completed.stderr.decode(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"{variant.name}: exit {completed.returncode}: {' | '.join(tail)}")
    summary: dict[str, Any] = orjson.loads(lines[-1])
    return summary


def measure(*, quick: bool) -> dict[str, Any]:
    """Every variant (the storm one only in a full run), plus the replicas/memory ratio."""
    pods = 300 if quick else 600
    variants = VARIANTS[:2] if quick else VARIANTS
    runs = {variant.name: run_variant(variant, pods=pods) for variant in variants}
    baseline = runs[VARIANTS[0].name]["throughput_rps"]
    replicated = runs[VARIANTS[1].name]["throughput_rps"]
    return {
        "pods": pods,
        "runs": runs,
        "throughput_ratio": round(replicated / baseline, 3) if baseline else None,
    }
