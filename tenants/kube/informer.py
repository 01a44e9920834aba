"""List-then-watch one resource type in a worker thread, delivering events to the event loop.

An :class:`Informer` does what client-go's reflector does, with the official client's blocking
calls kept off the event loop: list (in pages, as one consistent snapshot), then watch from the
list's resourceVersion with bookmarks, remembering the last resourceVersion seen so that a
dropped connection resumes where it stopped. A ``410 Gone`` (the version left the server's
history) means events were lost: it lists again and hands the whole list over, and the sink
diffs it against what it knows. Failures are retried after a per-resource exponential backoff.

Objects are converted in the worker thread (parsing a pod's request is the expensive part);
the sink's methods then run on the event loop through ``deliver`` (normally
``loop.call_soon_threadsafe``), in the order the events arrived. Nothing here touches a ledger.

A list page is read and converted with the cyclic garbage collector paused (:func:`gc_paused`):
a page's parsed JSON (500 pods, ~150,000 objects) is freed by reference counting as soon as it is
converted, but while it lives its allocations trigger collections that traverse it and, once
it is promoted, everything else alive; at 150,000 pods that was two thirds of the first list's
CPU time.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final, Generic, Protocol, TypeVar

from tenants.kube.backoff import ItemBackoff
from tenants.kube.connection import ListPage, Resource
from tenants.kube.errors import KubeError, KubeGone

logger = logging.getLogger(__name__)

T = TypeVar("T")

PAGE_SIZE: Final = 500
WATCH_TIMEOUT_SECONDS: Final = 300
JOIN_SECONDS: Final = 5.0

Deliver = Callable[[Callable[[], None]], None]
RestartHook = Callable[[Resource, str], None]


class EventStream(Protocol):
    """An open watch: its events as parsed JSON; ``close`` works from any thread."""

    def __iter__(self) -> Iterator[dict[str, Any]]: ...

    def close(self) -> None: ...


class Source(Protocol):
    """The calls an informer makes (:class:`~tenants.kube.connection.Connection` has them)."""

    def list_page(
        self, resource: Resource, *, limit: int, continue_token: str | None = None
    ) -> ListPage: ...

    def watch(
        self, resource: Resource, *, resource_version: str, timeout_seconds: int
    ) -> EventStream: ...


class Sink(Protocol[T]):
    """Receives one resource type's changes, on the event-loop thread."""

    def replace(self, items: list[T], *, initial: bool) -> None:
        """The complete current list (the first one, or a relist after lost events)."""

    def upsert(self, item: T) -> None:
        """An object was added or modified."""

    def delete(self, item: T) -> None:
        """An object was deleted (its last state)."""


@dataclass(slots=True)
class InformerStatus:
    """What an informer has done so far; written by its thread, read anywhere."""

    synced: bool = False
    resource_version: str = ""
    lists: int = 0
    events: int = 0
    restarts: dict[str, int] = field(default_factory=dict)
    last_error: str | None = None


_gc_lock = threading.Lock()
_gc_pausers = 0  # threads inside gc_paused()
_gc_resume = False  # whether the collector was enabled when the first of them entered


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for a bounded bulk step (one list page), any thread.

    The collector is process-wide: nested and concurrent pauses (several informers) share
    one, and it is enabled again when the last ends, only if it was enabled before the first
    began (a process that turned it off keeps it off). Reference counting still frees
    everything acyclic meanwhile; cycles wait for the next collection.
    """
    global _gc_pausers, _gc_resume
    with _gc_lock:
        if _gc_pausers == 0:
            _gc_resume = gc.isenabled()
            gc.disable()
        _gc_pausers += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pausers -= 1
            if _gc_pausers == 0 and _gc_resume:
                gc.enable()


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None  # not glibc: nothing to do
    return trim


_MALLOC_TRIM: Final = _malloc_trim()


def release_free_memory() -> None:
    """Give memory freed by a bulk load back to the OS (glibc ``malloc_trim``; else a no-op).

    Parsing a 150,000-pod list frees hundreds of MiB of large blocks that glibc keeps mapped
    between the few it still holds; trimming once after the list lowers the RSS at rest by
    tens of MiB.
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _resource_version(obj: Any) -> str | None:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    version = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return version if isinstance(version, str) and version else None


