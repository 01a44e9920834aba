"""Targets, verdicts and the printed table."""

from __future__ import annotations

import pytest

from bench import report


@pytest.mark.parametrize(
    ("op", "limit", "value", "status"),
    [
        ("<=", 250, 249.9, "meets"),
        ("<=", 250, 250, "meets"),
        ("<=", 250, 251, "misses"),
        (">=", 0.5, 0.5, "meets"),
        (">=", 0.5, 0.49, "misses"),
        ("==", 0, 0, "meets"),
        ("==", 0, 3, "misses"),
        ("<=", 250, None, "n/a"),
    ],
)
def test_target_judges(op: str, limit: float, value: float | None, status: str) -> None:
    target = report.Target("k", "title", " µs", op, limit)  # type: ignore[arg-type]

    assert target.judge(value) == status


def test_every_issue_target_is_there() -> None:
    keys = {target.key for target in report.TARGETS}

    assert keys == {
        "core_us_per_pair",
        "throughput_ratio",
        "p99_500_ms",
        "server_errors",
        "tenants_ratio",
        "ledger_ratio",
        "rules_ratio",
        "rest_rss_mib",
        "rebuild_seconds",
        "queue_release_p99_ms",
        "queue_reeval_ratio",
        "queue_admission_ratio",
        "queue_bytes_per_pod",
        "reload_lag_ms",
        "cluster_wall_ratio",
        "cluster_added_p99_ms",
        "cohorts_ratio",
        "groups_admission_ratio",
        "groups_release_p99_ms",
    }


def test_a_figure_measured_at_another_size_is_not_judged() -> None:
    figures = {"core_us_per_pair": 300.0, "rebuild_seconds": 3.0}

    verdicts = {v["key"]: v for v in report.verdicts(figures, {"rebuild_seconds": False})}

    assert verdicts["core_us_per_pair"]["status"] == "misses"
    assert verdicts["rebuild_seconds"]["status"] == "n/a"
    assert verdicts["rebuild_seconds"]["value"] == 3.0
    assert verdicts["throughput_ratio"]["status"] == "n/a"  # not measured


def test_table_shows_value_target_and_status() -> None:
    rows = report.judged_rows({"core_us_per_pair": 180.0}, {})

    text = report.table(rows, heading="target")

    line = next(line for line in text.splitlines() if line.startswith("core:"))
    assert "180 µs" in line
    assert "<= 250 µs" in line
    assert line.endswith("meets")


def test_details_table_has_no_status_columns() -> None:
    text = report.table([report.Row("a figure", "12 ms")], heading="details")

    assert text.splitlines()[0].split() == ["details", "value"]
    assert text.splitlines()[2] == "a figure  12 ms"


@pytest.mark.parametrize(
    ("value", "unit", "shown"),
    [
        (None, " ms", "-"),
        (1500.0, " µs", "1,500 µs"),
        (1.234, "x", "1.23x"),
        (12.34, " s", "12.3 s"),
    ],
)
def test_show(value: float | None, unit: str, shown: str) -> None:
    assert report.show(value, unit) == shown


def test_machine_describes_this_machine() -> None:
    info = report.machine()

    assert info["logical_cpus"]
    assert info["python"].count(".") == 2
    assert "uvicorn" in info["packages"]
