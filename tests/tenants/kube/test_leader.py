"""Leader election on a real Lease of the real API server, through the official client, as
tenantgate's ServiceAccount (through the fault proxy).

Timing is checked on a virtual clock (``FakeTime``): the elector's sleeps advance it instantly,
so "takes over within the lease duration" is asserted exactly, never against the wall clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry, generate_latest

from tenants.kube.errors import KubeConflict
from tenants.kube.leader import (
    JITTER_FACTOR,
    KubeLeaseClient,
    LeaderCollector,
    LeaderElector,
    LeaseRecord,
    LeaseTimings,
    format_micro_time,
)
from testcluster import Cluster

NAMESPACE = "tenantgate-system"
TIMINGS = LeaseTimings(lease_duration=15, renew_deadline=10, retry_period=2)
WAIT = 30.0

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def leases(tenantgate_client: Any) -> KubeLeaseClient:
    """The elector's Lease client: tenantgate's ServiceAccount, through the fault proxy, so the
    shipped leader-election Role (create; get and update of tenantgate-controller) is what
    allows it."""
    return KubeLeaseClient(tenantgate_client, namespace=NAMESPACE)


def read_lease(admin_client: Any) -> dict[str, Any]:
    api: Any = client.CoordinationV1Api(admin_client)
    lease = api.read_namespaced_lease("tenantgate-controller", NAMESPACE, _preload_content=False)
    try:
        document: dict[str, Any] = json.loads(lease.data)
    finally:
        lease.release_conn()
    return document


class FakeTime:
    """A virtual clock: sleeping advances it at once (every elector gets its own)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.origin = datetime(2030, 1, 1, tzinfo=UTC)

    def clock(self) -> float:
        return self.now

    def wall(self) -> datetime:
        return self.origin + timedelta(seconds=self.now)

    async def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.0)
        await asyncio.sleep(0.001)


class Candidate:
    """One replica campaigning: its elector, its task, and what happened when."""

    def __init__(
        self,
        leases: KubeLeaseClient,
        identity: str,
        *,
        time: FakeTime | None = None,
        timings: LeaseTimings = TIMINGS,
    ) -> None:
        self.time = time
        self.changes: list[tuple[bool, float]] = []
        self.duty_runs = 0
        self.duty_cancelled = asyncio.Event()
        self.duty_started = asyncio.Event()
        self.led = asyncio.Event()
        self.ran_twice = asyncio.Event()
        self.fail_duty = False
        kwargs: dict[str, Any] = {}
        if time is not None:
            kwargs = {"clock": time.clock, "wall": time.wall, "sleep": time.sleep}
        self.elector = LeaderElector(
            leases,
            identity=identity,
            timings=timings,
            on_leading=self._changed,
            rand=lambda: 1.0,
            **kwargs,
        )
        self.task: asyncio.Task[None] | None = None

    def _changed(self, leading: bool) -> None:
        self.changes.append((leading, self.time.now if self.time is not None else 0.0))
        if leading:
            self.led.set()

    async def duty(self) -> None:
        self.duty_runs += 1
        self.duty_started.set()
        if self.duty_runs == 2:
            self.ran_twice.set()
        if self.fail_duty:
            raise RuntimeError("duty broke")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.duty_cancelled.set()
            raise

    def start(self, *, release: bool = True) -> Candidate:
        self.task = asyncio.create_task(self.elector.run(self.duty, release=release))
        return self

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def leading(self, leading: bool = True) -> None:
        await asyncio.wait_for(self.elector.wait_leading(leading), WAIT)


@pytest.fixture
async def candidates(leases: KubeLeaseClient) -> AsyncIterator[list[Candidate]]:
    """Stopped after the test, before the cluster's reset deletes the Lease under them."""
    started: list[Candidate] = []
    yield started
    for candidate in started:
        await candidate.stop()


# --------------------------------------------------------------------------- pure parts


def test_timings_default_to_the_kubernetes_values() -> None:
    timings = LeaseTimings()
    assert (timings.lease_duration, timings.renew_deadline, timings.retry_period) == (15, 10, 2)
    assert timings.lease_seconds == 15


@pytest.mark.parametrize(
    ("lease", "renew", "retry", "problem"),
    [
        (10, 10, 2, "lease_duration must be longer than renew_deadline"),
        (15, 2, 2, "renew_deadline must be longer than 1.2 x retry_period"),
        (15, 10, 0, "retry_period must be positive"),
    ],
)
def test_timings_refuse_unsafe_combinations(
    lease: float, renew: float, retry: float, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem.replace(".", r"\.")):
        LeaseTimings(lease_duration=lease, renew_deadline=renew, retry_period=retry)


def test_lease_seconds_round_up() -> None:
    assert LeaseTimings(lease_duration=2.5, renew_deadline=2, retry_period=1).lease_seconds == 3


def test_record_round_trips_through_the_lease_spec() -> None:
    moment = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    record = LeaseRecord("pod-a_1", 15, moment, moment + timedelta(seconds=2), 3)
    spec = record.to_spec()
    assert spec == {
        "holderIdentity": "pod-a_1",
        "leaseDurationSeconds": 15,
        "leaseTransitions": 3,
        "acquireTime": "2030-01-02T03:04:05.678901Z",
        "renewTime": "2030-01-02T03:04:07.678901Z",
    }
    assert LeaseRecord.from_spec(spec) == record


