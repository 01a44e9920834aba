"""The cohorts block of /status and the cohort table of `tenantgate usage`."""

from __future__ import annotations

from admission.commands.usage import render
from admission.status import StatusSources, status_document
from tests.tenants.cohorts.test_admission import pod, policy
from tests.tenants.test_decisions import Chain


def test_status_and_usage_show_the_cohort() -> None:
    """/status's cohorts block and `tenantgate usage`'s cohort table, from real bookings."""
    chain = Chain(policy())
    chain.admit(pod("team-a", "4"), uid="a1", pod_uid="a1")
    chain.admit(pod("team-a", "3"), uid="a2", pod_uid="a2")
    chain.admit(pod("team-b", "2"), uid="b1", pod_uid="b1")
    sources = StatusSources(
        policy=lambda: chain.admitter.policy,
        ledgers=lambda: chain.ledger.snapshot(),
        synced=lambda: True,
        mode="offline",
    )
    document = status_document(sources, now=0.0)
    assert document["cohorts"] == {
        "research": {
            "cohorts": ["research"],
            "members": ["team-a", "team-b"],
            "capacity": {"cpu": "12"},
            "free": {"cpu": "6"},
            "borrowed": {"team-a": {"cpu": "3"}, "team-b": {}},
            "lent": {"team-a": {}, "team-b": {"cpu": "6"}},
            "shares": {"team-a": 0.25, "team-b": 0.0},
            "fairShares": {"team-a": 1.0, "team-b": 0.5},
        }
    }
    table = render(document)
    assert "research  cpu       12        6     3 (team-a 3)" in table
    assert "research shares: team-a 25% of a fair 100%, team-b 0% of a fair 50%" in table
