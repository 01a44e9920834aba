"""``tenantgate queue``, the queue in ``tenantgate usage``, and ``review`` telling a queued pod."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from admission.cli import main
from admission.commands import queue as queue_command
from admission.commands import usage as usage_command
from tests.admission.test_commands_review import (
    EXAMPLE_PODS,
    config_file,
    example_config,
    run,
    usage_snapshot,
    write,
)

LISTING: dict[str, Any] = {
    "tenants": {
        "team-a": {
            "pending": 2,
            "pods": [
                {
                    "position": 1,
                    "pod": "team-a/train-0",
                    "priority": 1000,
                    "effectivePriority": 1200,
                    "request": "cpu=2,memory=4Gi,pods=1",
                    "waitedSeconds": 125.4,
                    "releasing": False,
                },
                {
                    "position": 2,
                    "pod": "team-a/train-1",
                    "priority": 100,
                    "effectivePriority": 100,
                    "request": "cpu=1,pods=1",
                    "waitedSeconds": 3.2,
                    "releasing": False,
                },
            ],
        },
        "team-b": {"pending": 0, "pods": []},
    },
    "leading": True,
    "generatedAt": 1.0,
}


def test_the_queue_table_lists_every_pod_in_order() -> None:
    assert queue_command.render(LISTING).splitlines() == [
        "TENANT  POSITION  POD             PRIORITY  EFFECTIVE  REQUEST                  WAITED",
        "team-a  1         team-a/train-0  1000      1200       cpu=2,memory=4Gi,pods=1  2m05s",
        "        2         team-a/train-1  100       100        cpu=1,pods=1             3s",
        "",
        "nothing waiting in: team-b",
    ]


def test_an_empty_queue_and_a_follower_say_so() -> None:
    text = queue_command.render({"tenants": {"team-a": {"pods": []}}, "leading": False})
    assert text.splitlines() == [
        "no pod is waiting",
        "",
        "this replica does not hold the controller Lease: ask the leader for the queue",
    ]


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0s"), (59.9, "59s"), (61, "1m01s"), (7322, "2h02m")]
)
def test_waited(seconds: float, text: str) -> None:
    assert queue_command.waited(seconds) == text


def test_an_unreachable_server_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["queue", "--server", "http://127.0.0.1:9"])
    assert code == 1
    assert capsys.readouterr().err.startswith("tenantgate queue: cannot reach ")


def test_usage_counts_the_pods_queued() -> None:
    document = usage_snapshot("4", "0")
    document["tenants"]["team-a"]["queue"] = {"pending": 3, "oldestWaitSeconds": 42.0}
    assert "team-a: 3 pods queued, the oldest for 42s (tenantgate queue shows them)" in (
        usage_command.render(document)
    )


def test_review_tells_a_queued_pod_its_position_at_todays_usage(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = example_config()
    config["tenants"]["team-a"]["overQuota"] = "queue"
    usage = usage_snapshot("4", "2")
    usage["tenants"]["team-a"]["queued"] = [
        {"id": "r-1", "priority": 1000, "queuedAt": 1_700_000_000.0}
    ]
    code, out, _ = run(
        capsys,
        "-f",
        str(EXAMPLE_PODS / "web.yaml"),
        "--config",
        config_file(tmp_path, config),
        "--usage",
        write(tmp_path, "usage.json", json.dumps(usage)),
    )
    assert code == 0
    lines = out.splitlines()
    assert lines[1].split()[5:7] == ["queued", "queued"]
    assert lines[-1].startswith("  queued: team-a is at its guarantee (cpu 4/4); position 2 of 2")


def test_a_pod_group_is_one_line_with_its_members_and_total() -> None:
    listing = {
        "tenants": {
            "team-a": {
                "pending": 5,
                "pods": [
                    {
                        "position": 1,
                        "pod": "team-a/train-42",
                        "group": "team-a/labels/train-42",
                        "members": 5,
                        "size": 8,
                        "priority": 1000,
                        "effectivePriority": 1000,
                        "request": "cpu=5,nvidia.com/gpu=5,pods=5",
                        "waitedSeconds": 61.0,
                        "releasing": False,
                    }
                ],
            }
        },
        "leading": True,
    }
    assert queue_command.render(listing).splitlines()[1] == (
        "team-a  1         team-a/train-42 (group: 5 of 8 members)  1000      1000       "
        "cpu=5,nvidia.com/gpu=5,pods=5  1m01s"
    )