def test_record_from_a_foreign_or_empty_spec() -> None:
    assert LeaseRecord.from_spec(None) == LeaseRecord("", 1, None, None, 0)
    odd = LeaseRecord.from_spec(
        {"holderIdentity": 7, "leaseDurationSeconds": True, "renewTime": "yesterday"}
    )
    assert odd == LeaseRecord("", 1, None, None, 0)


def test_micro_time_is_utc_with_microseconds() -> None:
    eastern = datetime(2030, 1, 1, 12, 0, tzinfo=UTC).astimezone(timezone(timedelta(hours=-5)))
    assert format_micro_time(eastern) == "2030-01-01T12:00:00.000000Z"


def test_identity_must_not_be_empty(leases: KubeLeaseClient) -> None:
    with pytest.raises(ValueError, match="must not be empty"):
        LeaderElector(leases, identity="")


# --------------------------------------------------------------------------- against the API


def test_times_on_a_whole_second_are_written_as_micro_time(
    leases: KubeLeaseClient, admin_client: Any
) -> None:
    """The API server parses a MicroTime with exactly six fractional digits (``UnmarshalJSON``
    in staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/micro_time.go). The official client's
    typed Lease methods validate the body into a ``V1Lease`` and write its times back with
    ``datetime.isoformat()``, which drops the fraction on a whole second: such a write was
    refused with 400, once in a million renewals."""
    whole = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)
    created = leases.create(LeaseRecord("replica-a", 15, whole, whole, 0))
    later = whole + timedelta(seconds=2)
    leases.update(
        LeaseRecord("replica-a", 15, whole, later, 0), resource_version=created.resource_version
    )
    spec = read_lease(admin_client)["spec"]
    assert (spec["acquireTime"], spec["renewTime"]) == (
        "2030-01-01T12:00:00.000000Z",
        "2030-01-01T12:00:02.000000Z",
    )


async def test_first_candidate_creates_and_holds_the_lease(
    leases: KubeLeaseClient, admin_client: Any, candidates: list[Candidate]
) -> None:
    time = FakeTime()
    first = Candidate(leases, "replica-a", time=time).start()
    candidates.append(first)
    await first.leading()
    await asyncio.wait_for(first.duty_started.wait(), WAIT)

    spec = read_lease(admin_client)["spec"]
    assert spec["holderIdentity"] == "replica-a"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert datetime.fromisoformat(spec["acquireTime"]) == time.origin
    assert first.elector.holder == "replica-a"
    assert first.elector.stats.acquired == 1


async def test_exactly_one_of_several_candidates_leads(
    leases: KubeLeaseClient, candidates: list[Candidate]
) -> None:
    """Real time, short timings: three replicas campaign for two whole lease durations, racing
    each other's creates and compare-and-swap updates of the one Lease (real 409s)."""
    fast = LeaseTimings(lease_duration=4, renew_deadline=3, retry_period=0.5)
    running = [Candidate(leases, f"replica-{n}", timings=fast).start() for n in "abc"]
    candidates.extend(running)
    waits = [asyncio.ensure_future(c.led.wait()) for c in running]
    done, pending = await asyncio.wait(waits, timeout=WAIT, return_when=asyncio.FIRST_COMPLETED)
    for waiting in pending:
        waiting.cancel()
    assert done, "nobody became the leader"
    leader = next(c for c in running if c.elector.is_leader)
    for _ in range(int(2 * fast.lease_duration / 0.1)):
        await asyncio.sleep(0.1)
        assert len([c for c in running if c.elector.is_leader]) <= 1  # never two at once
    if leader.elector.stats.lost:
        # The machine was too slow for the leader to renew within 3 s: it stepped down, as it
        # must, before anyone could take over. Only the safety above holds then.
        return
    assert [c for c in running if c.elector.is_leader] == [leader]
    assert [c.duty_runs for c in running if c is not leader] == [0, 0]
    assert leader.duty_runs == 1


async def test_a_crashed_leader_is_replaced_within_the_lease_duration(
    leases: KubeLeaseClient, admin_client: Any, candidates: list[Candidate]
) -> None:
    crashed = Candidate(leases, "replica-a").start(release=False)
    candidates.append(crashed)
    await crashed.leading()
    await crashed.stop()  # killed: no release, the Lease stays held until it expires
    held = read_lease(admin_client)["spec"]
    assert held["holderIdentity"] == "replica-a"

    time = FakeTime()
    successor = Candidate(leases, "replica-b", time=time).start()
    candidates.append(successor)
    await successor.leading()

    # It first saw the Lease at virtual time 0: it must wait the whole duration, no longer
    # than one (jittered) retry period more.
    acquired_at = successor.changes[0][1]
    assert successor.changes[0][0] is True
    assert TIMINGS.lease_duration <= acquired_at
    assert acquired_at <= TIMINGS.lease_duration + JITTER_FACTOR * TIMINGS.retry_period
    spec = read_lease(admin_client)["spec"]
    assert spec["holderIdentity"] == "replica-b"
    assert spec["leaseTransitions"] == held["leaseTransitions"] + 1
    assert datetime.fromisoformat(spec["acquireTime"]) == time.origin + timedelta(
        seconds=acquired_at
    )
    await asyncio.wait_for(successor.duty_started.wait(), WAIT)


