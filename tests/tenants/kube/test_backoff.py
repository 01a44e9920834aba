"""Per-item exponential backoff: grows, caps, jitters, and resets per item."""

from __future__ import annotations

import pytest

from tenants.kube.backoff import BackoffPolicy, ItemBackoff


def test_delays_double_up_to_the_cap() -> None:
    policy = BackoffPolicy(base=0.5, factor=2, cap=4, jitter=0)
    assert [policy.delay(n) for n in range(7)] == [0.0, 0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


def test_a_huge_failure_count_stays_capped() -> None:
    assert BackoffPolicy(base=1, cap=30, jitter=0).delay(10_000) == 30


def test_jitter_adds_up_to_its_fraction() -> None:
    policy = BackoffPolicy(base=1, cap=10, jitter=0.5)
    assert policy.delay(1, rand=lambda: 0.0) == 1.0
    assert policy.delay(1, rand=lambda: 1.0) == 1.5
    assert policy.delay(20, rand=lambda: 1.0) == 15.0


@pytest.mark.parametrize(
    "kwargs",
    [{"base": 0}, {"base": 2, "cap": 1}, {"factor": 0.5}, {"jitter": 2}, {"jitter": -0.1}],
)
def test_nonsense_policies_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="backoff needs"):
        BackoffPolicy(**kwargs)


def test_items_back_off_independently_and_reset_on_success() -> None:
    backoff = ItemBackoff(BackoffPolicy(base=1, cap=8, jitter=0))
    assert [backoff.failure("pods") for _ in range(3)] == [1, 2, 4]
    assert backoff.failure("namespaces") == 1
    assert backoff.failures("pods") == 3
    backoff.success("pods")
    assert backoff.failures("pods") == 0
    assert backoff.failure("pods") == 1
    assert backoff.failure("namespaces") == 2
