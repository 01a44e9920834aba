"""The object store: objects by resource, one global resourceVersion counter, event history.

Like etcd behind the real API server, every change gets the next revision of one counter, and
a bounded history of changes lets watches resume from a revision and lists read a consistent
snapshot at a revision. Revisions older than the history are "compacted": asking for them is
410 Gone. All methods are thread-safe; watchers are woken on their own event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import orjson

from devapi import errors
from devapi.resources import ResourceKey
from devapi.types import JSONObject

logger = logging.getLogger(__name__)

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"

DEFAULT_HISTORY_SIZE = 2000
# A watcher that falls this far behind is cut off, as the real server does with slow watchers.
MAX_PENDING_EVENTS = 100_000

ObjectId = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects


def clone(obj: JSONObject) -> JSONObject:
    """A deep copy of a JSON object (faster than copy.deepcopy for plain JSON)."""
    copied: JSONObject = orjson.loads(orjson.dumps(obj))
    return copied


def object_id(obj: JSONObject) -> ObjectId:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def resource_version(obj: JSONObject) -> str:
    meta = obj.get("metadata") or {}
    rv = meta.get("resourceVersion")
    return rv if isinstance(rv, str) else ""


def _set_rv(obj: JSONObject, rv: int) -> None:
    obj.setdefault("metadata", {})["resourceVersion"] = str(rv)


@dataclass(frozen=True)
class Event:
    """One change. ``object`` is the state after it (for DELETED: the last state, stamped with
    the deletion's revision); ``previous`` the state before (None for ADDED)."""

    type: str
    key: ResourceKey
    namespace: str
    name: str
    rv: int
    object: JSONObject
    previous: JSONObject | None


class Subscription:
    """The events of one watch, queued until its stream takes them."""

    def __init__(self, store: Store, key: ResourceKey, namespace: str | None) -> None:
        self.key = key
        self.namespace = namespace
        self._store = store
        self._loop = asyncio.get_running_loop()
        self._wakeup = asyncio.Event()
        self._pending: deque[Event] = deque()
        self.closed = False
        self.overflowed = False

    def wants(self, event: Event) -> bool:
        return event.key == self.key and (
            self.namespace is None or event.namespace == self.namespace
        )

    def push(self, event: Event) -> None:
        """Called with the store's lock held."""
        if self.closed:
            return
        if len(self._pending) >= MAX_PENDING_EVENTS:
            self.overflowed = True
            self._close_locked()
            return
        self._pending.append(event)
        self._wake()

    def take(self) -> list[Event]:
        with self._store.lock:
            events = list(self._pending)
            self._pending.clear()
            self._wakeup.clear()
            return events

    def progress(self) -> int | None:
        """The revision this watch has seen everything up to, or None while events are queued."""
        with self._store.lock:
            if self._pending:
                return None
            return self._store.current_rv()

    async def wait(self, seconds: float) -> None:
        if self._pending or self.closed:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wakeup.wait(), seconds)

    def close(self) -> None:
        with self._store.lock:
            self._close_locked()

    def _close_locked(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._store.unsubscribe_locked(self)
        self._wake()

    def _wake(self) -> None:
        # RuntimeError: the loop is closed, so nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._wakeup.set)


class Store:
    """Objects keyed by resource and (namespace, name), versioned by one global counter."""

    def __init__(self, *, history_size: int = DEFAULT_HISTORY_SIZE) -> None:
        if history_size < 1:
            raise ValueError("history_size must be at least 1")
        self.lock = threading.RLock()
        self._rv = 0
        self._objects: dict[ResourceKey, dict[ObjectId, JSONObject]] = {}
        self._history: deque[Event] = deque()
        self._history_size = history_size
        self._compacted_rv = 0
        self._subscriptions: set[Subscription] = set()
        # In-process listeners (the simulated controllers): every change, not client watches.
        self._listeners: list[Callable[[Event], None]] = []

    # --- reads -------------------------------------------------------------------------------

    def current_rv(self) -> int:
        with self.lock:
            return self._rv

    def compacted_rv(self) -> int:
        with self.lock:
            return self._compacted_rv

    def get(self, key: ResourceKey, namespace: str, name: str) -> JSONObject | None:
        with self.lock:
            obj = self._objects.get(key, {}).get((namespace, name))
            return clone(obj) if obj is not None else None

    def list_objects(
        self, key: ResourceKey, namespace: str | None, *, at_rv: int | None = None
    ) -> tuple[list[JSONObject], int]:
        """Objects sorted by (namespace, name), and the revision they are consistent at.

        ``at_rv`` reads the snapshot at that revision (for ``continue`` tokens and exact
        reads); it is 410 Gone once the history no longer covers it.
        """
        with self.lock:
            current = dict(self._objects.get(key, {}))
            rv = self._rv
            if at_rv is not None and at_rv < rv:
                if at_rv < self._compacted_rv:
                    raise errors.expired(errors.CONTINUE_EXPIRED_MESSAGE)
                for event in reversed(self._history):
                    if event.rv <= at_rv:
                        break
                    if event.key != key:
                        continue
                    oid = (event.namespace, event.name)
                    if event.previous is None:
                        current.pop(oid, None)
                    else:
                        current[oid] = event.previous
                rv = at_rv
            items = [
                clone(obj)
                for oid, obj in sorted(current.items())
                if namespace is None or oid[0] == namespace
            ]
            return items, rv

    def scan(
        self, key: ResourceKey, predicate: Callable[[JSONObject], bool], *, copy: bool = True
    ) -> list[JSONObject]:
        """The objects matching ``predicate`` (tested without copying, so cheap to call often);
        ``copy=False`` hands out the stored objects themselves, which must not be changed."""
        with self.lock:
            found = [obj for _, obj in sorted(self._objects.get(key, {}).items()) if predicate(obj)]
            return [clone(obj) for obj in found] if copy else found

    def count(self, key: ResourceKey, namespace: str | None = None) -> int:
        with self.lock:
            objects = self._objects.get(key, {})
            if namespace is None:
                return len(objects)
            return sum(1 for ns, _ in objects if ns == namespace)

    # --- writes ------------------------------------------------------------------------------

    def create(self, key: ResourceKey, obj: JSONObject) -> JSONObject:
        group, plural = key
        namespace, name = object_id(obj)
        with self.lock:
            objects = self._objects.setdefault(key, {})
            if (namespace, name) in objects:
                raise errors.already_exists(group, plural, name)
            stored = clone(obj)
            rv = self._next_rv()
            _set_rv(stored, rv)
            objects[(namespace, name)] = stored
            self._publish(Event(ADDED, key, namespace, name, rv, stored, None))
            return clone(stored)

    def update(self, key: ResourceKey, obj: JSONObject, *, expected_rv: str) -> JSONObject:
        """Replace the object if its stored revision is still ``expected_rv`` (else 409)."""
        group, plural = key
        namespace, name = object_id(obj)
        with self.lock:
            objects = self._objects.get(key, {})
            existing = objects.get((namespace, name))
            if existing is None:
                raise errors.not_found(group, plural, name)
            if resource_version(existing) != expected_rv:
                raise errors.conflict(group, plural, name)
            stored = clone(obj)
            rv = self._next_rv()
            _set_rv(stored, rv)
            objects[(namespace, name)] = stored
            self._publish(Event(MODIFIED, key, namespace, name, rv, stored, existing))
            return clone(stored)

    def delete(
        self, key: ResourceKey, namespace: str, name: str, *, expected_rv: str | None = None
    ) -> JSONObject:
        group, plural = key
        with self.lock:
            objects = self._objects.get(key, {})
            existing = objects.get((namespace, name))
            if existing is None:
                raise errors.not_found(group, plural, name)
            if expected_rv is not None and resource_version(existing) != expected_rv:
                raise errors.conflict(group, plural, name)
            del objects[(namespace, name)]
            final = clone(existing)
            rv = self._next_rv()
            _set_rv(final, rv)
            self._publish(Event(DELETED, key, namespace, name, rv, final, existing))
            return clone(final)

    def keys(self) -> Iterable[ResourceKey]:
        with self.lock:
            return list(self._objects)

    # --- watches -----------------------------------------------------------------------------

    def watch(
        self, key: ResourceKey, namespace: str | None, *, since: int | None
    ) -> tuple[Subscription, list[Event]]:
        """Subscribe; returns the events to send first.

        ``since`` None sends the current objects as synthetic ADDED events (``resourceVersion``
        unset or "0"); a revision replays the history after it, or is 410 Gone when compacted.
        """
        with self.lock:
            if since is not None and since < self._compacted_rv:
                raise errors.too_old_resource_version(since, self._compacted_rv)
            subscription = Subscription(self, key, namespace)
            if since is None:
                initial = [
                    Event(ADDED, key, oid[0], oid[1], int(resource_version(obj) or 0), obj, None)
                    for oid, obj in sorted(self._objects.get(key, {}).items())
                    if namespace is None or oid[0] == namespace
                ]
            else:
                initial = [e for e in self._history if e.rv > since and subscription.wants(e)]
            self._subscriptions.add(subscription)
            return subscription, initial

    def listen(self, listener: Callable[[Event], None]) -> Callable[[], None]:
        """Call ``listener`` with every change (under the lock: it must only hand the event
        on); returns the function that stops it."""
        with self.lock:
            self._listeners.append(listener)

        def stop() -> None:
            with self.lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return stop

    def unsubscribe_locked(self, subscription: Subscription) -> None:
        self._subscriptions.discard(subscription)

    def close_watches(self, *, key: ResourceKey | None = None) -> int:
        """End every open watch (of ``key``, or all) now; returns how many there were."""
        with self.lock:
            subscriptions = [s for s in self._subscriptions if key is None or s.key == key]
            for subscription in subscriptions:
                subscription.close()
            return len(subscriptions)

    def open_watches(self) -> int:
        with self.lock:
            return len(self._subscriptions)

    def compact(self) -> int:
        """Forget the whole history: a watch or continue from any older revision is 410."""
        with self.lock:
            self._history.clear()
            self._compacted_rv = self._rv
            logger.info("history compacted at resourceVersion %d", self._rv)
            return self._rv

    # --- internals ---------------------------------------------------------------------------

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def _publish(self, event: Event) -> None:
        if len(self._history) >= self._history_size:
            evicted = self._history.popleft()
            self._compacted_rv = evicted.rv
        self._history.append(event)
        for subscription in list(self._subscriptions):
            if subscription.wants(event):
                subscription.push(event)
        for listener in self._listeners:
            listener(event)
