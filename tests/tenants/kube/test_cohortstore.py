"""Cohort bookings across replicas (``tenants.kube.cohortstore``) against a fake API.

The fake keeps TenantLedger and TenantCohortLedger objects with etcd's rule for a write: the
resourceVersion read or 409. It exists for what the real API server cannot be made to do on
cue: run another replica's whole booking between this replica's read and its write, fail the
second of the two writes, or move the clock past a pending entry's expiry. Replicas racing on
the real control plane are in tests/integration/test_cohorts.py.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from classifier.quantities import Quantity
from tenants.cohorts.booked import cohort_from_json
from tenants.cohorts.borrowing import pool
from tenants.cohorts.tier import cohort_rule
from tenants.config import Policy
from tenants.configfile import load_text
from tenants.decisions import book_for_mutate
from tenants.kube.backoff import BackoffPolicy
from tenants.kube.cohortstore import PENDING_TTL_SECONDS, CohortLedgerStore
from tenants.kube.errors import KubeConflict, KubeError
from tenants.kube.ledgerstore import CasPolicy, StoredLedger
from tenants.ledger import LedgerUnavailable, TenantLedger, book, ledger_from_json, ledger_to_json

pytestmark = pytest.mark.anyio

FAST = CasPolicy(
    max_attempts=50,
    conflict_backoff=BackoffPolicy(base=0.0005, factor=2.0, cap=0.005, jitter=1.0),
)

# One tree: lab (cpu 2 of its own) with four members; team-d lends and never borrows.
CONFIG = """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst-over-share: {value: 5, preemptionPolicy: Never}
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 1000}
profiles: {general: {}}
ledger: {backend: kubernetes}
cohorts:
  lab: {quota: {cpu: "2"}}
tenants:
  team-a: {namespaces: [team-a], cohort: lab, quota: {guaranteed: {cpu: "2"}}}
  team-b: {namespaces: [team-b], cohort: lab, quota: {guaranteed: {cpu: "2"}}}
  team-c: {namespaces: [team-c], cohort: lab, quota: {guaranteed: {cpu: "2"}}}
  team-d:
    namespaces: [team-d]
    cohort: lab
    borrowingLimit: {cpu: "0"}
    quota: {guaranteed: {cpu: "4"}}
