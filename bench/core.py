"""Core cost in process: CPU time per mutate+validate pair, and where it goes.

Each pair is one pod's creation: its ``/mutate`` review, then its ``/validate`` review, both
through :class:`bench.stack.Pipeline` (the calls the server's handler makes) on a real offline
:class:`~admission.runtime.Runtime`. The clock is the thread's CPU clock
(``time.thread_time_ns``): what other processes on a shared machine do cannot inflate it the way
it inflates wall time. Rounds are interleaved across the points of a curve so that a slow
period hits every point alike, and a figure is the median of its rounds.

The core's baseline (:class:`BaselinePipeline`) is the baseline webhook's work on the same
bodies, measured in the same rounds: the figure's ratio to it tells a slower host from a slower
request path.

Between rounds the reservations booked are expired (the server's sweep, or the controller's
confirmation, would do the same), so a ledger keeps the size a point asks for.
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import itertools
import logging
import pstats
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

from admission.reviews import decode_review
from bench import baseline, stats
from bench.stack import Pipeline, StagedPipeline, settle
from bench.workload import NOW, Workload, pair_ids
from classifier.resources import pod_requests
from tenants.config import Policy
from tenants.ledger import MemoryLedger
from tenants.verdicts import Verdict

logger = logging.getLogger(__name__)

REPO: Final = Path(__file__).resolve().parent.parent
SIZE_BANDS: Final = (
    (0, 8 * 1024, "<8KB"),
    (8 * 1024, 12 * 1024, "8-12KB"),
    (12 * 1024, 1 << 30, ">=12KB"),
)

_RUNS = itertools.count(1)


def next_run() -> int:
    """A run id never used before in this process: request and pod uids stay unique."""
    return next(_RUNS)


@dataclass(frozen=True, slots=True)
class PairTiming:
    """CPU nanoseconds of one pair's two reviews, and the mutate review's size."""

    mutate_ns: int
    validate_ns: int
    size: int

    @property
    def us(self) -> float:
        return (self.mutate_ns + self.validate_ns) / 1000


class GcClock:
    """Wall time spent in the cyclic garbage collector while enabled (a ``with`` block)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        now = time.perf_counter()
        if phase == "start":
            self._started = now
        else:
            self.seconds += now - self._started

    def __enter__(self) -> GcClock:
        gc.callbacks.append(self._on_gc)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._on_gc)


