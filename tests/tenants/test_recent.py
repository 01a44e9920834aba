"""The rings of recent denials and releases behind ``/status``'s ``recent``."""

from __future__ import annotations

import pytest

from tenants.recent import MESSAGE_LIMIT, RecentDecisions


def deny(recent: RecentDecisions, index: int, message: str = "over quota") -> None:
    recent.denied(
        at=float(index),
        tenant="team-a",
        pod=f"team-a/pod-{index}",
        operation="CREATE",
        endpoint="mutate",
        cause="over_quota",
        message=message,
    )


def test_each_ring_keeps_only_the_latest_entries_newest_first() -> None:
    recent = RecentDecisions(limit=3)
    for index in range(5):
        deny(recent, index)
    recent.released(
        at=9.0,
        tenant="team-q",
        pod="team-q/job-1",
        outcome="released",
        tier="guaranteed",
        waited_seconds=12.34567,
        message="released onto tenant team-q's guaranteed room after waiting 12.3s",
    )

    document = recent.to_json()

    assert document["limit"] == 3
    assert [entry["pod"] for entry in document["denials"]] == [
        "team-a/pod-4",
        "team-a/pod-3",
        "team-a/pod-2",
    ]
    assert document["denials"][0] == {
        "at": 4.0,
        "tenant": "team-a",
        "pod": "team-a/pod-4",
        "operation": "CREATE",
        "endpoint": "mutate",
        "reason": "over_quota",
        "message": "over quota",
    }
    # A flood of denials never pushes the releases out: one ring each.
    assert document["releases"] == [
        {
            "at": 9.0,
            "tenant": "team-q",
            "pod": "team-q/job-1",
            "outcome": "released",
            "tier": "guaranteed",
            "waitedSeconds": 12.346,
            "message": "released onto tenant team-q's guaranteed room after waiting 12.3s",
        }
    ]


def test_messages_are_one_line_and_cut_to_the_limit() -> None:
    recent = RecentDecisions()
    deny(recent, 1, message="first line\nsecond   line")
    deny(recent, 2, message="x" * (MESSAGE_LIMIT * 3))

    long, short = recent.to_json()["denials"]

    assert short["message"] == "first line second line"
    assert len(long["message"]) == MESSAGE_LIMIT
    assert long["message"].endswith("...")


def test_a_ring_holds_at_least_one_entry() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        RecentDecisions(limit=0)