"""
POLICY: Policy = load_text(CONFIG, filename="test.yaml").policy
TREE = POLICY.cohorts
MEMBERS = TREE.tree_members("team-a")
ONE = Quantity.parse("1")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class FakeApi:
    """Objects of one kind: name -> (resourceVersion, status), written only at the version
    read. ``before_write`` runs (in the caller's thread) before each status write."""

    versions = itertools.count(1)
    lock = threading.Lock()

    def __init__(self) -> None:
        self.objects: dict[str, tuple[str, Mapping[str, Any] | None]] = {}
        self.before_write: Callable[[str], None] | None = None
        self.fail_writes: dict[str, KubeError] = {}
        self.writes = 0

    def read(self, name: str) -> StoredLedger | None:
        with self.lock:
            found = self.objects.get(name)
        return None if found is None else StoredLedger(name, found[0], found[1])

    def create(self, name: str) -> StoredLedger:
        with self.lock:
            if name in self.objects:
                raise KubeConflict(f"{name} exists", status=409)
            version = str(next(self.versions))
            self.objects[name] = (version, None)
        return StoredLedger(name, version, None)

    def write_status(
        self, name: str, status: Mapping[str, Any], *, resource_version: str
    ) -> StoredLedger:
        hook = self.before_write
        if hook is not None:
            hook(name)
        error = self.fail_writes.pop(name, None)
        if error is not None:
            raise error
        with self.lock:
            current = self.objects.get(name)
            if current is None or current[0] != resource_version:
                raise KubeConflict(f"{name} changed", status=409)
            version = str(next(self.versions))
            self.objects[name] = (version, dict(status))
            self.writes += 1
        return StoredLedger(name, version, dict(status))

    def list(self) -> list[StoredLedger]:
        with self.lock:
            return [StoredLedger(n, v, s) for n, (v, s) in self.objects.items()]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Cluster:
    """The fake API server the replicas share."""

    def __init__(self) -> None:
        self.ledgers = FakeApi()
        self.cohorts = FakeApi()
        self.wall = Clock()
        self.replicas: list[CohortLedgerStore] = []

    def replica(self, policy: CasPolicy = FAST) -> CohortLedgerStore:
        store = CohortLedgerStore(self.ledgers, self.cohorts, policy=policy, wall=self.wall)
        self.replicas.append(store)
        return store

    def ledger(self, tenant: str) -> TenantLedger:
        stored = self.ledgers.read(tenant)
        status = dict(stored.status or {}) if stored is not None else {}
        return ledger_from_json(status, tenant=tenant)

    def pending(self) -> list[str]:
        stored = self.cohorts.read("lab")
        assert stored is not None
        return [entry.tenant for entry in cohort_from_json("lab", stored.status).pending]


@pytest.fixture
async def cluster() -> Any:
    made = Cluster()
    yield made
    for store in made.replicas:
        await store.close()


_ids = itertools.count()


def booking(tenant: str, cpu: Quantity = ONE) -> Callable[..., Any]:
    """A pod of ``tenant`` booked by the cohort rule; the answer is its tier (None: denied)."""
    rid = f"r-{next(_ids)}"
    quota = POLICY.tenants[tenant].quota

    def change(
        ledger: TenantLedger, peers: Mapping[str, TenantLedger]
    ) -> tuple[TenantLedger, str | None]:
        decision = cohort_rule(TREE, tenant, quota, peers)(ledger, {"cpu": cpu})
        if decision.tier is None:
            return ledger, None
        booked = book(
            ledger,
            reservation_id=rid,
            tier=decision.tier,
            amount={"cpu": cpu},
            now=1000.0,
            ttl=600.0,
        )
        return booked, decision.tier

    return change


async def borrow(store: CohortLedgerStore, tenant: str, **kwargs: Any) -> str | None:
    result: str | None = await store.transact_with_peers(
        tenant, MEMBERS, booking(tenant), cohort="lab", **kwargs
    )
    return result


def over_lent(cluster: Cluster) -> bool:
    """From what the members' ledgers hold: more borrowed than the tree has to lend."""
    totals = {name: cluster.ledger(name).total() for name in MEMBERS}
    measured = pool(TREE, "team-a", totals, "cpu")
    return measured.demand > measured.supply


async def guarantees_used(store: CohortLedgerStore) -> None:
    """team-a, team-b and team-c fill their guarantees (2 cpu each): only lab's own cpu and
    team-d's 4 are left to lend."""
    for tenant in ("team-a", "team-b", "team-c"):
        for _ in range(2):
            assert await borrow(store, tenant) == "guaranteed"


async def settled(cluster: Cluster) -> None:
    for _ in range(500):
        if not cluster.pending():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"pending entries left: {cluster.pending()}")


# --------------------------------------------------------------------------- races


async def test_three_replicas_never_lend_the_same_room_twice(cluster: Cluster) -> None:
    replicas = [cluster.replica() for _ in range(3)]
    await guarantees_used(replicas[0])
    # team-a, team-b and team-c ask for 4 more cpu each, in 1-cpu pods, on three replicas at
    # once. The tree lends 2 (lab) + 4 (team-d) = 6 in all.
    members = ["team-a", "team-b", "team-c"] * 4
    tiers = await asyncio.gather(*(borrow(replicas[n % 3], t) for n, t in enumerate(members)))

    assert tiers.count("burst") == 6
    assert tiers.count(None) == 6
    assert not over_lent(cluster)
    borrowed = sum(
        len([r for r in cluster.ledger(t).reservations.values() if r.tier == "burst"])
        for t in MEMBERS
    )
    assert borrowed == 6
    assert sum(store.cohort_stats.conflicts for store in replicas) > 0
    await settled(cluster)


