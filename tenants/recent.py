"""The latest denials and releases, kept in two small rings for ``/status`` and the status page.

A developer asking "why was my pod denied?" or "was my pod released?" finds the answer here
without logs or metrics. Each entry holds what tenantgate itself said (the one-line message
``kubectl`` showed, or the release it made), the tenant, the pod's ``namespace/name`` and the
time: never the pod's spec. Messages are cut to :data:`MESSAGE_LIMIT` characters.

Denials are recorded by the replica that answered the review (dry runs excluded, as in the
metrics), releases by the replica that made them (the lease holder), so with several replicas
each one shows its own. Entries live only in memory: a restart starts the rings empty.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Final, Literal

DEFAULT_LIMIT: Final = 50
MESSAGE_LIMIT: Final = 500

ReleaseOutcome = Literal["released", "given up"]


@dataclass(frozen=True, slots=True)
class Denial:
    at: float
    tenant: str
    pod: str  # namespace/name
    operation: str
    endpoint: str
    cause: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "tenant": self.tenant,
            "pod": self.pod,
            "operation": self.operation,
            "endpoint": self.endpoint,
            "reason": self.cause,
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class Release:
    at: float
    tenant: str
    pod: str  # namespace/name
    outcome: ReleaseOutcome
    tier: str
    waited_seconds: float
    message: str

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "tenant": self.tenant,
            "pod": self.pod,
            "outcome": self.outcome,
            "tier": self.tier,
            "waitedSeconds": round(self.waited_seconds, 3),
            "message": self.message,
        }


def _short(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MESSAGE_LIMIT else line[: MESSAGE_LIMIT - 3] + "..."


class RecentDecisions:
    """Two bounded rings, newest last; recording is O(1) and never grows past ``limit``."""

    def __init__(self, *, limit: int = DEFAULT_LIMIT) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self.limit = limit
        self._denials: deque[Denial] = deque(maxlen=limit)
        self._releases: deque[Release] = deque(maxlen=limit)

    def denied(
        self,
        *,
        at: float,
        tenant: str,
        pod: str,
        operation: str,
        endpoint: str,
        cause: str,
        message: str,
    ) -> None:
        self._denials.append(Denial(at, tenant, pod, operation, endpoint, cause, _short(message)))

    def released(
        self,
        *,
        at: float,
        tenant: str,
        pod: str,
        outcome: ReleaseOutcome,
        tier: str,
        waited_seconds: float,
        message: str,
    ) -> None:
        self._releases.append(
            Release(at, tenant, pod, outcome, tier, max(waited_seconds, 0.0), _short(message))
        )

    def to_json(self) -> dict[str, Any]:
        """``/status``'s ``recent``: each ring newest first."""
        return {
            "limit": self.limit,
            "denials": [entry.to_json() for entry in reversed(self._denials)],
            "releases": [entry.to_json() for entry in reversed(self._releases)],
        }


__all__ = ["DEFAULT_LIMIT", "MESSAGE_LIMIT", "Denial", "RecentDecisions", "Release"]
