"""``python -m bench [--quick]``: run every benchmark, print the table, write the JSON.

Phases: workload, core (in process), server (tenantgate serve vs the baseline under load),
scale (curves), memory (rebuild, RSS at rest), ha (replicas), reload (event-loop lag while a
large config reloads), queue, page (the status page at 10,000 tenants, in Chromium), cluster
(pod creates through a real kube-apiserver with and without tenantgate's webhooks), cohorts
(CPU per pair with 1,000 tenants in 50 cohorts against the same tenants without), groups (a
pod group member's admission CPU against a plain pod's, booking and releasing a 64-member
group). A phase
that fails is reported and the others still run; the exit code is 1 if any phase failed
(missed targets do not fail a run: they are what the run is for).
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import orjson

from bench import cluster as cluster_bench
from bench import cohorts as cohorts_bench
from bench import core, ha, memory, reload, report, scale, stats
from bench import groups as groups_bench
from bench import queue as queue_bench
from bench import statuspage as page_bench
from bench.configgen import compile_generated, generate_config
from bench.core import Point
from bench.serverload import LoadPlan, run_server_load
from bench.stack import Pipeline, memory_ledger, offline_runtime
from bench.workload import Workload, build_workload, policy_sources
from tenants.ledger import MemoryLedger

RESULTS: Final = Path(__file__).resolve().parent / "results" / "latest.json"
PHASES: Final = (
    "core",
    "server",
    "scale",
    "memory",
    "ha",
    "reload",
    "queue",
    "page",
    "cluster",
    "cohorts",
    "groups",
)


@dataclass(frozen=True, slots=True)
class Sizes:
    """How much each phase does; ``quick`` keeps the whole run under two minutes."""

    tenants: int  # of the config used by core and server
    workload_pairs: int
    core_rounds: int
    core_pairs: int
    profile_pairs: int
    load: LoadPlan
    curve_pairs: int  # distinct pods of each curve point's workload
    curve_rounds: int
    curve_round_pairs: int
    tenant_points: tuple[int, ...]
    rule_points: tuple[int, ...]
    ledger_points: tuple[int, ...]
    ledger_tenants: int
    rebuild_pods: int
    rest_tenants: int
    rest_pods: int
    reload_tenants: int
    reload_pods: int  # tracked pods of a second reload run (0: none)


FULL: Final = Sizes(
    tenants=100,
    workload_pairs=400,
    core_rounds=7,
    core_pairs=300,
    profile_pairs=300,
    load=LoadPlan(
        connections=8,
        warmup_seconds=3,
        saturation_seconds=10,
        rate_seconds=10,
        rates=(200, 500, 1000),
    ),
    curve_pairs=200,
    curve_rounds=5,
    curve_round_pairs=200,
    tenant_points=(10, 100, 1_000, 10_000),
    rule_points=(10, 100, 1_000),
    ledger_points=(1_000, 10_000, 150_000),
    ledger_tenants=10,
    rebuild_pods=150_000,
    rest_tenants=10_000,
    rest_pods=150_000,
    reload_tenants=10_000,
    reload_pods=150_000,
)
QUICK: Final = Sizes(
    tenants=100,
    workload_pairs=150,
    core_rounds=5,
    core_pairs=150,
    profile_pairs=150,
    load=LoadPlan(
        connections=8,
        warmup_seconds=1,
        saturation_seconds=3,
        rate_seconds=3,
        rates=(200, 500, 1000),
    ),
    curve_pairs=60,
    curve_rounds=3,
    curve_round_pairs=80,
    tenant_points=(10, 100, 1_000, 10_000),
    rule_points=(10, 100, 1_000),
    ledger_points=(1_000, 10_000, 150_000),
    ledger_tenants=10,
    rebuild_pods=10_000,
    rest_tenants=1_000,
    rest_pods=10_000,
    reload_tenants=10_000,
    reload_pods=0,
)


class Progress:
    """One line per step on stderr, with the time since the start."""

    def __init__(self) -> None:
        self.started = time.perf_counter()

    def __call__(self, message: str) -> None:
        elapsed = time.perf_counter() - self.started
        print(f"[{elapsed:6.1f}s] {message}", file=sys.stderr, flush=True)


def _workload_summary(workload: Workload, sources: int) -> dict[str, Any]:
    summary: dict[str, Any] = {"pairs": len(workload), "fixture_pods": sources}
    for endpoint in ("mutate", "validate", "stored"):
        sizes = workload.sizes(endpoint)
        summary[f"{endpoint}_bytes"] = {
            "min": min(sizes),
            "mean": round(stats.mean(sizes)),
            "max": max(sizes),
        }
    summary["profiles"] = workload.histogram("profile")
    summary["tiers"] = workload.histogram("tier")
    summary["tenants"] = len({pair.tenant for pair in workload.pairs})
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller counts, shorter runs")
    parser.add_argument(
        "--only",
        metavar="PHASES",
        help=f"comma-separated subset of {','.join(PHASES)} (default: all)",
    )
    parser.add_argument("--output", type=Path, default=RESULTS, help=f"JSON file ({RESULTS})")
    parser.add_argument("--seed", type=int, default=20251121)
    args = parser.parse_args(argv)
    phases = PHASES if not args.only else tuple(p.strip() for p in args.only.split(","))
    unknown = set(phases) - set(PHASES)
    if unknown:
        parser.error(f"unknown phases: {', '.join(sorted(unknown))}")
    sizes = QUICK if args.quick else FULL
    progress = Progress()
    results: dict[str, Any] = {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "seed": args.seed,
        "machine": report.machine(),
        "errors": {},
    }
    figures: dict[str, float | None] = {}
    extra_rows: list[report.Row] = []
    where_rows: list[report.Row] = []

    progress(
        f"workload: {sizes.workload_pairs} pods from the fixtures over {sizes.tenants} tenants"
    )
    document = generate_config(tenants=sizes.tenants)
    generated = compile_generated(document)
    sources = policy_sources(generated)
    workload = build_workload(
        generated, pairs=sizes.workload_pairs, seed=args.seed, sources=sources
    )
    results["workload"] = _workload_summary(workload, len(sources))

    def phase(name: str, body: Callable[[], None]) -> None:
        if name not in phases:
            return
        try:
            body()
        except Exception as exc:
            progress(f"{name}: FAILED: {type(exc).__name__}: {exc}")
            results["errors"][name] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc(file=sys.stderr)

    def run_core() -> None:
        progress(f"core: {sizes.core_rounds} rounds x {sizes.core_pairs} pairs, in process")
        runtime = offline_runtime(generated)
        point = Point("core", Pipeline(runtime.guard), workload, memory_ledger(runtime), 30.0)
        base = Point("baseline", core.BaselinePipeline(), workload, MemoryLedger(), 30.0)
        core.measure_points(
            [point, base], rounds=sizes.core_rounds, pairs_per_round=sizes.core_pairs, warmup=50
        )
        for measured_point in (point, base):
            if measured_point.measurement.errors:
                raise RuntimeError(
                    f"{measured_point.label}: {measured_point.measurement.errors[0]}"
                )
        measured = point.measurement.to_json()
        base_us = base.measurement.us_per_pair
        base_ratio = stats.robust_centre(core.round_ratios(point.measurement, base.measurement))
        progress("core: the same pairs through the whole ASGI app")
        asgi = core.measure_asgi(
            runtime.app,
            workload,
            ledger=memory_ledger(runtime),
            ttl=30.0,
            rounds=max(3, sizes.core_rounds - 2),
            pairs=sizes.core_pairs,
        )
        progress(f"core: timing each step, then profiling {sizes.profile_pairs} pairs")
        stages = core.stage_costs(point, policy=generated.policy, pairs=sizes.profile_pairs)
        profile = core.profile_points(point, pairs=sizes.profile_pairs)
        results["core_us_per_pair"] = measured["us_per_pair"]
        results["core"] = {
            **measured,
            "baseline_us_per_pair": round(base_us, 1),
            "baseline_round_us": [round(value, 1) for value in base.measurement.round_us],
            "ratio_to_baseline": round(base_ratio, 2),
            "asgi": asgi.to_json(),
            "stages_us": stages,
            "profile": profile,
        }
        figures["core_us_per_pair"] = measured["us_per_pair"]
        extra_rows.extend(
            [
                report.Row(
                    "core: the baseline webhook's pair, same rounds", report.show(base_us, " µs")
                ),
                report.Row("core: pair / baseline pair", report.show(base_ratio, "x")),
                report.Row("core: /mutate CPU (mean)", report.show(measured["mutate_us"], " µs")),
                report.Row(
                    "core: /validate CPU (mean)", report.show(measured["validate_us"], " µs")
                ),
                report.Row("core: pair CPU p99", report.show(measured["pair_p99_us"], " µs")),
                report.Row("core: pair through the ASGI app", report.show(asgi.us_per_pair, " µs")),
                report.Row(
                    "core: share of CPU in the cyclic GC", report.show(measured["gc_share"], "")
                ),
            ]
        )
        where_rows.extend(
            report.Row(f"step: {name}", report.show(value, " µs")) for name, value in stages.items()
        )
        where_rows.extend(
            report.Row(
                f"profile: {entry['function'][:70]}",
                f"{entry['self_share'] * 100:.1f}% own, {entry['cumulative_share'] * 100:.1f}% cum",
            )
            for entry in profile["top_functions"][:12]
        )

    def run_server() -> None:
        server = run_server_load(workload, document, plan=sizes.load, progress=progress)
        results["server"] = server
        figures["throughput_ratio"] = server["throughput_ratio"]
        figures["p99_500_ms"] = server["p99_ms"].get("500")
        figures["server_errors"] = server["errors"]
        extra_rows.extend(
            [
                report.Row(
                    "server: tenantgate saturated", report.show(server["throughput_rps"], " rps")
                ),
                report.Row(
                    "server: baseline saturated",
                    report.show(server["baseline_throughput_rps"], " rps"),
                ),
                report.Row(
                    "server: tenantgate CPU per review",
                    report.show(server["cpu_us_per_review"], " µs"),
                ),
                report.Row(
                    "server: baseline CPU per review",
                    report.show(server["baseline_cpu_us_per_review"], " µs"),
                ),
                report.Row(
                    "server: CPU ratio tenantgate/baseline", report.show(server["cpu_ratio"], "x")
                ),
            ]
        )
        for rate, runs in server["rates"].items():
            mine, base = runs["tenantgate"], runs["baseline"]
            extra_rows.append(
                report.Row(
                    f"server: {rate}/s p50/p90/p99/max (tg | base)",
                    f"{mine.get('p50_ms', '-')}/{mine.get('p90_ms', '-')}/"
                    f"{mine.get('p99_ms', '-')}/{mine.get('max_ms', '-')} | "
                    f"{base.get('p50_ms', '-')}/{base.get('p90_ms', '-')}/"
                    f"{base.get('p99_ms', '-')}/{base.get('max_ms', '-')} ms",
                )
            )

    def run_scale() -> None:
        common = {
            "rounds": sizes.curve_rounds,
            "pairs": sizes.curve_round_pairs,
            "warmup": 30,
            "progress": progress,
        }
        tenants = scale.tenants_curve(
            sizes.tenant_points,
            rules=None,
            workload_pairs=sizes.curve_pairs,
            seed=args.seed,
            sources=sources,
            **common,  # type: ignore[arg-type]
        )
        rules = scale.rules_curve(
            sizes.rule_points,
            tenants=10,
            workload_pairs=sizes.curve_pairs,
            seed=args.seed,
            sources=sources,
            **common,  # type: ignore[arg-type]
        )
        ledger_policy = compile_generated(generate_config(tenants=sizes.ledger_tenants))
        ledger_workload = build_workload(
            ledger_policy, pairs=sizes.curve_pairs, seed=args.seed, sources=sources
        )
        ledger = scale.ledger_curve(
            sizes.ledger_points,
            generated=ledger_policy,
            workload=ledger_workload,
            **common,  # type: ignore[arg-type]
        )
        results["scale"] = {
            "tenants": tenants.to_json(),
            "rules": rules.to_json(),
            "ledger": ledger.to_json(),
        }
        figures["tenants_ratio"] = tenants.ratio
        figures["rules_ratio"] = rules.ratio
        figures["ledger_ratio"] = ledger.ratio
        for curve in (tenants, rules, ledger):
            points = ", ".join(f"{x:,}: {us:.0f}" for x, us in curve.points)
            extra_rows.append(report.Row(f"scale: µs/pair by {curve.unit}", points))

    def run_memory() -> None:
        progress(f"memory: rebuilding the ledger from {sizes.rebuild_pods} pods (subprocess)")
        rebuilt = memory.rebuild(tenants=10_000, pods=sizes.rebuild_pods, seed=args.seed)
        rest = memory.rest(
            tenants=sizes.rest_tenants, pods=sizes.rest_pods, seed=args.seed, progress=progress
        )
        results["memory"] = {"rebuild": rebuilt, "rest": rest}
        # CPU seconds: on a shared machine wall time also counts the neighbours' work.
        figures["rebuild_seconds"] = rebuilt["cpu_seconds"]
        figures["rest_rss_mib"] = rest["rss_at_rest_mib"]
        extra_rows.extend(
            [
                report.Row(
                    "memory: rebuild CPU parse/facts/rebuild",
                    f"{rebuilt['parse_cpu_seconds']}/{rebuilt['facts_cpu_seconds']}/"
                    f"{rebuilt['rebuild_cpu_seconds']} s",
                ),
                report.Row(
                    "memory: rebuild wall time (GC share)",
                    f"{rebuilt['seconds']} s ({rebuilt['gc_seconds']} s in the cyclic GC)",
                ),
                report.Row(
                    "memory: rebuild peak RSS", report.show(rebuilt["peak_rss_mib"], " MiB")
                ),
                report.Row(
                    "memory: server RSS ready / at rest",
                    f"{rest['rss_ready_mib']} / {rest['rss_at_rest_mib']} MiB",
                ),
            ]
        )

    def run_ha() -> None:
        progress("ha: concurrent creates through kube-apiserver, memory vs 3 replicas")
        measured = ha.measure(quick=args.quick)
        results["ha"] = measured
        for name, run in measured["runs"].items():
            extra_rows.append(
                report.Row(
                    f"ha: {name}",
                    f"{run['throughput_rps']} creates/s, {run['admitted']} admitted of "
                    f"{measured['pods']}; CAS writes {run['cas_writes']:.0f}, conflicts "
                    f"{run['cas_conflicts']:.0f}, exhausted {run['cas_exhausted']:.0f}, "
                    f"group commits {run['group_commits']:.0f} "
                    f"(max {run['max_group_commit']:.0f} changes)",
                )
            )
        extra_rows.append(
            report.Row(
                "ha: 3 replicas / memory creates/s", report.show(measured["throughput_ratio"])
            )
        )

    def run_queue() -> None:
        progress("queue: release latency with 1,000 queued, re-evaluation, admission, memory")
        measured = queue_bench.measure(quick=args.quick)
        results["queue"] = measured
        release = measured["release"]
        reevaluation = measured["reevaluation_us"]
        admission = measured["admission"]
        figures["queue_release_p99_ms"] = release["p99_ms"]
        figures["queue_reeval_ratio"] = reevaluation["ratio"]
        figures["queue_admission_ratio"] = admission["ratio"]
        figures["queue_bytes_per_pod"] = measured["memory_bytes_per_queued_pod"]
        extra_rows.extend(
            [
                report.Row(
                    "queue: release latency p50/p99/max",
                    f"{release['p50_ms']}/{release['p99_ms']}/{release['max_ms']} ms "
                    f"({release['samples']} releases, {release['queued']} queued)",
                ),
                report.Row(
                    "queue: µs per re-evaluation by queued pods",
                    ", ".join(
                        f"{int(size):,}: {value}"
                        for size, value in reevaluation.items()
                        if size != "ratio"
                    ),
                ),
                report.Row(
                    "queue: admission pair CPU admitted / queued",
                    f"{admission['admitted_us']} / {admission['queued_us']} µs",
                ),
            ]
        )

    def run_cluster() -> None:
        measured = cluster_bench.measure(quick=args.quick, progress=progress)
        results["cluster"] = measured
        figures["cluster_wall_ratio"] = measured["wall_ratio"]
        figures["cluster_added_p99_ms"] = measured["added_p99_ms"]
        without, hooked = measured["without"], measured["with"]
        cpu = measured["cpu_seconds_with_webhooks"]
        extra_rows.extend(
            [
                report.Row(
                    f"cluster: {measured['pods']:,} creates, p50/p99 without / with webhooks",
                    f"{without['p50_ms']}/{without['p99_ms']} ms / "
                    f"{hooked['p50_ms']}/{hooked['p99_ms']} ms",
                ),
                report.Row(
                    "cluster: creates/s without / with webhooks",
                    f"{without['creates_per_second']} / {hooked['creates_per_second']}",
                ),
                report.Row(
                    "cluster: CPU s during the webhook run",
                    ", ".join(f"{name} {seconds}" for name, seconds in sorted(cpu.items())),
                ),
            ]
        )

    def run_reload() -> None:
        runs = [
            reload.measure(tenants=sizes.reload_tenants, pods=0, seed=args.seed, progress=progress)
        ]
        if sizes.reload_pods:
            runs.append(
                reload.measure(
                    tenants=sizes.reload_tenants,
                    pods=sizes.reload_pods,
                    seed=args.seed,
                    progress=progress,
                )
            )
        results["reload"] = runs
        figures["reload_lag_ms"] = runs[0]["worst_lag_ms"]
        for run in runs:
            extra_rows.append(
                report.Row(
                    f"reload: {run['tenants']:,} tenants, {run['pods']:,} pods",
                    f"worst lag {run['worst_lag_ms']} ms (idle {run['idle_worst_lag_ms']}), "
                    f"{run['late_ticks_over_10ms']} ticks > 10 ms, {run['reload_seconds']} s",
                )
            )

    def run_page() -> None:
        progress("page: the status page with 10,000 tenants: /status whole and paged, Chromium")
        measured = page_bench.measure(quick=args.quick)
        results["page"] = measured
        status, seen = measured["status"], measured["browser"]
        extra_rows.extend(
            [
                report.Row(
                    "page: GET /status whole / one page (median)",
                    f"{status['whole']['median_ms']} ms, {status['whole']['bytes']:,} B / "
                    f"{status['page']['median_ms']} ms, {status['page']['bytes']:,} B",
                ),
                report.Row(
                    "page: first load / next page / search (median)",
                    f"{seen['first_load_ms']} / {seen['next_page_ms']} / {seen['search_ms']} ms "
                    f"({len(seen['console_errors'])} console errors)",
                ),
            ]
        )

    def run_cohorts() -> None:
        measured = cohorts_bench.measure(
            rounds=sizes.core_rounds,
            pairs=sizes.core_pairs,
            workload_pairs=sizes.workload_pairs,
            seed=args.seed,
            sources=sources,
            progress=progress,
        )
        results["cohorts"] = measured
        figures["cohorts_ratio"] = measured["ratio"]
        without, grouped = measured["without"], measured["with"]
        extra_rows.append(
            report.Row(
                f"cohorts: µs/pair, {measured['tenants']:,} tenants without / in "
                f"{measured['cohorts']} cohorts",
                f"{without['us_per_pair']} / {grouped['us_per_pair']} "
                f"({measured['borrowing_pairs']} of the {measured['workload_pairs']} pods borrow)",
            )
        )

    def run_groups() -> None:
        progress("groups: a member's admission CPU against a plain pod's, 64-member releases")
        measured = groups_bench.measure(quick=args.quick)
        results["groups"] = measured
        admission, release = measured["admission"], measured["release"]
        figures["groups_admission_ratio"] = admission["ratio"]
        figures["groups_release_p99_ms"] = release["p99_ms"]
        extra_rows.extend(
            [
                report.Row(
                    "groups: admission pair CPU plain / member",
                    f"{admission['plain_us']} / {admission['member_us']} µs "
                    f"(median of {admission['rounds']} rounds x {admission['pairs']} pairs)",
                ),
                report.Row(
                    f"groups: booking + releasing {release['members']} members p50/p99",
                    f"{release['p50_ms']}/{release['p99_ms']} ms ({release['samples']} groups)",
                ),
            ]
        )

    phase("core", run_core)
    phase("server", run_server)
    phase("scale", run_scale)
    phase("memory", run_memory)
    phase("ha", run_ha)
    phase("queue", run_queue)
    phase("reload", run_reload)
    phase("page", run_page)
    phase("cluster", run_cluster)
    phase("cohorts", run_cohorts)
    phase("groups", run_groups)

    full_size = not args.quick
    applicable = {
        "rest_rss_mib": full_size,
        "rebuild_seconds": full_size,
        "cluster_wall_ratio": full_size,
        "cluster_added_p99_ms": full_size,
    }
    results["targets"] = report.verdicts(figures, applicable)
    results["duration_seconds"] = round(time.perf_counter() - progress.started, 1)
    results["machine"]["load_average_end"] = report.machine()["load_average"]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2) + b"\n")

    mode = "quick run: smaller sizes, n/a where a target names a size" if args.quick else "full run"
    print(f"\ntenantgate benchmark, {mode}\n")
    print(report.table(report.judged_rows(figures, applicable), heading="target"))
    if extra_rows:
        print()
        print(report.table(extra_rows, heading="details"))
    if where_rows and not args.quick:
        print()
        print(report.table(where_rows, heading="where a pair's CPU goes (in process)"))
    if results["errors"]:
        print()
        for name, message in results["errors"].items():
            print(f"phase {name} FAILED: {message}")
    print(f"\nresults: {args.output}  ({results['duration_seconds']} s)")
    return 1 if results["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