async def test_a_graceful_stop_hands_the_lease_over_at_once(
    leases: KubeLeaseClient, admin_client: Any, candidates: list[Candidate]
) -> None:
    leader = Candidate(leases, "replica-a").start()
    candidates.append(leader)
    await leader.leading()
    await leader.stop()
    assert leader.duty_cancelled.is_set()
    assert read_lease(admin_client)["spec"]["holderIdentity"] == ""

    successor = Candidate(leases, "replica-b", time=FakeTime()).start()
    candidates.append(successor)
    await successor.leading()
    assert successor.changes[0] == (True, 0.0)


async def test_a_leader_that_cannot_renew_stops_before_the_lease_expires(
    leases: KubeLeaseClient, kube: Cluster, candidates: list[Candidate]
) -> None:
    time = FakeTime()
    leader = Candidate(leases, "replica-a", time=time).start()
    candidates.append(leader)
    await leader.leading()
    await asyncio.wait_for(leader.duty_started.wait(), WAIT)
    renewed_at = time.now

    kube.proxy.add_errors(503, resource="leases.coordination.k8s.io", count=10_000)
    await leader.leading(False)
    await asyncio.wait_for(leader.duty_cancelled.wait(), WAIT)

    stopped_at = leader.changes[-1][1]
    assert leader.changes[-1][0] is False
    # It kept trying for the renew deadline, and stopped before anyone may take over.
    assert stopped_at - renewed_at >= TIMINGS.renew_deadline - TIMINGS.retry_period
    assert stopped_at - renewed_at < TIMINGS.lease_duration
    assert leader.elector.stats.lost == 1
    assert leader.elector.stats.renew_failures >= 1


async def test_a_leader_that_finds_another_holder_stops_at_once(
    leases: KubeLeaseClient, admin_client: Any, candidates: list[Candidate]
) -> None:
    time = FakeTime()
    leader = Candidate(leases, "replica-a", time=time).start()
    candidates.append(leader)
    await leader.leading()
    # Another writer (the admin, straight to the API server, not through the elector's
    # client) takes the Lease with its own compare-and-swap, racing the leader's renewals:
    # a renewal that lost the race got a real 409 and tries again from a fresh read.
    other = KubeLeaseClient(admin_client, namespace=NAMESPACE)
    while True:
        stored = await asyncio.to_thread(other.get)
        assert stored is not None
        intruder = LeaseRecord(
            "intruder", 15, time.wall(), time.wall(), stored.record.transitions + 1
        )
        try:
            await asyncio.to_thread(
                other.update, intruder, resource_version=stored.resource_version
            )
            break
        except KubeConflict:
            continue  # the leader renewed in between: read again
    taken_at = time.now

    await leader.leading(False)
    await asyncio.wait_for(leader.duty_cancelled.wait(), WAIT)
    assert leader.elector.holder == "intruder"
    # No waiting for the renew deadline: the next renewal (or the one after a renewal that
    # raced the intruder's write and got a conflict) saw the new holder.
    assert leader.changes[-1][1] - taken_at <= 2 * TIMINGS.retry_period


async def test_a_failing_duty_hands_the_lease_back_and_runs_again(
    leases: KubeLeaseClient, candidates: list[Candidate]
) -> None:
    time = FakeTime()
    leader = Candidate(leases, "replica-a", time=time)
    leader.fail_duty = True
    leader.start()
    candidates.append(leader)
    await asyncio.wait_for(leader.ran_twice.wait(), WAIT)
    assert leader.elector.stats.duty_failures >= 1
    assert [leading for leading, _ in leader.changes[:2]] == [True, False]


async def test_conflicts_on_the_lease_are_retried(
    leases: KubeLeaseClient, kube: Cluster, candidates: list[Candidate]
) -> None:
    # Create the Lease first so that acquiring it is an update, which the storm hits.
    creator = Candidate(leases, "replica-a").start()
    candidates.append(creator)
    await creator.leading()
    await creator.stop()

    kube.proxy.conflict_storm("leases.coordination.k8s.io", count=3)
    successor = Candidate(leases, "replica-b", time=FakeTime()).start()
    candidates.append(successor)
    await successor.leading()
    assert successor.changes[0][1] >= 3 * TIMINGS.retry_period


async def test_metrics(leases: KubeLeaseClient, candidates: list[Candidate]) -> None:
    leader = Candidate(leases, "replica-a").start()
    candidates.append(leader)
    await leader.leading()
    registry = CollectorRegistry()
    registry.register(LeaderCollector(leader.elector))
    text = generate_latest(registry).decode()
    assert "tenantgate_leader 1.0" in text
    assert "tenantgate_leader_acquired_total 1.0" in text
    assert "tenantgate_leader_lost_total 0.0" in text
