"""Per-item exponential backoff with jitter and a cap, for retrying calls to the API server.

Like client-go's ``ItemExponentialFailureRateLimiter``: each item (a watched resource, an object
being written) has its own failure count, so one failing item never slows the others, and a
success resets it. Jitter spreads the retries of many replicas so that they do not hit a
recovering API server in lockstep.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """``base * factor**(failures-1)``, capped at ``cap``, then up to ``jitter`` x more."""

    base: float = 0.5
    factor: float = 2.0
    cap: float = 30.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.base <= 0 or self.cap < self.base:
            raise ValueError("backoff needs 0 < base <= cap")
        if self.factor < 1 or not 0 <= self.jitter <= 1:
            raise ValueError("backoff needs factor >= 1 and 0 <= jitter <= 1")

    def delay(self, failures: int, *, rand: Callable[[], float] = random.random) -> float:
        """The wait before retry number ``failures`` (1 = the first retry); 0 when none failed."""
        if failures <= 0:
            return 0.0
        # Compare exponents rather than computing factor**n: n may grow without bound.
        delay = self.base
        for _ in range(failures - 1):
            delay *= self.factor
            if delay >= self.cap:
                delay = self.cap
                break
        return min(delay, self.cap) * (1.0 + self.jitter * rand())


class ItemBackoff:
    """Failure counts per item; :meth:`failure` returns how long to wait before the next try."""

    def __init__(
        self, policy: BackoffPolicy | None = None, *, rand: Callable[[], float] = random.random
    ) -> None:
        self.policy = policy if policy is not None else BackoffPolicy()
        self._rand = rand
        self._lock = threading.Lock()
        self._failures: dict[str, int] = {}

    def failure(self, item: str) -> float:
        """Count one more failure of ``item``; returns the delay before retrying it."""
        with self._lock:
            failures = self._failures.get(item, 0) + 1
            self._failures[item] = failures
        return self.policy.delay(failures, rand=self._rand)

    def success(self, item: str) -> None:
        """``item`` worked: its next failure starts from the base delay again."""
        with self._lock:
            self._failures.pop(item, None)

    def failures(self, item: str) -> int:
        with self._lock:
            return self._failures.get(item, 0)


__all__ = ["BackoffPolicy", "ItemBackoff"]
