"""Small statistics for benchmark figures: percentiles, robust centres and ratios."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass


def percentile(values: Sequence[float], p: float) -> float:
    """The nearest-rank ``p``-th percentile: the smallest value with at least p% at or below it.

    Nearest rank (as HdrHistogram and wrk report) never invents a value that was not measured:
    p99 of 100 samples is the 99th smallest, p100 the maximum. Raises ``ValueError`` on no data.
    """
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be within 0-100, not {p}")
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    """The middle value (the mean of the two middle ones for an even count)."""
    if not values:
        raise ValueError("median of no values")
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def mean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("mean of no values")
    return math.fsum(values) / len(values)


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``, or None when either is missing or the denominator is 0."""
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def spread(values: Sequence[float]) -> float | None:
    """Largest over smallest value (how flat a curve is); None if a value is not positive."""
    if not values or min(values) <= 0:
        return None
    return max(values) / min(values)


@dataclass(frozen=True, slots=True)
class Latency:
    """A latency distribution in milliseconds."""

    count: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Latency:
        """From latencies in seconds."""
        ms = [value * 1000 for value in seconds]
        return cls(
            count=len(ms),
            p50_ms=percentile(ms, 50),
            p90_ms=percentile(ms, 90),
            p99_ms=percentile(ms, 99),
            max_ms=max(ms),
            mean_ms=mean(ms),
        )

    def to_json(self) -> dict[str, float]:
        return {key: round(value, 3) for key, value in asdict(self).items()}


def robust_centre(values: Sequence[float]) -> float:
    """The median of per-round figures: one slow round (a noisy neighbour) does not move it."""
    return median(values)