async def test_a_booking_between_read_and_write_makes_the_write_conflict(
    cluster: Cluster,
) -> None:
    first, second = cluster.replica(), cluster.replica()
    await guarantees_used(first)
    loop = asyncio.get_running_loop()
    interleaved: list[str | None] = []

    def other_replica_borrows_first(name: str) -> None:
        cluster.cohorts.before_write = None
        for _ in range(6):
            future = asyncio.run_coroutine_threadsafe(borrow(second, "team-b"), loop)
            interleaved.append(future.result(timeout=10))

    cluster.cohorts.before_write = other_replica_borrows_first
    # team-a read the tree with 6 cpu free; team-b took all of it before team-a's write.
    assert await borrow(first, "team-a") is None
    assert interleaved == ["burst"] * 6
    assert first.cohort_stats.conflicts == 1
    assert not over_lent(cluster)


async def test_a_booking_between_the_two_writes_counts_the_pending_one(
    cluster: Cluster,
) -> None:
    first, second = cluster.replica(), cluster.replica()
    await guarantees_used(first)
    for _ in range(5):
        assert await borrow(first, "team-b") == "burst"
    loop = asyncio.get_running_loop()
    between: list[str | None] = []

    def other_replica_borrows(name: str) -> None:
        if name != "team-a":
            return
        cluster.ledgers.before_write = None
        # team-a's booking is in the cohort object, not yet in team-a's ledger.
        assert cluster.ledger("team-a").burst == {}
        future = asyncio.run_coroutine_threadsafe(borrow(second, "team-c"), loop)
        between.append(future.result(timeout=10))

    cluster.ledgers.before_write = other_replica_borrows
    assert await borrow(first, "team-a") == "burst"
    assert between == [None]
    assert not over_lent(cluster)


async def test_a_crash_between_the_two_writes_keeps_the_room_reserved(cluster: Cluster) -> None:
    crashed, other = cluster.replica(), cluster.replica()
    await guarantees_used(other)
    for _ in range(5):
        assert await borrow(other, "team-b") == "burst"
    # The cohort write lands; the member's write never answers (the replica is cut off).
    cluster.ledgers.fail_writes["team-a"] = KubeError("connection reset", status=0)
    with pytest.raises(LedgerUnavailable):
        await borrow(crashed, "team-a")
    assert cluster.pending() == ["team-a"]
    assert cluster.ledger("team-a").burst == {}

    # The last free cpu stays lent to team-a's booking in flight...
    assert await borrow(other, "team-b") is None
    # ...until its entry expires: nobody counts it any more.
    cluster.wall.now += PENDING_TTL_SECONDS + 1
    assert await borrow(other, "team-b") == "burst"
    assert "team-a" not in cluster.pending()
    assert not over_lent(cluster)


async def test_the_member_write_settles_the_entry_and_the_cohort_object_shows_usage(
    cluster: Cluster,
) -> None:
    store = cluster.replica()
    for _ in range(3):
        await borrow(store, "team-c")
    await settled(cluster)
    stored = cluster.cohorts.read("lab")
    assert stored is not None
    members = cohort_from_json("lab", stored.status).members
    assert members["team-c"] == {
        "guaranteed": {"cpu": Quantity.parse("2")},
        "burst": {"cpu": Quantity.parse("1")},
    }
    assert store.cohort_stats.settled == 1


