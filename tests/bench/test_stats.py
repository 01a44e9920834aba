"""Percentiles, centres and ratios used by every benchmark figure."""

from __future__ import annotations

import pytest

from bench import stats


@pytest.mark.parametrize(
    ("values", "p", "expected"),
    [
        ([5.0], 50, 5.0),
        ([5.0], 99, 5.0),
        ([3.0, 1.0, 2.0], 0, 1.0),
        ([3.0, 1.0, 2.0], 50, 2.0),
        ([3.0, 1.0, 2.0], 100, 3.0),
        ([float(v) for v in range(1, 101)], 50, 50.0),
        ([float(v) for v in range(1, 101)], 90, 90.0),
        ([float(v) for v in range(1, 101)], 99, 99.0),
        ([float(v) for v in range(1, 101)], 99.5, 100.0),
        ([float(v) for v in range(1, 11)], 99, 10.0),  # rank ceil(9.9) = 10: the maximum
        ([float(v) for v in range(1, 11)], 25, 3.0),  # rank ceil(2.5) = 3
    ],
)
def test_percentile_is_nearest_rank(values: list[float], p: float, expected: float) -> None:
    assert stats.percentile(values, p) == expected


def test_percentile_never_invents_a_value() -> None:
    values = [1.0, 10.0]

    assert {stats.percentile(values, p) for p in range(0, 101)} <= set(values)


def test_percentile_does_not_reorder_its_input() -> None:
    values = [3.0, 1.0, 2.0]

    stats.percentile(values, 50)

    assert values == [3.0, 1.0, 2.0]


@pytest.mark.parametrize("p", [-1, 100.5])
def test_percentile_outside_0_100_is_an_error(p: float) -> None:
    with pytest.raises(ValueError, match="within 0-100"):
        stats.percentile([1.0], p)


def test_no_values_is_an_error() -> None:
    with pytest.raises(ValueError, match="no values"):
        stats.percentile([], 50)
    with pytest.raises(ValueError, match="no values"):
        stats.median([])
    with pytest.raises(ValueError, match="no values"):
        stats.mean([])


@pytest.mark.parametrize(
    ("values", "expected"),
    [([1.0], 1.0), ([1.0, 9.0], 5.0), ([9.0, 1.0, 5.0], 5.0), ([4.0, 1.0, 3.0, 2.0], 2.5)],
)
def test_median(values: list[float], expected: float) -> None:
    assert stats.median(values) == expected


def test_robust_centre_ignores_one_slow_round() -> None:
    assert stats.robust_centre([100.0, 101.0, 99.0, 100.0, 900.0]) == 100.0


@pytest.mark.parametrize(
    ("numerator", "denominator", "expected"),
    [(1.0, 2.0, 0.5), (None, 2.0, None), (1.0, None, None), (1.0, 0.0, None), (0.0, 4.0, 0.0)],
)
def test_ratio(numerator: float | None, denominator: float | None, expected: float | None) -> None:
    assert stats.ratio(numerator, denominator) == expected


@pytest.mark.parametrize(
    ("values", "expected"),
    [([2.0, 4.0, 3.0], 2.0), ([5.0], 1.0), ([], None), ([0.0, 1.0], None), ([-1.0, 1.0], None)],
)
def test_spread_is_largest_over_smallest(values: list[float], expected: float | None) -> None:
    assert stats.spread(values) == expected


def test_latency_from_seconds_in_milliseconds() -> None:
    latency = stats.Latency.of([0.001 * v for v in range(1, 101)])

    assert latency.count == 100
    assert latency.p50_ms == pytest.approx(50)
    assert latency.p90_ms == pytest.approx(90)
    assert latency.p99_ms == pytest.approx(99)
    assert latency.max_ms == pytest.approx(100)
    assert latency.mean_ms == pytest.approx(50.5)
    assert latency.to_json()["p99_ms"] == 99.0
