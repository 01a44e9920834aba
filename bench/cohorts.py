"""Cohorts: CPU per mutate+validate pair with 1,000 tenants in 50 cohorts (depth 2).

The generated config (:mod:`bench.configgen`) of 1,000 tenants, and the same config with every
tenant in a cohort: 10 root cohorts, each the parent of 4 cohorts the tenants belong to (25
each: 100 members per tree, the pool a member's booking reads). Both are measured in the same
run, rounds interleaved (:func:`bench.core.measure_points`), on the same pods: the workload of
each is built with the same seed from its own compiled config. A member's guaranteed pod reads
its tree's ledgers; a pod of a burst-only tenant (every 4th: nothing guaranteed of ``pods``)
borrows ``pods`` from its tree's pool, the full borrowing rule. Target: within 1.2x of the
config without cohorts.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from bench.configgen import compile_generated, generate_config
from bench.core import Point, measure_points
from bench.stack import Pipeline, memory_ledger, offline_runtime
from bench.workload import SourcePod, build_workload

TENANTS: Final = 1_000
ROOTS: Final = 10
CHILDREN: Final = 4  # per root: 10 + 40 = 50 cohorts, depth 2


def with_cohorts(
    document: Mapping[str, Any], *, roots: int = ROOTS, children: int = CHILDREN
) -> dict[str, Any]:
    """``document`` with ``roots`` x (1 + ``children``) cohorts, every tenant in a child."""
    config = copy.deepcopy(dict(document))
    cohorts: dict[str, Any] = {}
    leaves: list[str] = []
    for r in range(roots):
        root = f"pool-{r:02d}"
        cohorts[root] = {"description": "generated root cohort"}
        for c in range(children):
            leaf = f"{root}-{c}"
            cohorts[leaf] = {"parent": root}
            leaves.append(leaf)
    for index, tenant in enumerate(config["tenants"].values()):
        tenant["cohort"] = leaves[index % len(leaves)]
    config["cohorts"] = cohorts
    return config


def measure(
    *,
    rounds: int,
    pairs: int,
    workload_pairs: int,
    seed: int,
    sources: Sequence[SourcePod],
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """µs per pair without and with cohorts, and their ratio."""
    plain = generate_config(tenants=TENANTS)
    grouped = with_cohorts(plain)
    points: list[Point] = []
    for label, document in (("without cohorts", plain), ("50 cohorts", grouped)):
        progress(f"cohorts: compiling {TENANTS} tenants ({label}) and building its workload")
        generated = compile_generated(document)
        workload = build_workload(generated, pairs=workload_pairs, seed=seed, sources=sources)
        runtime = offline_runtime(generated)
        points.append(
            Point(
                label=label,
                pipeline=Pipeline(runtime.guard),
                workload=workload,
                ledger=memory_ledger(runtime),
                ttl=generated.policy.reservation_ttl,
            )
        )
    progress(f"cohorts: measuring 2 points x {rounds} rounds x {pairs} pairs")
    measure_points(points, rounds=rounds, pairs_per_round=pairs, warmup=30)
    results = {}
    for point in points:
        if point.measurement.errors:
            raise RuntimeError(f"cohorts {point.label}: {point.measurement.errors[0]}")
        measured = point.measurement.to_json()
        results[point.label] = {
            key: measured[key] for key in ("us_per_pair", "mutate_us", "validate_us", "pairs")
        }
    base = results["without cohorts"]["us_per_pair"]
    mine = results["50 cohorts"]["us_per_pair"]
    # Every tenant is a member: its burst pods borrow from the tree's pool.
    borrowed = sum(1 for pair in points[1].workload.pairs if pair.tier == "burst")
    return {
        "tenants": TENANTS,
        "cohorts": ROOTS * (1 + CHILDREN),
        "depth": 2,
        "members_per_tree": TENANTS // ROOTS,
        "borrowing_pairs": borrowed,
        "workload_pairs": len(points[1].workload.pairs),
        "without": results["without cohorts"],
        "with": results["50 cohorts"],
        "ratio": round(mine / base, 3) if base else None,
    }


__all__ = ["measure", "with_cohorts"]