async def test_a_settle_that_loses_every_race_tries_again(cluster: Cluster) -> None:
    """Another writer changes the cohort object before each of the settle's writes, as many
    times as it tries: the entry is settled all the same, later. Left in place, it would count
    its booking twice once the member's ledger confirms it."""
    store = cluster.replica(CasPolicy(max_attempts=3, conflict_backoff=FAST.conflict_backoff))
    await guarantees_used(store)
    writes = itertools.count()

    def another_writer_first(name: str) -> None:
        if 1 <= next(writes) <= 3:  # the booking's own write goes through; the settle's do not
            with FakeApi.lock:
                _, status = cluster.cohorts.objects[name]
                cluster.cohorts.objects[name] = (str(next(FakeApi.versions)), status)

    cluster.cohorts.before_write = another_writer_first
    assert await borrow(store, "team-a") == "burst"
    await settled(cluster)
    assert store.cohort_stats.conflicts >= 3
    assert store.cohort_stats.settled == 1


async def test_guaranteed_room_taken_meanwhile_makes_the_booking_borrow_through_the_cohort(
    cluster: Cluster,
) -> None:
    """Step 1 found team-a's guarantee free (nothing to write to the cohort); another replica
    took it before the member's write: the member write would now borrow, so step 1 runs
    again and the borrowed booking goes through the cohort object."""
    first, second = cluster.replica(), cluster.replica()
    assert await borrow(first, "team-a") == "guaranteed"
    loop = asyncio.get_running_loop()

    def guarantee_taken(name: str) -> None:
        cluster.ledgers.before_write = None
        future = asyncio.run_coroutine_threadsafe(
            second.transact("team-a", lambda ledger: booking("team-a")(ledger, {})), loop
        )
        assert future.result(timeout=10) == "guaranteed"

    cluster.ledgers.before_write = guarantee_taken
    assert await borrow(first, "team-a") == "burst"
    assert first.cohort_stats.second_writes_rerun == 1
    assert cluster.ledger("team-a").burst == {"cpu": ONE}
    assert not over_lent(cluster)


async def test_a_dry_run_writes_nothing(cluster: Cluster) -> None:
    store = cluster.replica()
    for _ in range(2):
        await borrow(store, "team-a")
    writes = (cluster.ledgers.writes, cluster.cohorts.writes)
    assert await borrow(store, "team-a", commit=False) == "burst"
    assert (cluster.ledgers.writes, cluster.cohorts.writes) == writes
    assert cluster.ledger("team-a").burst == {}


async def test_a_cohort_object_that_keeps_conflicting_fails_closed(cluster: Cluster) -> None:
    store = cluster.replica(CasPolicy(max_attempts=3, conflict_backoff=FAST.conflict_backoff))
    for _ in range(2):
        await borrow(store, "team-a")

    def someone_else_writes(name: str) -> None:
        stored = cluster.cohorts.read(name)
        assert stored is not None
        with FakeApi.lock:
            cluster.cohorts.objects[name] = (str(next(FakeApi.versions)), stored.status)

    cluster.cohorts.before_write = someone_else_writes
    with pytest.raises(LedgerUnavailable) as caught:
        await borrow(store, "team-a")
    assert caught.value.code == 409
    assert caught.value.message == (
        "cohort lab: the quota ledger is busy (TenantCohortLedger lab kept changing while "
        "booking); retry"
    )
    assert cluster.ledger("team-a").burst == {}


async def test_the_repair_drops_lapsed_entries_and_records_the_members_usage(
    cluster: Cluster,
) -> None:
    crashed, leader = cluster.replica(), cluster.replica()
    await guarantees_used(leader)
    cluster.ledgers.fail_writes["team-a"] = KubeError("connection reset", status=0)
    with pytest.raises(LedgerUnavailable):
        await borrow(crashed, "team-a")
    assert cluster.pending() == ["team-a"]

    # Still in flight as far as anyone knows: counted, and the record already says so.
    assert await leader.repair(TREE) == 0
    assert cluster.pending() == ["team-a"]
    cluster.wall.now += PENDING_TTL_SECONDS + 1
    assert await leader.repair(TREE) == 1
    assert cluster.pending() == []
    stored = cluster.cohorts.read("lab")
    assert stored is not None
    members = cohort_from_json("lab", stored.status).members
    assert members["team-a"] == {"guaranteed": {"cpu": Quantity.parse("2")}, "burst": {}}
    assert members["team-d"] == {"guaranteed": {}, "burst": {}}
    assert await leader.repair(TREE) == 0  # nothing left to change