@dataclass
class Measurement:
    """Timings of every pair measured at one point, grouped by round."""

    rounds: list[list[PairTiming]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    gc_seconds: float = 0.0

    @property
    def timings(self) -> list[PairTiming]:
        return [timing for round_ in self.rounds for timing in round_]

    @property
    def round_us(self) -> list[float]:
        """Mean µs per pair of each round."""
        return [stats.mean([t.us for t in round_]) for round_ in self.rounds if round_]

    @property
    def us_per_pair(self) -> float:
        """The figure: median over rounds of the mean µs per pair."""
        return stats.robust_centre(self.round_us)

    def to_json(self) -> dict[str, Any]:
        timings = self.timings
        per_pair = [t.us for t in timings]
        bands = {}
        for low, high, label in SIZE_BANDS:
            inside = [t.us for t in timings if low <= t.size < high]
            if inside:
                bands[label] = {"pairs": len(inside), "median_us": round(stats.median(inside), 1)}
        return {
            "us_per_pair": round(self.us_per_pair, 1),
            "mutate_us": round(stats.mean([t.mutate_ns / 1000 for t in timings]), 1),
            "validate_us": round(stats.mean([t.validate_ns / 1000 for t in timings]), 1),
            "pair_p50_us": round(stats.percentile(per_pair, 50), 1),
            "pair_p90_us": round(stats.percentile(per_pair, 90), 1),
            "pair_p99_us": round(stats.percentile(per_pair, 99), 1),
            "round_us": [round(value, 1) for value in self.round_us],
            "pairs": len(timings),
            "mean_mutate_bytes": round(stats.mean([t.size for t in timings])),
            "by_size": bands,
            # Share of the measured CPU spent in the cyclic GC (its wall time, same thread).
            "gc_share": round(self.gc_seconds / (sum(per_pair) / 1e6), 3) if per_pair else None,
            "errors": len(self.errors),
        }


def round_ratios(numerator: Measurement, denominator: Measurement) -> list[float]:
    """Each round's µs per pair of ``numerator`` over the same round's of ``denominator``.

    Both were measured in the same rounds (:func:`measure_points`), a few seconds apart: a
    host that slows down or speeds up between rounds moves both sides of a round together.
    """
    return [
        mine / base for mine, base in zip(numerator.round_us, denominator.round_us, strict=True)
    ]


class ReviewPipeline(Protocol):
    """What a measured point sends its pairs through."""

    def mutate(self, body: bytes, *, now: float) -> tuple[bytes, Verdict]: ...

    def validate(self, body: bytes, *, now: float) -> tuple[bytes, Verdict]: ...


class BaselinePipeline:
    """The baseline webhook's work on a pair, in process: parse each review, answer allowed.

    :func:`bench.baseline.answer` is what the baseline server runs per request (the server
    phase's baseline). Measured in the same rounds as tenantgate's pipeline, on the same
    bodies, it is the core figure's baseline: the cheapest work any webhook does with these
    pods on this host, at this moment.
    """

    _ALLOWED: Final = Verdict.allow()

    def mutate(self, body: bytes, *, now: float) -> tuple[bytes, Verdict]:
        return self._answer(body)

    def validate(self, body: bytes, *, now: float) -> tuple[bytes, Verdict]:
        return self._answer(body)

    def _answer(self, body: bytes) -> tuple[bytes, Verdict]:
        status, payload = baseline.answer(body)
        if status != 200:
            return payload, Verdict.deny(f"the baseline answered {status}: {payload.decode()}")
        return payload, self._ALLOWED


def _check(verdict: Verdict, what: str, errors: list[str]) -> None:
    if not verdict.allowed:
        errors.append(f"{what}: denied: {verdict.message}")


@dataclass
class Point:
    """One thing to measure: a pipeline, the pairs it is fed, and the ledger behind it."""

    label: str
    pipeline: ReviewPipeline
    workload: Workload
    ledger: MemoryLedger
    ttl: float
    run: int = field(default_factory=next_run)
    sent: int = 0  # pairs sent so far (the next pair's index)
    measurement: Measurement = field(default_factory=Measurement)

    def run_pairs(self, count: int, *, now: float, record: bool = True) -> None:
        """Send ``count`` pairs; record their CPU time unless warming up."""
        pipeline, pairs = self.pipeline, self.workload.pairs
        timings: list[PairTiming] = []
        errors = self.measurement.errors
        clock = time.thread_time_ns
        with GcClock() as collector:
            for _ in range(count):
                index = self.sent
                self.sent += 1
                pair = pairs[index % len(pairs)]
                mutate_body, validate_body = pair.bodies(pair_ids(self.run, index))
                started = clock()
                _, mutated = pipeline.mutate(mutate_body, now=now)
                middle = clock()
                _, validated = pipeline.validate(validate_body, now=now)
                ended = clock()
                _check(mutated, f"{pair.source} mutate", errors)
                _check(validated, f"{pair.source} validate", errors)
                if validated.warnings:
                    # The validate review must find the reservation its mutate booked.
                    errors.append(f"{pair.source} validate: {validated.warnings[0]}")
                timings.append(PairTiming(middle - started, ended - middle, pair.mutate.size))
        if record:
            self.measurement.gc_seconds += collector.seconds
            self.measurement.rounds.append(timings)

    def expire(self, *, now: float) -> None:
        """Drop the reservations booked so far (outside any timing)."""
        settle(self.ledger.expire(now=now + self.ttl + 1))


def measure_points(
    points: Sequence[Point],
    *,
    rounds: int,
    pairs_per_round: int,
    warmup: int,
    progress: Callable[[str], None] | None = None,
) -> None:
    """Measure every point, rounds interleaved across points."""
    for point in points:
        point.run_pairs(warmup, now=NOW, record=False)
        point.expire(now=NOW)
    for round_index in range(rounds):
        now = NOW + (round_index + 1) * 10_000
        for point in points:
            point.run_pairs(pairs_per_round, now=now)
            point.expire(now=now)
        if progress is not None:
            progress(f"round {round_index + 1}/{rounds}")


# --------------------------------------------------------------------------- ASGI


async def _call(app: Any, path: str, body: bytes) -> tuple[int, bytes]:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "https",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"tenantgate.tenantgate-system.svc:443"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8443),
    }
    sent = False
    status = 0
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(chunks)


def measure_asgi(
    app: Any, workload: Workload, *, ledger: MemoryLedger, ttl: float, rounds: int, pairs: int
) -> Measurement:
    """CPU per pair through the whole Starlette app (routing, body limit, metrics, handler).

    The app reads its own clock (wall time), so reservations expire by real time here.
    """
    measurement = Measurement()
    run = next_run()

    async def main() -> None:
        clock = time.thread_time_ns
        index = 0
        for round_index in range(rounds + 1):
            timings: list[PairTiming] = []
            with GcClock() as collector:
                for _ in range(pairs):
                    pair = workload.pairs[index % len(workload.pairs)]
                    mutate_body, validate_body = pair.bodies(pair_ids(run, index))
                    index += 1
                    started = clock()
                    mutate_status, mutated = await _call(app, "/mutate", mutate_body)
                    middle = clock()
                    validate_status, validated = await _call(app, "/validate", validate_body)
                    ended = clock()
                    for status, answer, what in (
                        (mutate_status, mutated, "mutate"),
                        (validate_status, validated, "validate"),
                    ):
                        if status != 200 or b'"allowed":true' not in answer:
                            measurement.errors.append(f"{pair.source} {what}: HTTP {status}")
                    timings.append(PairTiming(middle - started, ended - middle, pair.mutate.size))
            if round_index:  # round 0 warms up
                measurement.rounds.append(timings)
                measurement.gc_seconds += collector.seconds
            settle(ledger.expire(now=time.time() + ttl + 1))

    asyncio.run(main())
    return measurement


