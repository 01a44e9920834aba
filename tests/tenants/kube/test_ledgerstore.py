"""The ``kubernetes`` ledger backend against the real API server, through the official client.

Stores (replicas) talk as tenantgate's ServiceAccount through the fault proxy, so the shipped
ledger ClusterRole is what allows them; what was stored is read back as the admin, straight to
the API server. Conflicts are real 409s from the API server's resourceVersion precondition
when replicas race, and injected (``kube.proxy.conflict_storm``) where a test needs a count.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry, generate_latest

from classifier.quantities import Quantity
from tenants.controller import LedgerController, pod_facts
from tenants.decisions import PolicyAdmitter
from tenants.kube import ledgerstore
from tenants.kube.backoff import BackoffPolicy
from tenants.kube.errors import KubeError
from tenants.kube.ledgerstore import (
    GROUP,
    PLURAL,
    VERSION,
    CasPolicy,
    KubeLedgerClient,
    KubeLedgerStore,
    LedgerStoreCollector,
    StoredLedger,
    rebase,
)
from tenants.ledger import (
    Charge,
    LedgerUnavailable,
    Queued,
    Reservation,
    TenantLedger,
    book,
    cancel,
    confirm,
    expire,
    ledger_from_json,
    ledger_to_json,
    release,
)
from tenants.verdicts import Verdict
from testcluster import Cluster
from tests.tenants.conftest import create, make_pod, make_policy
from tests.tenants.conftest import stored as stored_pod
from tests.tenants.kube.conftest import new_api_client

ROOT = Path(__file__).resolve().parents[3]
CRD = ROOT / "deploy" / "webhooks" / "overlays" / "ha" / "crd-tenantledger.yaml"
RESOURCE = f"{PLURAL}.{GROUP}"
FAST = CasPolicy(
    max_attempts=5,
    conflict_backoff=BackoffPolicy(base=0.001, factor=2.0, cap=0.01, jitter=1.0),
    replay_backoff=BackoffPolicy(base=0.05, factor=2.0, cap=0.2, jitter=0.0),
)
CPU = Quantity.parse("1")

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def api_client(tenantgate_client: Any) -> Any:
    """What the stores use: tenantgate's ServiceAccount, through the fault proxy."""
    return tenantgate_client


_names = itertools.count()


@pytest.fixture
def tenant() -> str:
    return f"team-{next(_names)}"


@pytest.fixture
async def stores(api_client: Any) -> AsyncIterator[list[KubeLedgerStore]]:
    """Replicas: each store is what one tenantgate process would have."""
    made: list[KubeLedgerStore] = []
    yield made
    for store in made:
        await store.close()


def new_store(api_client: Any, stores: list[KubeLedgerStore], **kwargs: Any) -> KubeLedgerStore:
    store = KubeLedgerStore(KubeLedgerClient(api_client), policy=kwargs.pop("policy", FAST))
    stores.append(store)
    return store


def leading_store(
    ledger_client: KubeLedgerClient,
    stores: list[KubeLedgerStore],
    *,
    policy: CasPolicy = FAST,
) -> KubeLedgerStore:
    """A store on ``ledger_client`` (one that fails or holds writes) leading the controller."""
    store = KubeLedgerStore(ledger_client, policy=policy)
    stores.append(store)
    store.set_leading(True)
    return store


def stored(admin_client: Any, tenant: str) -> dict[str, Any]:
    """The TenantLedger object as stored, read as the admin straight from the API server."""
    api: Any = client.CustomObjectsApi(admin_client)
    document: dict[str, Any] = api.get_cluster_custom_object(GROUP, VERSION, PLURAL, tenant)
    return document


def stored_ledger(admin_client: Any, tenant: str) -> TenantLedger:
    return ledger_from_json(stored(admin_client, tenant).get("status") or {}, tenant=tenant)


def booking(reservation_id: str, *, amount: Quantity = CPU, ceiling: int | None = None) -> Any:
    """A change booking ``amount`` of cpu, refused (None) past ``ceiling`` cpus in total."""

    def change(ledger: TenantLedger) -> tuple[TenantLedger, str | None]:
        used = ledger.total().get("cpu", Quantity(0))
        if ceiling is not None and used.nanos + amount.nanos > Quantity.parse(str(ceiling)).nanos:
            return ledger, None
        return book(
            ledger,
            reservation_id=reservation_id,
            tier="guaranteed",
            amount={"cpu": amount},
            now=1000.0,
            ttl=60.0,
        ), reservation_id

    return change


async def drained(store: KubeLedgerStore) -> None:
    """Wait until the store has written every controller change it queued."""
    for _ in range(2000):
        if all(q.task is None and not q.replays for q in store._queues.values()):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the store did not write its queued changes")


# --------------------------------------------------------------------------- admission


