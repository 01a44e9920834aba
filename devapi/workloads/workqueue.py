"""The controllers' work queue and rate limiters, as ``k8s.io/client-go/util/workqueue``.

A key is processed by one worker at a time; a key added while it is processed runs again after.
``add_rate_limited`` waits what the limiter says: ``DefaultTypedControllerRateLimiter`` (the
ReplicaSet and Deployment controllers') is the larger of a per-key exponential backoff (5 ms
doubling to 1000 s) and an overall token bucket (10 per second, burst 100); the Job
controller's is a per-key exponential backoff from 1 s to 60 s. ``forget`` resets a key's
backoff after a successful sync.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Protocol

Clock = Callable[[], float]
QueueKey = tuple[str, str]  # (namespace, name)


class RateLimiter(Protocol):
    def when(self, key: Hashable) -> float: ...

    def forget(self, key: Hashable) -> None: ...

    def failures(self, key: Hashable) -> int: ...


class ItemExponentialFailureRateLimiter:
    """``base * 2**failures``, at most ``maximum``."""

    def __init__(self, base: float, maximum: float) -> None:
        self.base = base
        self.maximum = maximum
        self._failures: dict[Hashable, int] = {}

    def when(self, key: Hashable) -> float:
        exponent = self._failures.get(key, 0)
        self._failures[key] = exponent + 1
        if exponent > 62:
            return self.maximum
        return min(self.base * float(2**exponent), self.maximum)

    def forget(self, key: Hashable) -> None:
        self._failures.pop(key, None)

    def failures(self, key: Hashable) -> int:
        return self._failures.get(key, 0)


class BucketRateLimiter:
    """``golang.org/x/time/rate``'s ``Limiter.Reserve``: one token per item, refilled at
    ``qps`` up to ``burst``; no per-key memory."""

    def __init__(self, qps: float, burst: int, *, clock: Clock = time.monotonic) -> None:
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()

    def when(self, key: Hashable) -> float:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1
        return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def forget(self, key: Hashable) -> None:
        return None

    def failures(self, key: Hashable) -> int:
        return 0


class MaxOfRateLimiter:
    def __init__(self, *limiters: RateLimiter) -> None:
        self._limiters = limiters

    def when(self, key: Hashable) -> float:
        return max(limiter.when(key) for limiter in self._limiters)

    def forget(self, key: Hashable) -> None:
        for limiter in self._limiters:
            limiter.forget(key)

    def failures(self, key: Hashable) -> int:
        return max(limiter.failures(key) for limiter in self._limiters)


@dataclass(frozen=True)
class Backoff:
    """A per-key exponential backoff's first and largest delay, in seconds."""

    base: float
    maximum: float


# client-go DefaultTypedControllerRateLimiter: 5 ms doubling to 1000 s, and 10 qps burst 100.
CONTROLLER_BACKOFF = Backoff(0.005, 1000.0)
CONTROLLER_QPS = 10.0
CONTROLLER_BURST = 100
# pkg/controller/job/job_controller.go: DefaultJobApiBackOff, MaxJobApiBackOff.
JOB_API_BACKOFF = Backoff(1.0, 60.0)
# DefaultJobPodFailureBackOff, MaxJobPodFailureBackOff: before replacing failed pods.
JOB_POD_FAILURE_BACKOFF = Backoff(10.0, 600.0)


def controller_rate_limiter(backoff: Backoff = CONTROLLER_BACKOFF) -> RateLimiter:
    """``DefaultTypedControllerRateLimiter``."""
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(backoff.base, backoff.maximum),
        BucketRateLimiter(CONTROLLER_QPS, CONTROLLER_BURST),
    )


class WorkQueue:
    """A rate-limited work queue of keys; use from one event loop."""

    def __init__(self, limiter: RateLimiter) -> None:
        self.limiter = limiter
        self._ready: deque[QueueKey] = deque()
        self._dirty: set[QueueKey] = set()
        self._processing: set[QueueKey] = set()
        self._wakeup = asyncio.Event()
        self._timers: set[asyncio.TimerHandle] = set()

    def add(self, key: QueueKey) -> None:
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key in self._processing:
            return
        self._ready.append(key)
        self._wakeup.set()

    def add_after(self, key: QueueKey, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._timers.discard(handle)
            self.add(key)

        handle = loop.call_later(delay, fire)
        self._timers.add(handle)

    def add_rate_limited(self, key: QueueKey) -> None:
        self.add_after(key, self.limiter.when(key))

    def forget(self, key: QueueKey) -> None:
        self.limiter.forget(key)

    async def get(self) -> QueueKey:
        while not self._ready:
            self._wakeup.clear()
            await self._wakeup.wait()
        key = self._ready.popleft()
        self._processing.add(key)
        self._dirty.discard(key)
        return key

    def done(self, key: QueueKey) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._ready.append(key)
            self._wakeup.set()

    def close(self) -> None:
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