# --------------------------------------------------------------------------- where it goes


def stage_costs(point: Point, *, policy: Policy, pairs: int) -> dict[str, float]:
    """CPU µs per pair of each step, timed around the step (no profiler).

    Two parts of ``/mutate``'s decision are also timed alone, on the same pods: classification
    with the mutation plan, and the pod's exact request (it runs again in ``/validate``).
    """
    if not isinstance(point.pipeline, Pipeline):
        raise TypeError(f"{point.label}: only tenantgate's pipeline has steps to time")
    staged = StagedPipeline(point.pipeline.admitter)
    probe = Point(point.label, staged, point.workload, point.ledger, point.ttl)
    probe.run_pairs(pairs, now=NOW, record=False)
    probe.expire(now=NOW)
    costs = {name: total / pairs / 1000 for name, total in staged.stages.items()}
    plan_ns = requests_ns = 0
    clock = time.thread_time_ns
    for index in range(pairs):
        pair = point.workload.pairs[index % len(point.workload.pairs)]
        pod = decode_review(pair.bodies(pair_ids(0, index))[0]).request.object or {}
        tenant = policy.tenant_for(pair.namespace)
        if tenant is None:
            raise RuntimeError(f"{pair.namespace} belongs to no tenant")
        started = clock()
        planned = tenant.classifier.plan(  # as /mutate plans: no notes
            pod, namespace=pair.namespace, allowed_profiles=tenant.allowed_profiles, notes=False
        )
        middle = clock()
        pod_requests(planned.mutated)
        plan_ns += middle - started
        requests_ns += clock() - middle
    costs["  of which classify + plan"] = plan_ns / pairs / 1000
    costs["  of which pod requests"] = requests_ns / pairs / 1000
    return {name: round(value, 1) for name, value in costs.items()}


# --------------------------------------------------------------------------- profile

# Stages of one pair, by (file suffix, function name): their cumulative time per pair.
STAGES: Final = (
    ("decode review", "admission/reviews.py", "decode_review"),
    ("mutate (decide)", "tenants/decisions.py", "mutate"),
    ("  classify + plan", "classifier/plan.py", "plan"),
    ("  pod requests", "classifier/resources.py", "pod_requests"),
    ("  ledger update", "tenants/ledger.py", "update"),
    ("JSONPatch", "admission/patch.py", "encoded_json_patch"),
    ("validate (decide)", "tenants/decisions.py", "validate"),
    ("encode response", "admission/reviews.py", "encode_response"),
)


def _label(key: tuple[str, int, str]) -> str:
    filename, line, function = key
    if filename == "~":
        return function
    path = Path(filename)
    try:
        shown = str(path.resolve().relative_to(REPO))
    except ValueError:
        shown = path.name
    if shown.startswith(".venv/"):
        shown = path.name
    return f"{shown}:{line}({function})"


def profile_points(point: Point, *, pairs: int, top: int = 15) -> dict[str, Any]:
    """cProfile of ``pairs`` pairs: stage costs and the top functions by own time.

    Profiling slows every call down, so absolute numbers are inflated; shares are what count.
    The profiler's clock is the thread's CPU time: with wall time, a function that happens to
    be running when the machine's other processes take the CPU would be charged for it.
    """
    profiler = cProfile.Profile(time.thread_time)
    profiler.enable()
    point.run_pairs(pairs, now=NOW, record=False)
    profiler.disable()
    point.expire(now=NOW)
    table: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = pstats.Stats(
        profiler
    ).stats  # type: ignore[attr-defined]
    total = sum(entry[2] for entry in table.values()) or 1.0
    stages = []
    for name, suffix, function in STAGES:
        cumulative = sum(
            entry[3]
            for (filename, _, func), entry in table.items()
            if func == function and filename.endswith(suffix)
        )
        stages.append(
            {
                "stage": name,
                "cumulative_share": round(cumulative / total, 3),
                "profiled_us_per_pair": round(cumulative / pairs * 1e6, 1),
            }
        )
    ranked = sorted(table.items(), key=lambda item: item[1][2], reverse=True)[:top]
    functions = [
        {
            "function": _label(key),
            "calls_per_pair": round(entry[1] / pairs, 1),
            "self_share": round(entry[2] / total, 3),
            "cumulative_share": round(entry[3] / total, 3),
        }
        for key, entry in ranked
    ]
    return {"pairs": pairs, "stages": stages, "top_functions": functions}