async def test_a_booking_creates_the_object_and_stores_the_ledger(
    admin_client: Any, api_client: Any, stores: list[KubeLedgerStore], tenant: str
) -> None:
    store = new_store(api_client, stores)
    assert await store.transact(tenant, booking("r-1")) == "r-1"

    document = stored(admin_client, tenant)
    assert document["spec"] == {"tenant": tenant}
    assert document["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "tenantgate"}
    status = document["status"]
    assert status["used"] == {"guaranteed": {"cpu": "1"}, "burst": {}}
    assert [r["id"] for r in status["reservations"]] == ["r-1"]
    assert "charges" not in status
    assert "tenant" not in status
    assert store.get(tenant).guaranteed == {"cpu": CPU}
    assert (store.stats.creates, store.stats.writes) == (1, 1)


async def test_concurrent_bookings_are_group_committed(
    admin_client: Any, api_client: Any, stores: list[KubeLedgerStore], tenant: str
) -> None:
    store = new_store(api_client, stores)
    results = await asyncio.gather(*(store.transact(tenant, booking(f"r-{n}")) for n in range(60)))

    assert sorted(results) == sorted(f"r-{n}" for n in range(60))
    assert stored_ledger(admin_client, tenant).guaranteed == {"cpu": Quantity.parse("60")}
    # Sixty changes, far fewer writes: each write carried every change waiting for it.
    assert store.stats.writes < 60
    assert store.stats.max_batch > 1
    assert store.stats.changes == 60


async def test_replicas_never_over_admit(
    admin_client: Any, api_client: Any, stores: list[KubeLedgerStore], tenant: str
) -> None:
    replicas = [new_store(api_client, stores, policy=CasPolicy(max_attempts=50)) for _ in "abc"]
    changes = [replicas[n % 3].transact(tenant, booking(f"r-{n}", ceiling=25)) for n in range(90)]
    results = await asyncio.gather(*changes)

    admitted = [r for r in results if r is not None]
    assert len(admitted) == 25
    ledger = stored_ledger(admin_client, tenant)
    assert ledger.guaranteed == {"cpu": Quantity.parse("25")}
    assert sorted(ledger.reservations) == sorted(admitted)


async def test_conflicts_are_retried_and_counted(
    admin_client: Any, api_client: Any, kube: Cluster, stores: list[KubeLedgerStore], tenant: str
) -> None:
    store = new_store(api_client, stores)
    await store.transact(tenant, booking("r-0"))
    kube.proxy.conflict_storm(RESOURCE, count=3)

    assert await store.transact(tenant, booking("r-1")) == "r-1"
    assert store.stats.conflicts == 3
    assert store.stats.retries == 3
    assert sorted(stored_ledger(admin_client, tenant).reservations) == ["r-0", "r-1"]


async def test_a_conflict_storm_longer_than_the_attempts_fails_closed(
    admin_client: Any, api_client: Any, kube: Cluster, stores: list[KubeLedgerStore], tenant: str
) -> None:
    store = new_store(api_client, stores)
    await store.transact(tenant, booking("r-0"))
    before = stored(admin_client, tenant)["metadata"]["resourceVersion"]
    kube.proxy.conflict_storm(RESOURCE, count=100)

    with pytest.raises(LedgerUnavailable) as raised:
        await store.transact(tenant, booking("r-1"))
    assert raised.value.code == 409
    assert raised.value.reason == "Conflict"
    assert raised.value.message == (
        f"tenant {tenant}: the quota ledger is busy (TenantLedger {tenant} changed during "
        "5 attempts to book); retry"
    )
    assert store.stats.exhausted == 1
    kube.proxy.clear()
    assert stored(admin_client, tenant)["metadata"]["resourceVersion"] == before


async def test_a_change_that_joins_a_conflicting_batch_reports_its_own_attempts(
    api_client: Any, kube: Cluster, stores: list[KubeLedgerStore], tenant: str
) -> None:
    store = new_store(api_client, stores)
    await store.transact(tenant, booking("r-0"))
    kube.proxy.conflict_storm(RESOURCE, count=100)

    first = asyncio.ensure_future(store.transact(tenant, booking("r-1")))
    await _until(lambda: store.stats.conflicts >= 2, interval=0.001)
    # r-2 joins the batch after it has already conflicted twice: the batch tries 7 times in
    # all, r-2 five times, and r-2's message says five.
    with pytest.raises(LedgerUnavailable) as raised:
        await store.transact(tenant, booking("r-2"))
    with pytest.raises(LedgerUnavailable):
        await first
    assert store.stats.conflicts >= 7
    assert "changed during 5 attempts to book" in raised.value.message


async def test_an_unreachable_api_server_fails_closed(stores: list[KubeLedgerStore]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Nothing listens there any more: every call is refused.
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    configuration.retries = False
    api: Any = client.ApiClient(configuration)
    try:
        store = KubeLedgerStore(KubeLedgerClient(api), policy=FAST)
        stores.append(store)
        with pytest.raises(LedgerUnavailable) as raised:
            await store.transact("team-a", booking("r-1"))
    finally:
        api.close()
    assert raised.value.code == 503
    assert raised.value.reason == "ServiceUnavailable"
    assert raised.value.message.startswith(
        "tenant team-a: cannot check the quota ledger: the Kubernetes API server is unreachable ("
    )
    assert raised.value.message.endswith("; retry")
    assert store.stats.unavailable == 1


async def test_api_server_errors_fail_every_waiting_change(
    admin_client: Any, api_client: Any, kube: Cluster, stores: list[KubeLedgerStore], tenant: str
) -> None:
    store = new_store(api_client, stores)
    await store.transact(tenant, booking("r-0"))
    kube.proxy.add_errors(503, resource=RESOURCE, count=1000)

    outcomes = await asyncio.gather(
        *(store.transact(tenant, booking(f"r-{n}")) for n in range(1, 6)),
        return_exceptions=True,
    )
    assert all(isinstance(o, LedgerUnavailable) and o.code == 503 for o in outcomes)
    kube.proxy.clear()
    assert sorted(stored_ledger(admin_client, tenant).reservations) == ["r-0"]


async def test_forbidden_says_to_check_rbac(
    kube: Cluster, tmp_path: Path, stores: list[KubeLedgerStore], tenant: str
) -> None:
    """A ServiceAccount without the HA component's ledger ClusterRole (the namespace's
    ``default`` one): the real authorizer refuses it (plugin/pkg/auth/authorizer/rbac/rbac.go)."""
    if kube.installation is None:
        raise RuntimeError("tenantgate is not installed")
    token = kube.installation.service_account_token(name="default")
    kubeconfig = kube.plane.token_kubeconfig(
        tmp_path / "default.kubeconfig",
        token=token,
        user="system:serviceaccount:tenantgate-system:default",
        server=kube.proxy.url,
    )
    api = new_api_client(kubeconfig)
    try:
        store = KubeLedgerStore(KubeLedgerClient(api), policy=FAST)
        stores.append(store)
        with pytest.raises(LedgerUnavailable, match="may not read or write TenantLedger") as raised:
            await store.transact(tenant, booking("r-1"))
    finally:
        api.close()
    assert "check its RBAC" in raised.value.message
    assert "system:serviceaccount:tenantgate-system:default" in raised.value.message
    assert raised.value.code == 503


async def test_a_missing_crd_is_named(
    monkeypatch: pytest.MonkeyPatch, api_client: Any, stores: list[KubeLedgerStore], tenant: str
) -> None:
    """The shared cluster keeps its CRD (deleting it would take every other test's ledgers),
    so the store asks for a version no CRD serves: the real API server answers exactly as for
    an uninstalled CRD, a 404 from its not-found delegate (the apiextensions crdHandler hands
    unknown groups and unserved versions alike to pkg/util/notfoundhandler), and RBAC, which
    does not look at versions, lets tenantgate's ServiceAccount get that far."""
    monkeypatch.setattr(ledgerstore, "VERSION", "v1alpha99")
    store = new_store(api_client, stores)
    with pytest.raises(LedgerUnavailable) as raised:
        await store.transact(tenant, booking("r-1"))
    assert raised.value.code == 503
    assert "the tenantledgers.tenantgate.io custom resource definition is not installed" in (
        raised.value.message
    )


async def test_dry_run_reads_the_stored_ledger_and_writes_nothing(
    admin_client: Any, api_client: Any, stores: list[KubeLedgerStore], tenant: str
) -> None:
    mine, other = new_store(api_client, stores), new_store(api_client, stores)
    await mine.transact(tenant, booking("r-0"))
    await other.transact(tenant, booking("r-1"))  # behind mine's back: its cache is stale
    version = stored(admin_client, tenant)["metadata"]["resourceVersion"]

    seen = await mine.transact(tenant, lambda ledger: (ledger, sorted(ledger.reservations)))
    answer = await mine.transact(tenant, booking("r-2", ceiling=2), commit=False)

    assert seen == ["r-0", "r-1"]
    assert answer is None  # two cpus are booked: a third does not fit
    assert stored(admin_client, tenant)["metadata"]["resourceVersion"] == version


async def test_a_change_that_raises_fails_only_its_own_request(
    admin_client: Any, api_client: Any, stores: list[KubeLedgerStore], tenant: str
) -> None:
    store = new_store(api_client, stores)

    def broken(ledger: TenantLedger) -> tuple[TenantLedger, None]:
        raise ValueError("bad change")

    outcomes = await asyncio.gather(
        store.transact(tenant, booking("r-1")),
        store.transact(tenant, broken),
        store.transact(tenant, booking("r-2")),
        return_exceptions=True,
    )
    assert outcomes[0] == "r-1"
    assert isinstance(outcomes[1], ValueError)
    assert outcomes[2] == "r-2"
    assert sorted(stored_ledger(admin_client, tenant).reservations) == ["r-1", "r-2"]


async def test_an_invalid_status_fails_closed(
    admin_client: Any, api_client: Any, stores: list[KubeLedgerStore], tenant: str
) -> None:
    store = new_store(api_client, stores)
    await store.transact(tenant, booking("r-0"))
    document = stored(admin_client, tenant)
    document["status"] = {"used": {"guaranteed": {"cpu": "lots"}}}
    api: Any = client.CustomObjectsApi(api_client)
    api.replace_cluster_custom_object_status(GROUP, VERSION, PLURAL, tenant, document)

    with pytest.raises(LedgerUnavailable, match=f"TenantLedger {tenant} has an invalid status"):
        await store.transact(tenant, booking("r-1"))


async def test_closing_fails_what_still_waits(api_client: Any, kube: Cluster, tenant: str) -> None:
    store = KubeLedgerStore(KubeLedgerClient(api_client), policy=FAST)
    kube.proxy.add_latency(0.5, resource=RESOURCE, count=1)
    waiting = asyncio.ensure_future(store.transact(tenant, booking("r-1")))
    await asyncio.sleep(0.05)
    await store.close()
    with pytest.raises(LedgerUnavailable, match="shutting down"):
        await waiting
    with pytest.raises(LedgerUnavailable, match="shutting down"):
        await store.transact(tenant, booking("r-2"))


# --------------------------------------------------------------------------- the controller


async def test_controller_changes_are_written_only_while_leading(
    admin_client: Any, api_client: Any, stores: list[KubeLedgerStore], tenant: str
) -> None:
    store = new_store(api_client, stores)
    await store.transact(tenant, booking("r-1"))

    def confirm_pod(ledger: TenantLedger) -> tuple[TenantLedger, None]:
        confirmed = confirm(
            ledger, pod_uid="pod-1", reservation_id="r-1", tier="guaranteed", amount={"cpu": CPU}
        )
        return confirmed, None

    store.update(tenant, confirm_pod)
    await drained(store)
    assert sorted(stored_ledger(admin_client, tenant).reservations) == ["r-1"]
    assert store.stats.replays_dropped == 1

    store.set_leading(True)
    store.update(tenant, confirm_pod)
    await drained(store)
    ledger = stored_ledger(admin_client, tenant)
    assert (dict(ledger.reservations), ledger.guaranteed) == ({}, {"cpu": CPU})
    assert set(store.get(tenant).charges) == {"pod-1"}  # known to the leader only

    store.update(tenant, lambda current: (release(current, pod_uid="pod-1"), None))
    await drained(store)
    assert stored_ledger(admin_client, tenant).guaranteed == {}
    assert store.stats.replays == 2

    store.set_leading(False)
    assert dict(store.get(tenant).charges) == {}


async def leader_behind(
    api_client: Any, stores: list[KubeLedgerStore], tenant: str
) -> tuple[KubeLedgerStore, KubeLedgerStore]:
    """A leading replica that booked r-0 and another that booked r-1 after it: the leader's
    view of ``tenant`` does not have r-1."""
    leader, other = new_store(api_client, stores), new_store(api_client, stores)
    leader.set_leading(True)
    await leader.transact(tenant, booking("r-0"))
    await other.transact(tenant, booking("r-1"))
    return leader, other


async def test_the_leader_replays_on_the_stored_object_not_on_its_view(
    admin_client: Any, api_client: Any, stores: list[KubeLedgerStore], tenant: str
) -> None:
    leader, _ = await leader_behind(api_client, stores, tenant)

    outcomes: list[bool] = []

    def confirm_r1(ledger: TenantLedger) -> tuple[TenantLedger, None]:
        outcomes.append("r-1" in ledger.reservations)
        return confirm(
            ledger, pod_uid="pod-1", reservation_id="r-1", tier="guaranteed", amount={"cpu": CPU}
        ), None

    leader.update(tenant, confirm_r1)
    await drained(leader)

    # Locally the reservation was unknown; on the stored object it was confirmed, not charged
    # a second time.
    assert outcomes[0] is False
    assert True in outcomes[1:]
    ledger = stored_ledger(admin_client, tenant)
    assert sorted(ledger.reservations) == ["r-0"]
    assert ledger.guaranteed == {"cpu": Quantity.parse("2")}


async def test_a_written_change_reports_its_answer_on_the_stored_object(
    api_client: Any, stores: list[KubeLedgerStore], tenant: str
) -> None:
    leader, other = await leader_behind(api_client, stores, tenant)
    reported: list[bool] = []

    def knows_r1(ledger: TenantLedger) -> tuple[TenantLedger, bool]:
        return release(ledger, pod_uid="nobody"), "r-1" in ledger.reservations

    assert leader.update(tenant, knows_r1, written=reported.append) is False  # the view
    await drained(leader)
    assert reported == [True]  # the stored object, once written
    # Nothing is reported for a change a follower does not write.
    follower_reports: list[bool] = []
    other.update(tenant, knows_r1, written=follower_reports.append)
    await drained(other)
    assert follower_reports == []


async def test_the_leader_reports_a_pod_late_only_when_the_stored_ledger_lacks_its_booking(
    admin_client: Any,
    api_client: Any,
    stores: list[KubeLedgerStore],
    tenant: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Another replica booked the pod's reservation; the leader's view does not show it yet.
    The pod confirms it on the stored object: no "late" warning, no count."""
    policy = make_policy(
        "apiVersion: tenantgate.io/v1alpha1\nkind: TenantgateConfig\n"
        "priorityClasses:\n  tenant-burst: {value: 10, preemptionPolicy: Never}\n"
        "  tenant-guaranteed: {value: 1000}\n"
        "profiles: {general: {}}\n"
        f"tenants:\n  {tenant}:\n    namespaces: [{tenant}]\n"
        "    quota: {guaranteed: {cpu: '8'}}\n"
    )
    leader, _ = await leader_behind(api_client, stores, tenant)
    controller = LedgerController(leader, policy=policy)
    pod = {
        "metadata": {
            "name": "p-1",
            "namespace": tenant,
            "uid": "uid-1",
            "resourceVersion": "1",
            "annotations": {"tenantgate.io/reservation": "r-1"},
            "labels": {"tenantgate.io/tier": "guaranteed"},
        },
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Running"},
    }
    facts = pod_facts(pod)
    assert facts is not None
    with caplog.at_level(logging.WARNING, logger="tenants.controller"):
        controller.apply_pod(facts, now=1000.0)
        await drained(leader)
    assert controller.stats.late == {}
    assert controller.stats.confirmed == 1
    assert "expired before the pod was seen" not in caplog.text
    ledger = stored_ledger(admin_client, tenant)
    assert sorted(ledger.reservations) == ["r-0"]
    assert ledger.guaranteed == {"cpu": Quantity.parse("2")}


class _HeldWrites(KubeLedgerClient):
    """A client whose status writes wait until ``release`` is set; ``unreachable`` more of
    them fail as if the API server were down."""

    def __init__(self, api_client: Any) -> None:
        super().__init__(api_client)
        self.release = threading.Event()
        self.release.set()
        self.unreachable = 0

    def write_status(self, name: str, status: Any, *, resource_version: str) -> Any:
        if self.unreachable:
            self.unreachable -= 1
            raise KubeError("connection refused", reason="ConnectionError")
        self.release.wait(30)
        return super().write_status(name, status, resource_version=resource_version)


SLOW_REPLAYS = CasPolicy(
    max_attempts=5,
    conflict_backoff=FAST.conflict_backoff,
    replay_backoff=BackoffPolicy(base=30.0, factor=1.0, cap=30.0, jitter=0.0),
)


async def test_the_leaders_view_follows_the_watch_while_its_changes_wait_to_be_written(
    admin_client: Any, api_client: Any, stores: list[KubeLedgerStore], tenant: str
) -> None:
    other = new_store(api_client, stores)
    await other.transact(tenant, booking("r-0"))
    held = _HeldWrites(api_client)
    leader = leading_store(held, stores, policy=SLOW_REPLAYS)
    await leader.refresh()
    # A controller change whose write failed waits for its retry: the view holds it.
    held.unreachable = 1
    leader.update(tenant, lambda current: (cancel(current, reservation_id="r-0"), None))
    await _until(lambda: leader.stats.writes == 0 and bool(leader._queues[tenant].replays))
    assert dict(leader.get(tenant).reservations) == {}

    await other.transact(tenant, booking("r-1"))  # another replica admits a pod
    written = held.read(tenant)
    assert written is not None
    leader.observe(written)  # its watch event

    # The view shows the new booking with the waiting change still applied, so confirming
    # that pod's reservation is a confirmation, not a late pod counted on its own request.
    assert sorted(leader.get(tenant).reservations) == ["r-1"]
    assert sorted(stored_ledger(admin_client, tenant).reservations) == ["r-0", "r-1"]


async def test_the_watch_never_applies_a_change_twice_while_its_write_is_in_flight(
    admin_client: Any, api_client: Any, stores: list[KubeLedgerStore], tenant: str
) -> None:
    held = _HeldWrites(api_client)
    leader = leading_store(held, stores)
    await leader.transact(tenant, booking("r-0"))
    base = held.read(tenant)
    assert base is not None

    def charge(ledger: TenantLedger) -> tuple[TenantLedger, None]:
        # Not idempotent, as a pod's charge is not: applied twice it counts twice.
        return book(
            ledger,
            reservation_id=f"r-{len(ledger.reservations)}",
            tier="guaranteed",
            amount={"cpu": CPU},
            now=1000.0,
            ttl=60.0,
        ), None

    held.release.clear()
    leader.update(tenant, charge)  # its write is now in flight, held
    await _until(lambda: bool(leader._queues[tenant].writing))
    # The watch delivers the object that write is about to store before the write returns.
    ledger = ledger_from_json(dict(base.status or {}), tenant=tenant)
    landed, _ = charge(ledger)
    leader.observe(
        StoredLedger(tenant, str(int(base.resource_version) + 1), ledger_to_json(landed))
    )
    assert leader.get(tenant).guaranteed == {"cpu": Quantity.parse("2")}

    held.release.set()
    await drained(leader)
    assert stored_ledger(admin_client, tenant).guaranteed == {"cpu": Quantity.parse("2")}
    assert leader.get(tenant).guaranteed == {"cpu": Quantity.parse("2")}


async def test_a_recount_keeps_what_other_replicas_booked_meanwhile(
    admin_client: Any, api_client: Any, stores: list[KubeLedgerStore], tenant: str
) -> None:
    leader, other = new_store(api_client, stores), new_store(api_client, stores)
    leader.set_leading(True)
    await leader.transact(tenant, booking("r-0"))
    await leader.refresh()
    view = leader.get(tenant)
    # The recount's truth, computed from the view: one running pod, r-0 still in flight.
    truth = TenantLedger.of(
        tenant,
        guaranteed={"cpu": Quantity.parse("3")},
        reservations=view.reservations.values(),
        charges={"pod-9": Charge("guaranteed", {"cpu": Quantity.parse("2")})},
    )
    await other.transact(tenant, booking("r-1"))  # booked after the view was taken

    leader.update(tenant, lambda _current: (truth, None))
    await drained(leader)

    ledger = stored_ledger(admin_client, tenant)
    assert sorted(ledger.reservations) == ["r-0", "r-1"]
    # The pod's charge (2) plus both reservations (1 + 1).
    assert ledger.guaranteed == {"cpu": Quantity.parse("4")}
    assert set(leader.get(tenant).charges) == {"pod-9"}


async def test_a_change_with_nothing_to_write_leaves_the_view_following_the_store(
    api_client: Any, stores: list[KubeLedgerStore], tenant: str
) -> None:
    leader, other = new_store(api_client, stores), new_store(api_client, stores)
    leader.set_leading(True)
    await leader.transact(tenant, booking("r-0"))
    # A change that is a no-op on the stored object (r-9 was never booked): nothing is written.
    leader.update(tenant, lambda current: (cancel(current, reservation_id="r-9"), None))
    await drained(leader)
    await other.transact(tenant, booking("r-1"))
    await leader.refresh()
    # The sweep reads this view: it must see what other replicas booked since.
    assert sorted(leader.get(tenant).reservations) == ["r-0", "r-1"]


async def test_expiry_releases_each_reservation_once(
    admin_client: Any, api_client: Any, stores: list[KubeLedgerStore], tenant: str
) -> None:
    first, second = new_store(api_client, stores), new_store(api_client, stores)
    await first.transact(tenant, booking("r-0"))
    await first.transact(tenant, booking("r-1"))
    # Two successive leaders both expire what their (equally old) views hold.
    for leader in (first, second):
        leader.set_leading(True)
        await leader.refresh()
        leader.update(tenant, lambda current: expire(current, now=5000.0))
        await drained(leader)
        leader.set_leading(False)
    ledger = stored_ledger(admin_client, tenant)
    assert (dict(ledger.reservations), ledger.guaranteed) == ({}, {})


async def test_controller_changes_wait_out_an_unreachable_api_server(
    admin_client: Any, api_client: Any, kube: Cluster, stores: list[KubeLedgerStore], tenant: str
) -> None:
    store = new_store(api_client, stores)
    store.set_leading(True)
    await store.transact(tenant, booking("r-1"))
    kube.proxy.add_errors(503, resource=RESOURCE, count=2)

    store.update(tenant, lambda current: (cancel(current, reservation_id="r-1"), None))
    await drained(store)
    assert dict(stored_ledger(admin_client, tenant).reservations) == {}
    assert store.stats.replays == 1


class _BrokenWrites(KubeLedgerClient):
    """A client whose next ``broken`` status writes fail with an unexpected exception."""

    broken = 0

    def write_status(self, name: str, status: Any, *, resource_version: str) -> Any:
        if self.broken:
            self.broken -= 1
            raise RuntimeError("unexpected")
        return super().write_status(name, status, resource_version=resource_version)


async def test_a_controller_change_lost_to_an_unexpected_error_leaves_the_view(
    admin_client: Any, api_client: Any, stores: list[KubeLedgerStore], tenant: str
) -> None:
    broken = _BrokenWrites(api_client)
    store = leading_store(broken, stores)
    await store.transact(tenant, booking("r-1"))
    broken.broken = 1
    store.update(tenant, lambda current: (cancel(current, reservation_id="r-1"), None))
    await drained(store)

    # The cancel was never stored: the view shows the stored ledger again, so the sweep still
    # expires r-1 and the recount sees the ledger as it is.
    assert sorted(stored_ledger(admin_client, tenant).reservations) == ["r-1"]
    assert sorted(store.get(tenant).reservations) == ["r-1"]
    assert store.stats.replays_dropped == 1


async def test_losing_the_lease_drops_unwritten_controller_changes(
    admin_client: Any, api_client: Any, kube: Cluster, stores: list[KubeLedgerStore], tenant: str
) -> None:
    store = new_store(api_client, stores)
    store.set_leading(True)
    await store.transact(tenant, booking("r-1"))
    kube.proxy.add_errors(503, resource=RESOURCE, count=1000)
    store.update(tenant, lambda current: (cancel(current, reservation_id="r-1"), None))
    # Lose the lease only once the change's write has been tried (and refused): waiting on a
    # fixed sleep made the test depend on how loaded the machine was.
    await _until(lambda: kube.proxy.snapshot()["errors"][0]["remaining"] < 1000)
    store.set_leading(False)
    kube.proxy.clear()
    await store.transact(tenant, lambda ledger: (ledger, None))
    await drained(store)
    assert sorted(stored_ledger(admin_client, tenant).reservations) == ["r-1"]
    assert store.stats.replays_dropped == 1


async def test_a_former_leader_writes_nothing_it_read_for_while_leading(
    admin_client: Any, api_client: Any, kube: Cluster, stores: list[KubeLedgerStore], tenant: str
) -> None:
    """The lease goes while a controller change's read is in flight (the proxy holds the read
    for a few seconds, as a slow API server would): once the read returns, the change is
    dropped and counted, never written. It used to be written by the replica that no longer
    led, racing the new leader's recount."""
    store = new_store(api_client, stores)
    store.set_leading(True)
    await store.transact(tenant, booking("r-1"))
    kube.proxy.add_latency(5.0, verb="get", resource=RESOURCE, count=1)
    store.update(tenant, lambda current: (cancel(current, reservation_id="r-1"), None))
    # The latency fault is used up when the read reaches the proxy: the read is in flight.
    await _until(lambda: not kube.proxy.snapshot()["latencies"])
    store.set_leading(False)
    assert store.stats.replays_dropped == 0  # nothing was queued: it is in flight
    await _until(lambda: store.stats.replays_dropped == 1)
    await drained(store)
    assert store.stats.replays == 0
    assert sorted(stored_ledger(admin_client, tenant).reservations) == ["r-1"]


async def _until(check: Callable[[], bool], *, interval: float = 0.01) -> None:
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        if check():
            return
        await asyncio.sleep(interval)
    raise AssertionError("timed out")


async def test_refresh_reads_every_ledger(
    api_client: Any, stores: list[KubeLedgerStore], tenant: str
) -> None:
    writer, reader = new_store(api_client, stores), new_store(api_client, stores)
    await writer.transact(tenant, booking("r-1"))
    await writer.transact(f"{tenant}-x", booking("r-2"))
    assert reader.snapshot() == {}
    assert await reader.refresh() >= 2
    snapshot = reader.snapshot()
    assert sorted(snapshot[tenant].reservations) == ["r-1"]
    assert sorted(snapshot[f"{tenant}-x"].reservations) == ["r-2"]


async def test_metrics(api_client: Any, stores: list[KubeLedgerStore], tenant: str) -> None:
    store = new_store(api_client, stores)
    await asyncio.gather(*(store.transact(tenant, booking(f"r-{n}")) for n in range(3)))
    registry = CollectorRegistry()
    registry.register(LedgerStoreCollector(store))
    text = generate_latest(registry).decode()
    assert f"tenantgate_ledger_cas_writes_total {float(store.stats.writes)}" in text
    assert "tenantgate_ledger_cas_conflicts_total 0.0" in text
    assert "tenantgate_ledger_leading 0.0" in text


# --------------------------------------------------------------------------- rebase


def _reservation(rid: str, cpu: str, *, pod: str | None = None) -> Reservation:
    return Reservation(rid, "guaranteed", {"cpu": Quantity.parse(cpu)}, 0.0, 100.0, pod)


def _ledger(*reservations: Reservation, charged: str = "0") -> TenantLedger:
    total = sum((r.amount["cpu"].nanos for r in reservations), Quantity.parse(charged).nanos)
    return TenantLedger.of(
        "t", guaranteed={"cpu": Quantity(total)} if total else {}, reservations=reservations
    )


def test_rebase_keeps_new_reservations_and_drops_cancelled_ones() -> None:
    a, b, c = _reservation("a", "1"), _reservation("b", "1"), _reservation("c", "2")
    base = _ledger(a, b)  # what the recount saw
    replacement = _ledger(a, b, charged="5")  # its truth: 5 cpus charged, a and b in flight
    current = _ledger(a, c)  # meanwhile b was cancelled and c booked
    result = rebase(replacement, base=base, current=current)
    assert sorted(result.reservations) == ["a", "c"]
    assert result.guaranteed == {"cpu": Quantity.parse("8")}


def test_rebase_keeps_what_the_replacement_did_to_reservations_it_knew() -> None:
    a, b = _reservation("a", "1"), _reservation("b", "1")
    grown = _reservation("b", "3", pod="p")
    base = _ledger(a, b)
    replacement = _ledger(b, charged="1")  # a was consumed by its pod (now charged)
    current = _ledger(a, grown)  # meanwhile b was topped up and bound
    result = rebase(replacement, base=base, current=current)
    assert dict(result.reservations) == {"b": grown}
    assert result.guaranteed == {"cpu": Quantity.parse("4")}
    assert result.reservation_for_pod("p") == grown


def test_rebase_merges_queued_entries_like_reservations() -> None:
    settled = Queued("s", 100, 1.0, None, "pod-s")
    lapsing = Queued("l", 100, 2.0, 50.0)
    base = TenantLedger.of("t", queued=[settled, lapsing])
    # The recount released s (its pod was ungated) and kept l; meanwhile admission queued n
    # and the validating webhook bound l.
    replacement = TenantLedger.of("t", queued=[lapsing])
    bound = Queued("l", 100, 2.0, 50.0, "pod-l")
    new = Queued("n", 500, 3.0, 60.0)
    current = TenantLedger.of("t", queued=[settled, bound, new])
    result = rebase(replacement, base=base, current=current)
    assert dict(result.queued) == {"l": bound, "n": new}


# --------------------------------------------------------------------------- the admitter


def _patched(pod: dict[str, Any], verdict: Verdict) -> dict[str, Any]:
    assert verdict.patched is not None
    result: dict[str, Any] = jsonpatch.make_patch(pod, verdict.patched).apply(copy.deepcopy(pod))
    return result


async def test_the_admitter_books_through_the_shared_ledger(
    admin_client: Any, api_client: Any, stores: list[KubeLedgerStore]
) -> None:
    replica_a, replica_b = new_store(api_client, stores), new_store(api_client, stores)
    policy = make_policy()
    first, second = PolicyAdmitter(policy, replica_a), PolicyAdmitter(policy, replica_b)
    pod = make_pod(cpu="1")

    mutated = await first.mutate(create(pod, uid="u-1"), now=1000.0)
    assert mutated.allowed
    final = stored_pod(_patched(pod, mutated), pod_uid="pod-1")
    # Validation lands on the other replica: it finds the reservation in the shared object.
    validated = await second.validate(create(final, uid="u-1"), now=1000.0)
    assert validated.allowed
    assert validated.audit_annotations["tier"] == "guaranteed"

    ledger = stored_ledger(admin_client, "team-a")
    [reservation] = ledger.reservations.values()
    assert reservation.pod_uid == "pod-1"
    assert reservation.amount["cpu"] == CPU


async def test_validation_fails_closed_when_the_ledger_is_unavailable(
    api_client: Any, kube: Cluster, stores: list[KubeLedgerStore]
) -> None:
    admitter = PolicyAdmitter(make_policy(), new_store(api_client, stores))
    pod = stored_pod(make_pod(cpu="1"), pod_uid="pod-1")
    kube.proxy.add_errors(503, resource=RESOURCE, count=1000)

    verdict = await admitter.validate(create(pod, uid="u-1"), now=1000.0)

    assert not verdict.allowed
    assert (verdict.code, verdict.reason) == (503, "ServiceUnavailable")
    assert verdict.message.startswith(
        "tenant team-a: cannot check the quota ledger: the Kubernetes API server is unreachable"
    )
    assert verdict.message.endswith("; retry")


async def test_mutation_fails_the_call_when_the_ledger_is_unavailable(
    api_client: Any, kube: Cluster, stores: list[KubeLedgerStore]
) -> None:
    # The webhook call then fails and the API server applies failurePolicy: Ignore.
    admitter = PolicyAdmitter(make_policy(), new_store(api_client, stores))
    kube.proxy.add_errors(503, resource=RESOURCE, count=1000)
    with pytest.raises(LedgerUnavailable, match="cannot check the quota ledger"):
        await admitter.mutate(create(make_pod(cpu="1"), uid="u-1"), now=1000.0)
