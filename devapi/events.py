"""Events: the ``v1`` Event resource, its validation, field selectors and ``kubectl get`` table,
and the recorder the simulated controllers report through.

The resource follows ``pkg/registry/core/event/strategy.go`` (``ToSelectableFields``: the
``involvedObject.*``, ``reason``, ``type``, ``source`` and ``reportingComponent`` field labels
that ``kubectl describe`` and ``kubectl get events --field-selector`` use) and
``pkg/apis/core/validation/events.go`` (``ValidateEventCreate``). The recorder follows
``k8s.io/client-go/tools/record``: an event is named ``<object>.<unix nanoseconds in hex>`` and
a repeat of the same event (same source, object, type, reason and message) increments ``count``
and ``lastTimestamp`` of the first one instead of creating another (the ``EventCorrelator``'s
deduplication; its aggregation of *similar* events is not simulated), and past 25 events about
one object, one more every five minutes is kept (its spam filter). Events are kept until
deleted: the real server's one-hour TTL is not simulated.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from devapi import errors, meta, tables
from devapi.errors import APIError, FieldError
from devapi.eventsv1 import FIELD_LABELS
from devapi.resources import ResourceType
from devapi.strategies import Strategy
from devapi.types import JSONObject

logger = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"
MAX_NOTE_BYTES = 1024  # events.k8s.io: ``note`` is at most 1kB

EVENTS = ResourceType(
    group="",
    plural="events",
    singular="event",
    kind="Event",
    namespaced=True,
    versions=("v1",),
    storage_version="v1",
    short_names=("ev",),
    # The v1 names of events.k8s.io's field labels: the same set.
    field_labels=frozenset(f for f in FIELD_LABELS.values() if not f.startswith("metadata.")),
    columns=lambda: event_columns(),
)


def _obj(value: Any) -> JSONObject:
    return value if isinstance(value, dict) else {}


class EventStrategy(Strategy):
    """``pkg/registry/core/event/strategy.go``: no status, no generation; validated on create
    and update alike."""

    def validate(self, obj: JSONObject) -> list[FieldError]:
        problems = super().validate(obj)
        namespace = str(_obj(obj.get("metadata")).get("namespace") or "")
        involved = _obj(obj.get("involvedObject"))
        involved_ns = involved.get("namespace")
        # legacyValidateEvent: an event about a namespaced object lives in its namespace.
        if involved_ns and involved_ns != namespace:
            problems.append(
                errors.invalid(
                    "involvedObject.namespace", involved_ns, "does not match event.namespace"
                )
            )
        event_type = obj.get("type")
        if obj.get("eventTime"):
            # An event written through the events.k8s.io API: its required fields.
            # The paths name the internal fields (reportingController is v1's
            # reportingComponent), as upstream's messages do.
            for path, name in (
                ("reportingController", "reportingComponent"),
                ("reportingInstance", "reportingInstance"),
                ("action", "action"),
                ("reason", "reason"),
            ):
                if not obj.get(name):
                    problems.append(errors.required(path))
            if event_type not in (NORMAL, WARNING):
                problems.append(errors.not_supported("type", event_type, (NORMAL, WARNING)))
            message = obj.get("message")
            if isinstance(message, str) and len(message.encode()) > MAX_NOTE_BYTES:
                problems.append(
                    errors.invalid("note", "", f"can have at most {MAX_NOTE_BYTES} characters")
                )
        return problems

    def field_value(self, obj: JSONObject, field: str) -> str:
        if field == "source":
            source = _obj(obj.get("source")).get("component") or obj.get("reportingComponent")
            return str(source or "")
        if field == "reportingComponent":
            return str(obj.get("reportingComponent") or "")
        return super().field_value(obj, field)


# --- kubectl get events ------------------------------------------------------------------------


def _since(value: Any) -> str:
    moment = meta.parse_timestamp(value)
    if moment is None:
        return "<unknown>"
    return tables.human_duration(time.time() - moment.timestamp())


def _last_seen(event: JSONObject) -> str:
    series = _obj(event.get("series"))
    if series.get("lastObservedTime"):
        return _since(_micro_to_seconds(series["lastObservedTime"]))
    if event.get("lastTimestamp"):
        return _since(event["lastTimestamp"])
    return _since(_micro_to_seconds(event.get("eventTime")))


def _first_seen(event: JSONObject) -> str:
    if event.get("firstTimestamp"):
        return _since(event["firstTimestamp"])
    return _since(_micro_to_seconds(event.get("eventTime")))


def _micro_to_seconds(value: Any) -> Any:
    """``2025-01-01T00:00:00.123456Z`` (a MicroTime) as a whole-second timestamp."""
    if isinstance(value, str) and "." in value:
        return value.split(".", 1)[0] + "Z"
    return value


def _event_object(event: JSONObject) -> str:
    involved = _obj(event.get("involvedObject"))
    return f"{str(involved.get('kind') or '').lower()}/{involved.get('name') or ''}"


def _event_source(event: JSONObject) -> str:
    source = _obj(event.get("source"))
    component = str(source.get("component") or event.get("reportingComponent") or "")
    host = source.get("host")
    return f"{component}, {host}" if host else component


def _event_count(event: JSONObject) -> int:
    series = _obj(event.get("series"))
    if isinstance(series.get("count"), int):
        return int(series["count"])
    count = event.get("count")
    return count if isinstance(count, int) else 1


def _column(name: str, priority: int = 0, fmt: str = "") -> JSONObject:
    return {"name": name, "type": "string", "format": fmt, "description": "", "priority": priority}


def event_columns() -> list[tuple[JSONObject, tables.Cell]]:
    """``pkg/printers/internalversion/printers.go``: ``eventColumnDefinitions`` and
    ``printEvent``."""
    return [
        (_column("Last Seen"), _last_seen),
        (_column("Type"), lambda e: e.get("type") or ""),
        (_column("Reason"), lambda e: e.get("reason") or ""),
        (_column("Object"), _event_object),
        (
            _column("Subobject", 1),
            lambda e: _obj(e.get("involvedObject")).get("fieldPath") or "",
        ),
        (_column("Source", 1), _event_source),
        (_column("Message"), lambda e: str(e.get("message") or "").strip()),
        (_column("First Seen", 1), _first_seen),
        (_column("Count", 1), _event_count),
        (_column("Name", 1, "name"), lambda e: _obj(e.get("metadata")).get("name") or ""),
    ]


# --- the recorder ------------------------------------------------------------------------------

CreateEvent = Callable[[str, JSONObject], Awaitable[JSONObject]]
UpdateEvent = Callable[[str, JSONObject], Awaitable[JSONObject]]


def object_reference(obj: JSONObject) -> JSONObject:
    """``reference.GetReference``: what ``involvedObject`` says of ``obj``."""
    metadata = _obj(obj.get("metadata"))
    ref: JSONObject = {"kind": obj.get("kind"), "apiVersion": obj.get("apiVersion")}
    for key in ("namespace", "name", "uid", "resourceVersion"):
        if metadata.get(key):
            ref[key] = metadata[key]
    return ref


SPAM_BURST = 25  # client-go tools/record: defaultSpamBurst
SPAM_REFILL_SECONDS = 300.0  # defaultSpamQPS: one event per 5 minutes


class EventRecorder:
    """Records events for one component (``replicaset-controller``, ``kubelet``, ...)."""

    def __init__(
        self,
        component: str,
        *,
        create: CreateEvent,
        update: UpdateEvent,
        clock: Callable[[], float] = time.time,
        host: str = "",
    ) -> None:
        self.component = component
        self._create = create
        self._update = update
        self._clock = clock
        self._host = host
        # The correlator's cache: an event's identity -> the stored event it increments.
        self._seen: dict[tuple[str, ...], JSONObject] = {}
        # EventSourceObjectSpamFilter: per source and object, a bucket of SPAM_BURST events
        # refilled one per SPAM_REFILL_SECONDS; what finds it empty is dropped.
        self._buckets: dict[tuple[str, ...], tuple[float, float]] = {}
        self._last_nanos = 0

    def _nanos(self, now: float) -> int:
        """The name's timestamp, made unique per recorder (a test's clock may stand still)."""
        self._last_nanos = max(int(now * 1e9), self._last_nanos + 1)
        return self._last_nanos

    def _allowed(self, key: tuple[str, ...], now: float) -> bool:
        tokens, last = self._buckets.get(key, (float(SPAM_BURST), now))
        tokens = min(float(SPAM_BURST), tokens + (now - last) / SPAM_REFILL_SECONDS)
        if tokens < 1:
            self._buckets[key] = (tokens, now)
            return False
        self._buckets[key] = (tokens - 1, now)
        return True

    async def record(self, obj: JSONObject, event_type: str, reason: str, message: str) -> None:
        """Create the event (or count a repeat); failures are logged, as client-go does."""
        ref = object_reference(obj)
        namespace = str(ref.get("namespace") or "default")
        identity = (
            self.component,
            self._host,
            str(ref.get("kind")),
            namespace,
            str(ref.get("name")),
            str(ref.get("uid") or ""),
            str(ref.get("apiVersion")),
            event_type,
            reason,
            message,
        )
        now = self._clock()
        if not self._allowed(identity[:7], now):
            return
        stamp = meta.now_timestamp(now)
        try:
            previous = self._seen.get(identity)
            if previous is not None:
                repeated = dict(previous)
                repeated["count"] = int(previous.get("count") or 1) + 1
                repeated["lastTimestamp"] = stamp
                try:
                    self._seen[identity] = await self._update(namespace, repeated)
                    return
                except APIError as err:
                    if err.code not in (404, 409):
                        raise
                    # Deleted or changed meanwhile: record it afresh.
            source: JSONObject = {"component": self.component}
            if self._host:
                source["host"] = self._host
            event: JSONObject = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {
                    "name": f"{ref.get('name')}.{self._nanos(now):x}",
                    "namespace": namespace,
                },
                "involvedObject": ref,
                "reason": reason,
                "message": message,
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "count": 1,
                "type": event_type,
                "source": source,
                "reportingComponent": self.component,
                "reportingInstance": self._host,
            }
            self._seen[identity] = await self._create(namespace, event)
        except APIError as err:
            logger.warning(
                "%s: could not record event %s on %s: %s",
                self.component,
                reason,
                ref.get("name"),
                err.message,
            )


# events.k8s.io/v1: the same objects (devapi.eventsv1 converts them), its own field labels.
EVENTS_V1 = dataclasses.replace(
    EVENTS, group="events.k8s.io", field_labels=frozenset(FIELD_LABELS), columns=None
)
EVENT_TYPES = (EVENTS, EVENTS_V1)
EVENT_STRATEGIES = {EVENTS.key: EventStrategy}
