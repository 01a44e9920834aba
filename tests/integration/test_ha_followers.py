"""Three replicas sharing the ``kubernetes`` ledger: ``/status`` alike, holds that expire.

Only the lease holder expires, confirms and recounts; the followers watch the TenantLedger
objects, so ``tenantgate usage`` and the usage metrics agree whichever replica is asked,
within seconds of a change (here: holds the lease holder expires, each booked by a different
replica, whose own last write would otherwise stay in its view). Holds are stored as holds in
the TenantLedger, and the lease holder releases them after ``holdTTLSeconds``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

import certs
from testcluster import Cluster
from tests.integration.harness import eventually
from tests.integration.test_ha import (
    CONFIG,
    NAMESPACE,
    HACluster,
    Replica,
    ha_cluster,
    mutate,
    pod,
)
from tests.tlsclient import client_context


@pytest.fixture
def cluster(kube: Cluster, kube_cert_dir: Path, tmp_path: Path) -> Iterator[HACluster]:
    with ha_cluster(kube, tmp_path, cert_dir=kube_cert_dir, guaranteed=40, ceiling=100) as running:
        yield running


def tenant_status(replica: Replica) -> dict[str, Any]:
    code, body = replica.get("/status")
    assert code == 200
    document: dict[str, Any] = json.loads(body)["tenants"]["team-a"]
    return document


def test_every_replica_shows_what_the_lease_holder_expired(cluster: HACluster) -> None:
    context = client_context(certs.MaterialPaths(cluster.cert_dir).ca_cert)
    # One hold booked through each replica: each remembers its own write.
    for n, replica in enumerate(cluster.replicas):
        answer = mutate(replica, context, uid=f"held-{n}")
        assert answer["response"]["allowed"] is True
    eventually(
        lambda: all(tenant_status(r)["holds"] == 3 for r in cluster.replicas),
        "every replica to see the three holds",
    )

    # Nobody validates them: the lease holder expires them after the hold TTL.
    eventually(
        lambda: not cluster.ledger_status().get("reservations"), "the holds to expire", timeout=60
    )
    eventually(
        lambda: all(
            tenant_status(r)["reservations"] == 0
            and tenant_status(r)["used"] == {"guaranteed": {}, "burst": {}}
            for r in cluster.replicas
        ),
        "every replica's /status to follow the TenantLedger",
        timeout=30,
    )
    for replica in cluster.replicas:
        metrics = replica.metrics()
        assert metrics["tenantgate_tenant_reservations{tenant=team-a}"] == 0.0
        assert metrics["tenantgate_tenant_holds{tenant=team-a}"] == 0.0
        assert (
            metrics.get("tenantgate_tenant_used{resource=pods,tenant=team-a,tier=guaranteed}", 0.0)
            == 0.0
        )


def test_creates_refused_after_mutate_hold_the_shared_quota_for_seconds(
    kube: Cluster, kube_cert_dir: Path, tmp_path: Path
) -> None:
    # Reservations would hold the quota for two minutes; holds, for two seconds.
    config = CONFIG.replace("{ttl}", "120") + "holdTTLSeconds: 2\n"
    with ha_cluster(
        kube, tmp_path, cert_dir=kube_cert_dir, guaranteed=2, ceiling=3, config=config
    ) as cluster:
        api = cluster.api_client()
        try:
            core: Any = client.CoreV1Api(api)
            for n in range(3):  # the ceiling: 3 pods
                refused = pod(f"bad-{n}")
                refused["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "50m"}
                with pytest.raises(client.ApiException) as invalid:
                    core.create_namespaced_pod(NAMESPACE, refused)
                assert invalid.value.status == 422
            holds = cluster.ledger_status()["reservations"]
            assert len(holds) == 3
            assert all("podUID" not in hold for hold in holds)
            with pytest.raises(client.ApiException) as locked:
                core.create_namespaced_pod(NAMESPACE, pod("good"))
            assert locked.value.status == 403

            statuses: list[int] = []

            def admitted() -> bool:
                try:
                    core.create_namespaced_pod(NAMESPACE, pod("good"))
                except client.ApiException as exc:
                    statuses.append(exc.status)
                    return False
                return True

            eventually(admitted, "the holds to expire", timeout=60)
            assert set(statuses) <= {403}
            # What remains is the good pod's: a reservation naming it, until the pod is seen.
            eventually(
                lambda: all(
                    "podUID" in r for r in cluster.ledger_status().get("reservations") or []
                ),
                "no holds left",
            )
        finally:
            api.close()
