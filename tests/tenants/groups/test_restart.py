"""A restart (or a new leader) rebuilds pod groups from the pods (tenants/controller.py)."""

from __future__ import annotations

from typing import Any

from classifier.quantities import Quantity
from tenants.controller import LedgerController, pod_facts
from tenants.groups.release import book_group, plan_groups
from tenants.ledger import MemoryLedger
from tests.tenants.conftest import CONFIG, make_policy

POLICY = make_policy(
    CONFIG.replace(
        """  other:
    namespaces: [other]""",
        """  g:
    namespaces: [g]
    quota: {guaranteed: {cpu: "12"}}
  other:
    namespaces: [other]""",
    )
)


def member(index: int, *, gated: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"train-{index}",
            "namespace": "g",
            "uid": f"uid-{index}",
            "resourceVersion": str(100 + index),
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"tenantgate.io/tier": "queued" if gated else "guaranteed"},
            "annotations": {
                "tenantgate.io/group": "labels/train",
                "tenantgate.io/group-size": "8",
                "tenantgate.io/reservation": f"e-{index}",
            },
        },
        "spec": {
            "priority": 1000,
            "containers": [{"name": "w", "resources": {"requests": {"cpu": "1"}}}],
        },
        "status": {"phase": "Pending" if gated else "Running"},
    }
    if gated:
        body["spec"]["schedulingGates"] = [{"name": "tenantgate.io/quota"}]
    return body


def facts(index: int, *, gated: bool) -> Any:
    found = pod_facts(member(index, gated=gated))
    assert found is not None
    return found


def test_a_leader_dying_between_booking_and_the_last_gate_leaves_the_booking_to_the_next() -> None:
    store = MemoryLedger()
    first = LedgerController(store, policy=POLICY)
    first.replace_pods([facts(i, gated=True) for i in range(8)], now=1000.0, initial=True)
    queue = first.queues.queues["g"]
    [group] = plan_groups(
        queue,
        quota=POLICY.tenants["g"].quota,
        ledger=store.get("g"),
        policy=POLICY.tenants["g"].group_queue(),
        now=1000.0,
        running=first.running_groups.running,
        parked=queue.is_parked,
    ).releases
    booked = store.update(
        "g",
        lambda ledger: book_group(
            ledger,
            quota=POLICY.tenants["g"].quota,
            tier="guaranteed",
            members=group.members,
            now=1000.0,
            ttl=3600,
        ),
    )
    assert booked.booked
    # The leader removed 3 gates, then died; the next one lists the pods.
    listed = [facts(i, gated=i >= 3) for i in range(8)]
    second = LedgerController(store, policy=POLICY)
    second.replace_pods(listed, now=1001.0, initial=True)
    ledger = store.get("g")
    assert ledger.guaranteed["cpu"] == Quantity.parse("8")  # 3 charged + 5 still booked
    assert second.running_groups.running("g/labels/train")
    queue = second.queues.queues["g"]
    plan = plan_groups(
        queue,
        quota=POLICY.tenants["g"].quota,
        ledger=ledger,
        policy=POLICY.tenants["g"].group_queue(),
        now=1001.0,
        running=second.running_groups.running,
        parked=queue.is_parked,
    )
    assert sorted(m.name for r in plan.releases for m in r.members) == [
        f"train-{i}" for i in range(3, 8)
    ]
    # Booked already: releasing them books nothing more.
    members = [m for r in plan.releases for m in r.members]
    again = store.update(
        "g",
        lambda ledger: book_group(
            ledger,
            quota=POLICY.tenants["g"].quota,
            tier="guaranteed",
            members=members,
            now=1001.0,
            ttl=3600,
        ),
    )
    assert again.booked
    assert store.get("g").guaranteed["cpu"] == Quantity.parse("8")
