"""The in-process measurement helpers, on a handful of pairs (no figure is asserted)."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from bench import baseline, core
from bench.configgen import GeneratedPolicy
from bench.stack import Pipeline, memory_ledger, offline_runtime, settle
from bench.workload import Workload, pair_ids
from tenants.ledger import MemoryLedger
from tenants.verdicts import AdmissionInput, Verdict


def point(generated: GeneratedPolicy, workload: Workload) -> core.Point:
    runtime = offline_runtime(generated)
    return core.Point("p", Pipeline(runtime.guard), workload, memory_ledger(runtime), ttl=30.0)


def reservations(target: core.Point) -> int:
    return sum(len(ledger.reservations) for ledger in target.ledger.snapshot().values())


def test_rounds_are_recorded_and_reservations_expired_between_them(
    generated: GeneratedPolicy, workload: Workload
) -> None:
    first, second = point(generated, workload), point(generated, workload)

    core.measure_points([first, second], rounds=2, pairs_per_round=3, warmup=1)

    for target in (first, second):
        measurement = target.measurement
        assert measurement.errors == []
        assert [len(round_) for round_ in measurement.rounds] == [3, 3]
        assert target.sent == 7  # ids never repeat: warm-up pairs count too
        assert reservations(target) == 0
        figures = measurement.to_json()
        assert figures["pairs"] == 6
        assert figures["errors"] == 0
        assert figures["us_per_pair"] > 0


class Refusing:
    """An admitter that allows /mutate and answers /validate with ``verdict``."""

    def __init__(self, verdict: Verdict) -> None:
        self.verdict = verdict

    async def mutate(self, request: AdmissionInput, *, now: float) -> Verdict:
        return Verdict.allow()

    async def validate(self, request: AdmissionInput, *, now: float) -> Verdict:
        return self.verdict


def test_denials_and_validate_warnings_are_errors(
    generated: GeneratedPolicy, workload: Workload
) -> None:
    ledger = MemoryLedger()
    for verdict, expected in (
        (Verdict.deny("over quota"), "validate: denied: over quota"),
        (Verdict.allow(warnings=("booked by the validating webhook",)), "validate: booked by"),
    ):
        target = core.Point("p", Pipeline(Refusing(verdict)), workload, ledger, ttl=30.0)

        target.run_pairs(2, now=0.0)

        assert len(target.measurement.errors) == 2
        assert expected in target.measurement.errors[0]


def test_settle_runs_a_coroutine_that_never_waits() -> None:
    async def ready() -> int:
        return 7

    async def waits() -> None:
        await asyncio.sleep(0)

    assert settle(ready()) == 7
    assert settle("plain") == "plain"
    with pytest.raises(RuntimeError, match="suspended"):
        settle(waits())


def test_profile_names_the_stages(generated: GeneratedPolicy, workload: Workload) -> None:
    profile = core.profile_points(point(generated, workload), pairs=4)

    stages = {stage["stage"]: stage for stage in profile["stages"]}
    assert stages["decode review"]["cumulative_share"] > 0
    assert stages["JSONPatch"]["cumulative_share"] > 0
    assert len(profile["top_functions"]) == 15


def test_asgi_measurement_goes_through_the_app(
    generated: GeneratedPolicy, workload: Workload
) -> None:
    runtime = offline_runtime(generated)

    measured = core.measure_asgi(
        runtime.app, workload, ledger=memory_ledger(runtime), ttl=30.0, rounds=1, pairs=3
    )

    assert measured.errors == []
    assert [len(round_) for round_ in measured.rounds] == [3]


def test_the_baseline_pipeline_answers_as_the_baseline_server_does(workload: Workload) -> None:
    pipeline = core.BaselinePipeline()
    mutate_body, validate_body = workload.pairs[0].bodies(pair_ids(1, 0))

    for send, body in ((pipeline.mutate, mutate_body), (pipeline.validate, validate_body)):
        payload, verdict = send(body, now=0.0)

        assert payload == baseline.answer(body)[1]
        assert orjson.loads(payload)["response"]["allowed"] is True
        assert verdict.allowed

    payload, verdict = pipeline.mutate(b"{not json", now=0.0)
    assert not verdict.allowed
    assert verdict.message == "the baseline answered 400: not an AdmissionReview"


def test_the_baseline_is_measured_in_the_same_rounds_and_each_round_gives_a_ratio(
    generated: GeneratedPolicy, workload: Workload
) -> None:
    mine = point(generated, workload)
    base = core.Point("baseline", core.BaselinePipeline(), workload, MemoryLedger(), ttl=30.0)

    core.measure_points([mine, base], rounds=3, pairs_per_round=2, warmup=1)

    assert base.measurement.errors == []
    assert [len(round_) for round_ in base.measurement.rounds] == [2, 2, 2]
    ratios = core.round_ratios(mine.measurement, base.measurement)
    assert ratios == [
        a / b for a, b in zip(mine.measurement.round_us, base.measurement.round_us, strict=True)
    ]
    with pytest.raises(TypeError, match="baseline: only tenantgate's pipeline"):
        core.stage_costs(base, policy=generated.policy, pairs=1)


def test_round_ratios_refuse_measurements_of_different_rounds(
    generated: GeneratedPolicy, workload: Workload
) -> None:
    mine = point(generated, workload)
    mine.run_pairs(1, now=0.0)
    mine.run_pairs(1, now=0.0)
    base = core.Point("baseline", core.BaselinePipeline(), workload, MemoryLedger(), ttl=30.0)
    base.run_pairs(1, now=0.0)

    with pytest.raises(ValueError):
        core.round_ratios(mine.measurement, base.measurement)
