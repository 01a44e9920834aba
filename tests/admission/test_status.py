"""``/status`` and the usage metrics: one consistent view of quotas and the ledger."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from starlette.applications import Starlette

from admission.status import StatusCollector, StatusSources, status_document, status_route
from classifier.quantities import Quantity
from tenants.configfile import load_text
from tenants.controller import ControllerStats
from tenants.ledger import MemoryLedger, TenantLedger, book, ledger_from_usage
from tenants.recent import RecentDecisions

CONFIG = """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 1000}
profiles: {general: {}}
tenants:
  team-a:
    namespaces: [team-a]
    quota:
      guaranteed: {cpu: "4", memory: 8Gi}
      burst: {ratio: 1.5}
  ml:
    namespaces: [ml]
    quota:
      guaranteed: {nvidia.com/gpu: "4"}
      burst: {max: {nvidia.com/gpu: "6"}}
"""


def q(text: str) -> Quantity:
    return Quantity.parse(text)


def ledgers() -> dict[str, TenantLedger]:
    team_a = TenantLedger.of(
        "team-a",
        guaranteed={"cpu": q("3500m"), "memory": q("6Gi")},
        burst={"cpu": q("1")},
    )
    team_a = book(
        team_a, reservation_id="r-1", tier="burst", amount={"cpu": q("500m")}, now=0, ttl=60
    )
    return {"team-a": team_a, "retired": TenantLedger.of("retired", guaranteed={"cpu": q("1")})}


def sources(**overrides: Any) -> StatusSources:
    policy = load_text(CONFIG).policy
    stats = ControllerStats()
    stats.unadmitted["team-a"] = 2
    stats.released["deleted"] = 5
    stats.last_drift[("team-a", "guaranteed", "cpu")] = q("-500m")
    stats.last_recount_at = 1234.5
    values: dict[str, Any] = {
        "policy": lambda: policy,
        "ledgers": ledgers,
        "synced": lambda: True,
        "mode": "kubeconfig",
        "cluster": "https://10.0.0.1:6443",
        "stats": lambda: stats,
        "pods": lambda: 7,
        "config": lambda: {"file": "/etc/tenantgate/config.yaml"},
        "identity": lambda: {"user": "tenantgate-sa", "source": "SelfSubjectReview"},
    }
    values.update(overrides)
    return StatusSources(**values)


def test_the_status_document_has_every_tenant_with_canonical_quantities() -> None:
    document = status_document(sources(), now=99.0)
    assert document == {
        "tenants": {
            "ml": {
                "guaranteed": {"nvidia.com/gpu": "4"},
                "ceiling": {"nvidia.com/gpu": "6"},
                "used": {"guaranteed": {}, "burst": {}},
                "reservations": 0,
                "holds": 0,
                "pods": 0,
            },
            "team-a": {
                "guaranteed": {"cpu": "4", "memory": "8Gi"},
                "ceiling": {"cpu": "6", "memory": "12Gi"},
                "used": {
                    "guaranteed": {"cpu": "3500m", "memory": "6Gi"},
                    "burst": {"cpu": "1500m"},
                },
                "reservations": 1,
                "holds": 1,
                "pods": 0,
            },
        },
        "synced": True,
        "mode": "kubeconfig",
        "cluster": "https://10.0.0.1:6443",
        "config": {"file": "/etc/tenantgate/config.yaml"},
        "identity": {"user": "tenantgate-sa", "source": "SelfSubjectReview"},
        "pods": 7,
        "lastRecount": 1234.5,
        "generatedAt": 99.0,
        "queue": {},
    }
    assert list(document["tenants"]) == ["ml", "team-a"]


def test_the_status_document_reads_back_as_a_usage_snapshot() -> None:
    snapshot = ledger_from_usage(status_document(sources()))
    assert isinstance(snapshot, MemoryLedger)
    team_a = snapshot.get("team-a")
    assert team_a.guaranteed == {"cpu": q("3500m"), "memory": q("6Gi")}
    assert team_a.burst == {"cpu": q("1500m")}


def test_get_status_answers_json() -> None:
    app = Starlette(routes=[status_route(sources(synced=lambda: False, mode="offline"))])

    async def get() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.get("/status")

    response = asyncio.run(get())
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["synced"] is False
    assert body["mode"] == "offline"
    assert body["tenants"]["team-a"]["used"]["burst"] == {"cpu": "1500m"}


def test_the_collector_exposes_usage_restarts_and_drift() -> None:
    registry = CollectorRegistry()
    registry.register(
        StatusCollector(
            sources(),
            watch_restarts=lambda: {("pods", "expired"): 2, ("pods", "closed"): 5},
            config_reload_failures=lambda: 1,
            config_ok=lambda: False,
        )
    )
    text = generate_latest(registry).decode()
    expected = [
        'tenantgate_tenant_guaranteed{resource="memory",tenant="team-a"} 8.589934592e+09',
        'tenantgate_tenant_ceiling{resource="cpu",tenant="team-a"} 6.0',
        'tenantgate_tenant_used{resource="cpu",tenant="team-a",tier="guaranteed"} 3.5',
        'tenantgate_tenant_used{resource="cpu",tenant="team-a",tier="burst"} 1.5',
        'tenantgate_tenant_used{resource="nvidia.com/gpu",tenant="ml",tier="burst"} 0.0',
        'tenantgate_tenant_reservations{tenant="team-a"} 1.0',
        "tenantgate_cluster_synced 1.0",
        'tenantgate_watch_restarts_total{reason="expired",resource="pods"} 2.0',
        "tenantgate_config_reload_failures_total 1.0",
        "tenantgate_config_last_reload_ok 0.0",
        'tenantgate_pods_unadmitted_total{tenant="team-a"} 2.0',
        'tenantgate_pods_released_total{reason="deleted"} 5.0',
        'tenantgate_ledger_drift{resource="cpu",tenant="team-a",tier="guaranteed"} -0.5',
        "tenantgate_pods_tracked 7.0",
    ]
    for line in expected:
        assert line in text, line
    assert 'tenant="retired"' not in text  # only configured tenants


def test_without_a_controller_there_are_no_controller_metrics() -> None:
    registry = CollectorRegistry()
    registry.register(StatusCollector(sources(stats=lambda: None, pods=lambda: None)))
    text = generate_latest(registry).decode()
    assert "tenantgate_tenant_used" in text
    assert "tenantgate_pods_unadmitted" not in text
    assert "tenantgate_pods_tracked" not in text


def get_status(query: str, **overrides: Any) -> httpx.Response:
    app = Starlette(routes=[status_route(sources(**overrides))])

    async def get() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.get(f"/status{query}")

    return asyncio.run(get())


def test_a_search_answers_one_page_of_the_matching_tenants() -> None:
    body = get_status("?q=TEAM&offset=0&limit=1").json()

    assert list(body["tenants"]) == ["team-a"]
    assert body["page"] == {"matched": 1, "total": 2, "offset": 0, "limit": 1}


def test_pages_follow_the_name_order() -> None:
    first = get_status("?limit=1").json()
    second = get_status("?limit=1&offset=1").json()
    past = get_status("?limit=1&offset=5").json()

    assert list(first["tenants"]) == ["ml"]
    assert list(second["tenants"]) == ["team-a"]
    assert past["tenants"] == {}
    assert past["page"] == {"matched": 2, "total": 2, "offset": 5, "limit": 1}


def test_without_a_query_every_tenant_is_there_and_no_page() -> None:
    body = get_status("").json()

    assert list(body["tenants"]) == ["ml", "team-a"]
    assert "page" not in body


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ("?limit=0", "limit must be between 1 and 1000, got 0"),
        ("?limit=5000", "limit must be between 1 and 1000, got 5000"),
        ("?offset=-1", "offset must be a whole number, got '-1'"),
        ("?limit=ten", "limit must be a whole number, got 'ten'"),
    ],
)
def test_a_bad_page_is_a_400_that_says_why(query: str, error: str) -> None:
    response = get_status(query)

    assert response.status_code == 400
    assert response.json() == {"error": error}


def test_recent_decisions_certificate_replica_and_readiness_come_from_their_sources() -> None:
    recent = RecentDecisions()
    recent.denied(
        at=5.0,
        tenant="team-a",
        pod="team-a/big",
        operation="CREATE",
        endpoint="mutate",
        cause="over_quota",
        message="exceeded tenant quota: team-a",
    )
    document = status_document(
        sources(
            recent=recent.to_json,
            certificate=lambda: {"notAfter": 2000.0, "notBefore": 1000.0, "serial": "0A"},
            replica=lambda: {"role": "follower", "election": True, "holder": "tg-0"},
            readiness=lambda: {"ready": False, "checks": {"certs": {"ok": False}}},
            version="9.9.9",
        ),
        now=99.0,
    )

    assert document["recent"]["denials"][0]["message"] == "exceeded tenant quota: team-a"
    assert document["recent"]["releases"] == []
    assert document["certificate"] == {"notAfter": 2000.0, "notBefore": 1000.0, "serial": "0A"}
    assert document["replica"]["role"] == "follower"
    assert document["readiness"]["ready"] is False
    assert document["version"] == "9.9.9"


def test_no_certificate_served_yet_is_null() -> None:
    assert status_document(sources(certificate=lambda: None))["certificate"] is None
