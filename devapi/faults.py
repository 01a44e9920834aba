"""Fault injection: latency, error responses, dropped watches, conflict storms, compaction.

Faults apply to Kubernetes API requests (``/api``, ``/apis``) and are driven from Python
(:class:`Faults`) or over HTTP (``/__dev/faults``). A fault may be limited to a Kubernetes verb
(``get``, ``list``, ``watch``, ``create``, ``update``, ``patch``, ``delete``...), a resource
(``pods``, ``leases.coordination.k8s.io``) and a URL path prefix, and to a number of requests.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from devapi.errors import APIError
from devapi.store import Store
from devapi.types import JSONObject

logger = logging.getLogger(__name__)

_ERRORS = {
    400: ("BadRequest", "the server rejected our request for an unknown reason"),
    401: ("Unauthorized", "Unauthorized"),
    403: ("Forbidden", "forbidden: injected fault"),
    404: ("NotFound", "the server could not find the requested resource"),
    409: ("Conflict", "Operation cannot be fulfilled: injected conflict"),
    410: ("Expired", "injected fault: the resource version is too old"),
    422: ("Invalid", "injected fault: the object is invalid"),
    429: (
        "TooManyRequests",
        "the server has received too many requests and has asked us to try again later",
    ),
    500: ("InternalError", "Internal error occurred: injected fault"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    504: (
        "Timeout",
        "the server was unable to return a response in the time allotted, but may still be "
        "processing the request",
    ),
}


@dataclass(frozen=True)
class RequestInfo:
    """What a fault can be matched against."""

    path: str
    verb: str
    group: str
    plural: str

    @property
    def resource(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


@dataclass(frozen=True)
class Match:
    verb: str | None = None
    resource: str | None = None
    path: str | None = None

    def matches(self, info: RequestInfo) -> bool:
        if self.verb is not None and self.verb != info.verb:
            return False
        if self.resource is not None and self.resource != info.resource:
            return False
        return self.path is None or info.path.startswith(self.path)

    def as_json(self) -> JSONObject:
        return {
            k: v
            for k, v in (("verb", self.verb), ("resource", self.resource), ("path", self.path))
            if v
        }


@dataclass
class _Latency:
    seconds: float
    match: Match
    remaining: int | None


@dataclass
class _Error:
    status: int
    reason: str
    message: str
    match: Match
    remaining: int


@dataclass
class _State:
    latencies: list[_Latency] = field(default_factory=list)
    errors: list[_Error] = field(default_factory=list)
    conflicts: dict[str, int] = field(default_factory=dict)


class Faults:
    """The faults currently armed on one test API server. Thread-safe."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._state = _State()

    def add_latency(
        self,
        seconds: float,
        *,
        verb: str | None = None,
        resource: str | None = None,
        path: str | None = None,
        count: int | None = None,
    ) -> None:
        """Delay matching requests by ``seconds`` (the next ``count`` ones, or until cleared)."""
        if seconds < 0:
            raise ValueError("latency must not be negative")
        if count is not None and count < 1:
            raise ValueError("count must be at least 1")
        with self._lock:
            self._state.latencies.append(_Latency(seconds, Match(verb, resource, path), count))

    def add_errors(
        self,
        status: int,
        *,
        count: int = 1,
        verb: str | None = None,
        resource: str | None = None,
        path: str | None = None,
        reason: str | None = None,
        message: str | None = None,
    ) -> None:
        """Answer the next ``count`` matching requests with ``status`` and a Status body."""
        if not 400 <= status <= 599:
            raise ValueError("status must be an HTTP error code (400-599)")
        if count < 1:
            raise ValueError("count must be at least 1")
        default_reason, default_message = _ERRORS.get(
            status, ("", f"injected fault: HTTP {status}")
        )
        with self._lock:
            self._state.errors.append(
                _Error(
                    status,
                    reason or default_reason,
                    message or default_message,
                    Match(verb, resource, path),
                    count,
                )
            )

    def conflict_storm(self, resource: str, *, count: int) -> None:
        """The next ``count`` updates of ``resource`` (``pods``, ``leases.coordination.k8s.io``)
        answer 409 Conflict, as if another writer always won the race."""
        if count < 1:
            raise ValueError("count must be at least 1")
        with self._lock:
            self._state.conflicts[resource] = self._state.conflicts.get(resource, 0) + count

    def drop_watches(self) -> int:
        """End every open watch stream now; returns how many were open."""
        dropped = self._store.close_watches()
        logger.info("dropped %d watch connections", dropped)
        return dropped

    def compact_history(self) -> int:
        """Forget the event history: watching or continuing from any older revision is 410."""
        return self._store.compact()

    def clear(self) -> None:
        with self._lock:
            self._state = _State()

    def snapshot(self) -> JSONObject:
        with self._lock:
            return {
                "latencies": [
                    {"seconds": f.seconds, "remaining": f.remaining, **f.match.as_json()}
                    for f in self._state.latencies
                ],
                "errors": [
                    {
                        "status": f.status,
                        "reason": f.reason,
                        "message": f.message,
                        "remaining": f.remaining,
                        **f.match.as_json(),
                    }
                    for f in self._state.errors
                ],
                "conflicts": dict(self._state.conflicts),
                "openWatches": self._store.open_watches(),
                "resourceVersion": str(self._store.current_rv()),
                "compactedResourceVersion": str(self._store.compacted_rv()),
            }

    # --- used by the server ------------------------------------------------------------------

    def latency_for(self, info: RequestInfo) -> float:
        total = 0.0
        with self._lock:
            for fault in list(self._state.latencies):
                if fault.match.matches(info):
                    total += fault.seconds
                    if fault.remaining is not None:
                        fault.remaining -= 1
                        if fault.remaining <= 0:
                            self._state.latencies.remove(fault)
        return total

    def error_for(self, info: RequestInfo) -> APIError | None:
        with self._lock:
            for fault in self._state.errors:
                if fault.match.matches(info):
                    fault.remaining -= 1
                    if fault.remaining <= 0:
                        self._state.errors.remove(fault)
                    headers = {"Retry-After": "1"} if fault.status == 429 else None
                    return APIError(
                        fault.status, fault.reason, fault.message, details={}, headers=headers
                    )
        return None

    def take_conflict(self, group: str, plural: str) -> bool:
        resource = f"{plural}.{group}" if group else plural
        with self._lock:
            left = self._state.conflicts.get(resource, 0)
            if left <= 0:
                return False
            if left == 1:
                del self._state.conflicts[resource]
            else:
                self._state.conflicts[resource] = left - 1
            return True
