"""Scale curves: CPU per pair as the config grows (tenants, rules) and as the ledger grows.

Each curve is measured with its points' rounds interleaved (see :mod:`bench.core`). Live pods
are put in the ledger the way the server does it when it lists the cluster's pods: through
:meth:`tenants.controller.LedgerController.replace_pods`, with the facts read from stored pods
by :func:`tenants.controller.pod_facts`.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from admission.runtime import Runtime
from bench import stats
from bench.configgen import GeneratedPolicy, generated_policy
from bench.core import Point, measure_points, next_run
from bench.stack import Pipeline, memory_ledger, offline_runtime, settle
from bench.workload import NOW, SourcePod, Workload, build_workload, pair_ids
from tenants.controller import AmountInterner, PodFacts, pod_facts

logger = logging.getLogger(__name__)

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Curve:
    """One curve: x values (tenants, rules or live pods) and µs per pair at each."""

    name: str
    unit: str
    points: tuple[tuple[int, float], ...]
    details: tuple[dict[str, Any], ...]

    @property
    def ratio(self) -> float | None:
        """Largest over smallest point."""
        return stats.spread([us for _, us in self.points])

    def to_json(self) -> dict[str, Any]:
        ratio = self.ratio
        return {
            "unit": self.unit,
            "points": [
                {"x": x, "us_per_pair": round(us, 1), **detail}
                for (x, us), detail in zip(self.points, self.details, strict=True)
            ],
            "ratio": round(ratio, 3) if ratio is not None else None,
        }


def _point(label: str, generated: GeneratedPolicy, workload: Workload) -> tuple[Point, Runtime]:
    runtime = offline_runtime(generated)
    point = Point(
        label=label,
        pipeline=Pipeline(runtime.guard),
        workload=workload,
        ledger=memory_ledger(runtime),
        ttl=generated.policy.reservation_ttl,
    )
    return point, runtime


def _measure(
    name: str,
    unit: str,
    points: Sequence[tuple[int, Point]],
    *,
    rounds: int,
    pairs: int,
    warmup: int,
    progress: Progress,
) -> Curve:
    progress(f"{name}: measuring {len(points)} points x {rounds} rounds x {pairs} pairs")
    measure_points(
        [point for _, point in points], rounds=rounds, pairs_per_round=pairs, warmup=warmup
    )
    details = []
    for _, point in points:
        if point.measurement.errors:
            raise RuntimeError(f"{name} {point.label}: {point.measurement.errors[0]}")
        result = point.measurement.to_json()
        details.append(
            {
                key: result[key]
                for key in ("round_us", "pairs", "gc_share", "mutate_us", "validate_us")
            }
        )
    return Curve(
        name,
        unit,
        tuple((x, point.measurement.us_per_pair) for x, point in points),
        tuple(details),
    )


def tenants_curve(
    values: Sequence[int],
    *,
    rules: int | None,
    workload_pairs: int,
    seed: int,
    sources: Sequence[SourcePod],
    rounds: int,
    pairs: int,
    warmup: int,
    progress: Progress,
) -> Curve:
    points = []
    for count in values:
        progress(f"tenants curve: compiling {count} tenants and building its workload")
        generated = generated_policy(tenants=count, rules=rules)
        workload = build_workload(generated, pairs=workload_pairs, seed=seed, sources=sources)
        points.append((count, _point(f"{count} tenants", generated, workload)[0]))
    return _measure(
        "tenants curve", "tenants", points,
        rounds=rounds, pairs=pairs, warmup=warmup, progress=progress,
    )  # fmt: skip


def rules_curve(
    values: Sequence[int],
    *,
    tenants: int,
    workload_pairs: int,
    seed: int,
    sources: Sequence[SourcePod],
    rounds: int,
    pairs: int,
    warmup: int,
    progress: Progress,
) -> Curve:
    points = []
    for count in values:
        progress(f"rules curve: compiling {count} rules and building its workload")
        generated = generated_policy(tenants=tenants, rules=count)
        workload = build_workload(generated, pairs=workload_pairs, seed=seed, sources=sources)
        points.append((generated.rules, _point(f"{count} rules", generated, workload)[0]))
    return _measure(
        "rules curve", "rules", points,
        rounds=rounds, pairs=pairs, warmup=warmup, progress=progress,
    )  # fmt: skip


def live_pod_facts(workload: Workload, count: int, *, run: int) -> Iterator[PodFacts]:
    """Facts of ``count`` distinct stored pods, spread over the workload's pods and tenants.

    The facts of each workload pod are read once from its stored JSON (as the informer reads
    a listed pod); the others are copies with their own uid, name and reservation, sharing the
    request mapping as the controller's interner makes them share it.
    """
    interner = AmountInterner()
    base: list[PodFacts] = []
    for index, pair in enumerate(workload.pairs):
        ids = pair_ids(run, index)
        stored = orjson.loads(pair.stored_pod(ids, resource_version=index + 1))
        facts = pod_facts(stored, intern=interner)
        if facts is None:
            raise RuntimeError(f"{pair.source}: a stored pod without uid or namespace")
        base.append(facts)
    for index in range(count):
        template = base[index % len(base)]
        ids = pair_ids(run, len(base) + index)
        yield dataclasses.replace(
            template,
            uid=ids.pod_uid,
            name=f"{template.name[:-5]}{ids.suffix}",
            resource_version=str(1000 + index),
            reservation=ids.reservation_id,
        )


def ledger_curve(
    values: Sequence[int],
    *,
    generated: GeneratedPolicy,
    workload: Workload,
    rounds: int,
    pairs: int,
    warmup: int,
    progress: Progress,
) -> Curve:
    points = []
    for count in values:
        progress(f"ledger curve: listing {count} live pods into the controller")
        point, runtime = _point(f"{count} live pods", generated, workload)
        settle(
            runtime.controller.replace_pods(
                live_pod_facts(workload, count, run=next_run()), now=NOW, initial=True
            )
        )
        charged = sum(len(ledger.charges) for ledger in point.ledger.snapshot().values())
        if charged != count:
            raise RuntimeError(f"ledger curve: {charged} pods charged, expected {count}")
        points.append((count, point))
    return _measure(
        "ledger curve", "live pods", points,
        rounds=rounds, pairs=pairs, warmup=warmup, progress=progress,
    )  # fmt: skip
