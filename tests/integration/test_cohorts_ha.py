"""A cohort on three replicas sharing the ``kubernetes`` ledger, on the real control plane.

Four tenants of one cohort lend nothing of their guarantees (``lendingLimit: 0``): what they
borrow is the cohort's own quota, so its capacity is exact whatever order the creates come
in. 600 creates race across the four namespaces through three ``tenantgate serve`` processes
while the lease holder is SIGKILLed; the pods that exist never exceed the cohort's capacity,
its borrowed room or any tenant's limits, and each TenantLedger equals the truth after the
next lease holder's recount.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tenants.kube.cohortclient import COHORT_PLURAL
from tenants.kube.ledgerstore import GROUP, PLURAL, VERSION
from testcluster import Cluster
from tests.integration.harness import api_client, create_namespace, create_or_deny, eventually
from tests.integration.test_ha import HACluster, _recounts, ha_cluster, replica_warnings

pytestmark = pytest.mark.timeout(900)

TENANTS = ("team-a", "team-b", "team-c", "team-d")
GUARANTEED = 10
BORROWING_LIMIT = 15
COHORT_QUOTA = 30
CAPACITY = len(TENANTS) * GUARANTEED + COHORT_QUOTA

CONFIG = (
    """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst-over-share: {{value: 5, preemptionPolicy: Never}}
  tenant-burst: {{value: 10, preemptionPolicy: Never}}
  tenant-guaranteed: {{value: 1000}}
profiles: {{general: {{}}}}
reservationTTLSeconds: {ttl}
ledger: {{backend: {backend}}}
cohorts:
"""
    + f'  lab: {{{{quota: {{{{pods: "{COHORT_QUOTA}"}}}}}}}}\ntenants:\n'
    + "".join(
        f"""\
  {name}:
    namespaces: [{name}]
    cohort: lab
    lendingLimit: {{{{pods: "0"}}}}
    borrowingLimit: {{{{pods: "{BORROWING_LIMIT}"}}}}
    quota: {{{{guaranteed: {{{{pods: "{GUARANTEED}"}}}}}}}}
"""
        for name in TENANTS
    )
)


def pod(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "cohort-race"}},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "busybox",
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                }
            ]
        },
    }


def pods_by_tenant(cluster: HACluster) -> dict[str, Counter[str]]:
    """The truth: per namespace, the live pods by tier label. A pod without one was admitted
    while the mutating webhook failed open (the leader was being killed): the validating
    webhook booked it itself, which it does only within the guarantee."""
    out: dict[str, Counter[str]] = {}
    for namespace in TENANTS:
        items = cluster.read("CoreV1Api.list_namespaced_pod", namespace)["items"]
        out[namespace] = Counter(
            p["metadata"].get("labels", {}).get("tenantgate.io/tier", "guaranteed") for p in items
        )
    return out


def ledger_pods(cluster: HACluster, tenant: str) -> dict[str, str]:
    found = cluster.read(
        "CustomObjectsApi.get_cluster_custom_object", GROUP, VERSION, PLURAL, tenant
    )
    status = found.get("status") or {}
    used = status.get("used") or {}
    pending = len(status.get("reservations") or [])
    return {
        "guaranteed": (used.get("guaranteed") or {}).get("pods", "0"),
        "burst": (used.get("burst") or {}).get("pods", "0"),
        "reservations": str(pending),
    }


def stored_state(cluster: HACluster) -> str:
    """Each TenantLedger (usage, reservations by tier and whether bound), the cohort ledger's
    pending entries, and the live pods' tiers by the reservation they name: one line each."""
    lines = []
    for tenant in TENANTS:
        status = (
            cluster.read(
                "CustomObjectsApi.get_cluster_custom_object", GROUP, VERSION, PLURAL, tenant
            ).get("status")
            or {}
        )
        reservations = Counter(
            f"{r.get('tier')}{'/bound' if r.get('podUID') else '/hold'}"
            for r in status.get("reservations") or []
        )
        lines.append(f"TenantLedger {tenant}: used {status.get('used')}, {dict(reservations)}")
    try:
        cohort = (
            cluster.read(
                "CustomObjectsApi.get_cluster_custom_object", GROUP, VERSION, COHORT_PLURAL, "lab"
            ).get("status")
            or {}
        )
        pending = [(e.get("tenant"), e.get("amount")) for e in cohort.get("pending") or []]
        lines.append(f"TenantCohortLedger lab: pending {pending}")
    except client.ApiException as exc:
        lines.append(f"TenantCohortLedger lab: {exc.status}")
    named: Counter[str] = Counter()
    for tenant in TENANTS:
        for item in cluster.read("CoreV1Api.list_namespaced_pod", tenant)["items"]:
            metadata = item["metadata"]
            tier = (metadata.get("labels") or {}).get("tenantgate.io/tier", "unlabelled")
            has = "tenantgate.io/reservation" in (metadata.get("annotations") or {})
            named[f"{tenant} {tier} {'with' if has else 'without'} reservation"] += 1
    lines.append(f"pods: {dict(sorted(named.items()))}")
    return "\n".join(lines)