class Informer(Generic[T]):
    """Keeps ``sink`` up to date with one resource type until :meth:`stop`."""

    def __init__(
        self,
        resource: Resource,
        *,
        connection: Source,
        convert: Callable[[dict[str, Any]], T | None],
        sink: Sink[T],
        deliver: Deliver,
        backoff: ItemBackoff,
        after: Informer[Any] | None = None,
        on_restart: RestartHook | None = None,
        page_size: int = PAGE_SIZE,
        watch_timeout: int = WATCH_TIMEOUT_SECONDS,
    ) -> None:
        self.resource: Resource = resource
        self._connection = connection
        self._convert = convert
        self._sink = sink
        self._deliver = deliver
        self._backoff = backoff
        self._after = after
        self._on_restart = on_restart
        self._page_size = page_size
        self._watch_timeout = watch_timeout
        self._stopping = threading.Event()
        self._synced = threading.Event()
        self._stream: EventStream | None = None
        self._version: str | None = None  # where to resume watching; None: list first
        self._stream_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.status = InformerStatus()

    # -- control (any thread) ------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"the {self.resource} informer was already started")
        self._thread = threading.Thread(
            target=self._run, name=f"tenantgate-watch-{self.resource}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to stop and close its watch; it delivers nothing more."""
        self._stopping.set()
        with self._stream_lock:
            stream = self._stream
        if stream is not None:
            stream.close()

    def join(self, timeout: float = JOIN_SECONDS) -> bool:
        """Wait for the thread; False when it is still blocked in a call (it is a daemon)."""
        thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    @property
    def synced(self) -> bool:
        """True once the first complete list has been applied by the sink."""
        return self._synced.is_set()

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    # -- the worker thread ---------------------------------------------------------------

    def _run(self) -> None:
        if self._after is not None:
            # Pods are charged to tenants chosen by namespace labels: list those first, so
            # the first pod list is charged right in one pass.
            while not self._stopping.is_set() and not self._after.wait_synced(0.5):
                pass
        initial = True
        while not self._stopping.is_set():
            try:
                if self._version is None:
                    items, version = self._list()
                    if self._stopping.is_set():
                        return
                    self._hand_over(items, initial=initial)
                    self._version = version
                    initial = False
                    self._succeeded()
                self._watch(self._version)
                self._restarted("closed")
            except KubeGone as exc:
                # Events were lost: list again and let the sink diff (no backoff, as client-go).
                logger.info("%s: %s; listing again", self.resource, exc)
                self._version = None
                self._restarted("expired")
            except KubeError as exc:
                self._failed(exc)
            except Exception as exc:
                logger.exception("%s: unexpected failure in the watch", self.resource)
                self._failed(exc)

    def _list(self) -> tuple[list[T], str]:
        """Every object, as one snapshot read in pages; restarts if a page token expires."""
        while True:
            items: list[T] = []
            token: str | None = None
            version = ""
            try:
                while True:
                    with gc_paused():
                        page = self._connection.list_page(
                            self.resource, limit=self._page_size, continue_token=token
                        )
                        if not version:
                            version = page.resource_version
                        token = page.continue_token
                        for raw in page.items:
                            item = self._converted(raw)
                            if item is not None:
                                items.append(item)
                        del page  # the parsed page is freed here, with the collector paused
                    if token is None or self._stopping.is_set():
                        break
            except KubeGone:
                logger.info("%s: the list's continue token expired; listing again", self.resource)
                continue
            release_free_memory()
            self.status.lists += 1
            self.status.resource_version = version
            logger.debug("%s: listed %d at version %s", self.resource, len(items), version)
            return items, version

    def _watch(self, version: str) -> None:
        """Watch from ``version`` until the server ends the watch.

        Every event moves the resume point (``self._version``) before the next one is read,
        so a watch that breaks in the middle resumes right after the last event delivered.
        """
        # Spread the reconnections of many replicas, as client-go does (timeout in [T, 2T)).
        timeout = self._watch_timeout + random.randrange(max(self._watch_timeout, 1))
        stream = self._connection.watch(
            self.resource, resource_version=version, timeout_seconds=timeout
        )
        with self._stream_lock:
            if self._stopping.is_set():
                stream.close()
                return
            self._stream = stream
        received = False
        try:
            for event in stream:
                received = True
                kind = event.get("type")
                obj = event.get("object")
                new_version = _resource_version(obj)
                if kind == "BOOKMARK":
                    self._advance(new_version)
                    continue
                if kind not in ("ADDED", "MODIFIED", "DELETED") or not isinstance(obj, dict):
                    logger.debug("%s: ignoring a %s event", self.resource, kind)
                    continue
                item = self._converted(obj)
                if item is not None:
                    sink = self._sink
                    self._send(partial(sink.delete if kind == "DELETED" else sink.upsert, item))
                self.status.events += 1
                self._advance(new_version)
        finally:
            with self._stream_lock:
                self._stream = None
            stream.close()
        if received:
            self._succeeded()
        elif not self._stopping.is_set():
            # A watch that ends at once, again and again, must not spin: back off.
            self._stopping.wait(self._backoff.failure(self.resource))

    def _advance(self, version: str | None) -> None:
        if version is not None:
            self._version = version
            self.status.resource_version = version

    def _converted(self, raw: dict[str, Any]) -> T | None:
        """The object as the sink wants it; None (skipped, logged) if it cannot be read.

        One malformed object must not stop the watch: resuming would fetch it again, forever.
        """
        try:
            return self._convert(raw)
        except Exception:
            meta = raw.get("metadata")
            name = meta.get("name") if isinstance(meta, dict) else None
            logger.exception("%s: cannot read object %r; skipped", self.resource, name)
            return None

    def _hand_over(self, items: list[T], *, initial: bool) -> None:
        sink = self._sink

        def apply() -> None:
            sink.replace(items, initial=initial)
            self.status.synced = True
            self._synced.set()

        self._send(apply)

    def _send(self, action: Callable[[], None]) -> None:
        def guarded() -> None:
            if self._stopping.is_set():
                return
            try:
                action()
            except Exception:
                logger.exception("%s: applying a change failed", self.resource)

        try:
            self._deliver(guarded)
        except RuntimeError:
            # The event loop is closed: we are shutting down.
            self._stopping.set()

    def _succeeded(self) -> None:
        self._backoff.success(self.resource)
        self.status.last_error = None

    def _failed(self, exc: BaseException) -> None:
        if self._stopping.is_set():
            return
        self.status.last_error = str(exc)
        delay = self._backoff.failure(self.resource)
        logger.warning(
            "%s: %s; retrying in %.1fs",
            self.resource,
            exc,
            delay,
            extra={"resource": self.resource, "retry_in": round(delay, 3)},
        )
        self._restarted("error")
        self._stopping.wait(delay)

    def _restarted(self, reason: str) -> None:
        if self._stopping.is_set():
            return
        restarts = self.status.restarts
        restarts[reason] = restarts.get(reason, 0) + 1
        if self._on_restart is not None:
            try:
                self._on_restart(self.resource, reason)
            except Exception:
                logger.exception("%s: the restart hook failed", self.resource)


__all__ = [
    "PAGE_SIZE",
    "WATCH_TIMEOUT_SECONDS",
    "Deliver",
    "EventStream",
    "Informer",
    "InformerStatus",
    "RestartHook",
    "Sink",
    "Source",
    "gc_paused",
    "release_free_memory",
]
