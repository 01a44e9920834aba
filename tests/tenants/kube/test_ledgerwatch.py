"""Every replica's view follows the TenantLedger objects, and holds are stored as holds.

Through the official client against the real API server, as tenantgate's ServiceAccount
through the fault proxy: one store writes (a replica admitting, or the lease holder expiring),
another only watches; its view, which ``/status`` and the usage metrics show, follows within a
watch event. What was stored is read back as the admin.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tenants.decisions import PolicyAdmitter
from tenants.kube.connection import Connection
from tenants.kube.ledgerstore import KubeLedgerClient, KubeLedgerStore, StoredLedger
from tenants.kube.ledgerwatch import LedgerWatch
from tenants.ledger import expire
from tests.tenants.conftest import create, make_pod, make_policy
from tests.tenants.conftest import stored as stored_pod
from tests.tenants.kube import test_ledgerstore
from tests.tenants.kube.test_ledgerstore import (
    FAST,
    _patched,
    drained,
    stored_ledger,
)

pytestmark = pytest.mark.anyio

# The ledger store tests' client: tenantgate's ServiceAccount, through the fault proxy.
api_client = test_ledgerstore.api_client

NOW = 1000.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def replicas(api_client: Any) -> AsyncIterator[list[KubeLedgerStore]]:
    made = [KubeLedgerStore(KubeLedgerClient(api_client), policy=FAST) for _ in range(2)]
    yield made
    for store in made:
        await store.close()


@pytest.fixture
async def watched(
    connection: Connection, replicas: list[KubeLedgerStore]
) -> AsyncIterator[KubeLedgerStore]:
    """The second replica, watching the ledgers into its view."""
    watch = LedgerWatch(connection, replicas[1], watch_timeout=5)
    watch.start(asyncio.get_running_loop())
    await until(lambda: watch.synced, "the first list")
    yield replicas[1]
    await watch.stop()


async def until(check: Any, what: str) -> None:
    for _ in range(3000):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_follower_sees_holds_become_reservations_and_expire(
    admin_client: Any, replicas: list[KubeLedgerStore], watched: KubeLedgerStore
) -> None:
    writer = replicas[0]
    policy = make_policy()
    admitter = PolicyAdmitter(policy, writer)
    pod = make_pod(cpu="1")
    mutated = await admitter.mutate(create(pod, uid="mutate"), now=NOW)
    rid = mutated.audit_annotations["reservation"]

    # Stored as a hold: no pod, the short TTL.
    [hold] = stored_ledger(admin_client, "team-a").reservations.values()
    assert (hold.id, hold.pod_uid, hold.expires_at) == (rid, None, NOW + policy.hold_ttl)
    await until(lambda: rid in watched.get("team-a").reservations, "the follower to see it")
    assert watched.get("team-a").reservations[rid].held

    final = stored_pod(_patched(pod, mutated), pod_uid="pod-1")
    assert (await admitter.validate(create(final, uid="validate"), now=NOW + 1)).allowed
    reservation = stored_ledger(admin_client, "team-a").reservations[rid]
    assert (reservation.pod_uid, reservation.expires_at) == ("pod-1", NOW + 1 + 120)
    await until(
        lambda: not watched.get("team-a").reservations[rid].held, "the follower to see it bound"
    )

    # The lease holder expires it; the follower's view (its /status) follows.
    writer.set_leading(True)
    writer.update("team-a", lambda ledger: expire(ledger, now=NOW + 500))
    await drained(writer)
    await until(lambda: not watched.get("team-a").reservations, "the follower to see it expire")
    assert watched.get("team-a").guaranteed == {}
    assert watched.stats.observed >= 3


async def test_a_stale_event_never_rolls_the_view_back(
    replicas: list[KubeLedgerStore], watched: KubeLedgerStore
) -> None:
    await watched.transact("team-x", lambda ledger: (ledger, None))
    known = watched._known["team-x"].resource_version
    watched.observe(StoredLedger("team-x", str(int(known) - 1), {"used": {"burst": {"cpu": "9"}}}))
    assert watched.get("team-x").burst == {}