def admission(tenant: str, *, now: float = 1000.0) -> Callable[..., Any]:
    """A pod of ``tenant`` as the mutating webhook books it at ``now`` (``book_for_mutate``
    with the cohort rule): holds past their TTL are released when the pod does not fit
    without."""
    rid = f"r-{next(_ids)}"

    def change(
        ledger: TenantLedger, peers: Mapping[str, TenantLedger]
    ) -> tuple[TenantLedger, str | None]:
        tenant_policy = POLICY.tenants[tenant]
        rule = cohort_rule(TREE, tenant, tenant_policy.quota, peers)
        after, booking = book_for_mutate(
            ledger,
            tenant=tenant_policy,
            request={"cpu": ONE},
            existing_id=None,
            derived_id=rid,
            now=now,
            ttl=600.0,
            rule=rule,
        )
        return after, booking.decision.tier

    return change


def store_ledger(cluster: Cluster, ledger: TenantLedger) -> None:
    stored = cluster.ledgers.read(ledger.tenant)
    assert stored is not None
    cluster.ledgers.write_status(
        ledger.tenant, ledger_to_json(ledger), resource_version=stored.resource_version
    )


async def test_a_release_planned_in_a_batch_lends_nothing_until_it_is_written(
    cluster: Cluster,
) -> None:
    """Two bookings decided together: team-b's releases its two lapsed holds to fit, which
    would leave a cpu free for team-a's borrowed pod after it. While team-a's entry is being
    written, another replica puts a pod of its own in place of each lapsed hold, so team-b's
    release never happens. team-a must not have counted on it: the tree would lend 7 cpu of
    6 (tests/integration/test_cohorts_ha.py over-admitted this way)."""
    first, other = cluster.replica(), cluster.replica()
    await guarantees_used(first)
    for _ in range(4):
        assert await borrow(first, "team-c") == "burst"
    await settled(cluster)
    # team-b borrowed the other 2 cpu of the 6 the tree lends with two holds that lapsed at
    # 900 and 990: their pods never reached the validating webhook.
    lapsed = cluster.ledger("team-b")
    for index, expiry in enumerate((900.0, 990.0)):
        lapsed = book(
            lapsed,
            reservation_id=f"lapsed-{index}",
            tier="burst",
            amount={"cpu": ONE},
            now=expiry - 1.0,
            ttl=1.0,
        )
    store_ledger(cluster, lapsed)
    loop = asyncio.get_running_loop()

    def another_replica_swaps_the_lapsed_holds(name: str) -> None:
        cluster.cohorts.before_write = None

        async def two_pods() -> list[Any]:
            # Each pod fits only in the place of one lapsed hold: nothing grows, so neither
            # writes the cohort object.
            return [
                await other.transact_with_peers(
                    "team-b", MEMBERS, admission("team-b", now=now), cohort="lab"
                )
                for now in (950.0, 995.0)
            ]

        future = asyncio.run_coroutine_threadsafe(two_pods(), loop)
        assert future.result(timeout=10) == ["burst", "burst"]

    cluster.cohorts.before_write = another_replica_swaps_the_lapsed_holds
    tiers = await asyncio.gather(
        first.transact_with_peers("team-b", MEMBERS, admission("team-b"), cohort="lab"),
        first.transact_with_peers("team-a", MEMBERS, admission("team-a"), cohort="lab"),
    )
    assert not over_lent(cluster)
    # team-b's pod takes the room its release frees; team-a's waits for it to be written.
    assert list(tiers) == ["burst", None]