@pytest.fixture
def cluster(kube: Cluster, kube_cert_dir: Path, tmp_path: Path) -> Iterator[HACluster]:
    admin = api_client(kube.plane.admin_kubeconfig)
    try:
        for name in TENANTS:
            create_namespace(client.CoreV1Api(admin), {"metadata": {"name": name}})
    finally:
        admin.close()
    with ha_cluster(
        kube,
        tmp_path,
        cert_dir=kube_cert_dir,
        guaranteed=GUARANTEED,
        ceiling=CAPACITY,
        config=CONFIG,
    ) as running:
        yield running


def test_600_creates_across_a_cohort_with_the_leader_killed_never_over_lend(
    cluster: HACluster,
) -> None:
    names = [(TENANTS[n % len(TENANTS)], f"p-{n}") for n in range(600)]
    random.Random(23).shuffle(names)
    api = cluster.api_client(pool=64)
    core = client.CoreV1Api(api)
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()
    killed = threading.Event()

    def one(item: tuple[str, str]) -> None:
        namespace, name = item
        outcome = create_or_deny(core, pod(name, namespace))
        with lock:
            outcomes[outcome] += 1
            done = sum(outcomes.values())
        if done >= 150 and not killed.is_set():
            killed.set()
            cluster.leader().kill()

    try:
        with ThreadPoolExecutor(64) as pool:
            list(pool.map(one, names))
    finally:
        api.close()
    assert killed.is_set()

    truth = pods_by_tenant(cluster)
    total = sum(sum(tiers.values()) for tiers in truth.values())
    # What a member borrows is its total past its guarantee, as the pool measures it
    # (tenants/cohorts/borrowing.py), not its burst labels: a member whose orphaned holds filled
    # its guarantee borrowed for pods that, once the holds lapsed, fall within its guarantee.
    # The members lend nothing, so the cohort's quota is all there is to borrow.
    borrowing = {t: max(0, sum(tiers.values()) - GUARANTEED) for t, tiers in truth.items()}
    borrowed = sum(borrowing.values())
    assert total == outcomes["created"]
    # CI keeps nothing but the failure message: it carries the replicas' last warnings and
    # the stored ledgers, so that an over-admission can be traced from CI's output alone.
    assert total <= CAPACITY, (
        f"over the cohort's capacity: {truth}\n{stored_state(cluster)}\n{replica_warnings(cluster)}"
    )
    assert borrowed <= COHORT_QUOTA, (
        f"more borrowed than the cohort has: {truth}\n{stored_state(cluster)}\n"
        f"{replica_warnings(cluster)}"
    )
    for tenant, tiers in truth.items():
        assert set(tiers) <= {"guaranteed", "burst"}, (tenant, tiers)
        assert tiers["guaranteed"] <= GUARANTEED, (tenant, tiers)
        assert borrowing[tenant] <= BORROWING_LIMIT, (tenant, tiers)
    assert borrowed > 0  # the race did borrow

    # Each TenantLedger equals the pods that exist once the new lease holder has recounted
    # and the killed replica's orphaned reservations have expired.
    recounts = _recounts(cluster)
    eventually(lambda: _recounts(cluster) > recounts, "the new lease holder's recount")

    def expected() -> dict[str, dict[str, str]]:
        now = pods_by_tenant(cluster)
        return {
            t: {
                "guaranteed": str(now[t]["guaranteed"]),
                "burst": str(now[t]["burst"]),
                "reservations": "0",
            }
            for t in TENANTS
        }

    seen: list[Any] = []

    def equal() -> bool:
        stored = {t: ledger_pods(cluster, t) for t in TENANTS}
        seen[:] = [stored]
        return stored == expected()

    try:
        eventually(equal, "every TenantLedger to equal the truth", timeout=120)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: expected {expected()}, last {seen}") from None
