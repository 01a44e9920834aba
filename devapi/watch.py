"""Watch streams: selector-aware events, periodic bookmarks, timeouts, and the chunked response."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import orjson
from starlette.types import Receive, Scope, Send

from devapi.store import ADDED, DELETED, MODIFIED, Event, Subscription, clone
from devapi.types import JSONObject

logger = logging.getLogger(__name__)

BOOKMARK = "BOOKMARK"
ERROR = "ERROR"
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


@dataclass(frozen=True)
class WatchOptions:
    """What one watch request asked for."""

    bookmarks: bool
    bookmark_interval: float
    timeout: float
    initial_events_end: bool  # sendInitialEvents=true: mark the end of the initial state


def event_line(event_type: str, obj: JSONObject) -> bytes:
    return orjson.dumps({"type": event_type, "object": obj}) + b"\n"


class WatchStream:
    """Turns a store subscription into the lines of one watch response."""

    def __init__(
        self,
        subscription: Subscription,
        initial: list[Event],
        options: WatchOptions,
        *,
        matches: Callable[[JSONObject], bool],
        render: Callable[[str, JSONObject], JSONObject],
        bookmark: Callable[[int, bool], JSONObject],
    ) -> None:
        self._subscription = subscription
        self._initial = initial
        self._options = options
        self._matches = matches
        self._render = render
        self._bookmark = bookmark

    def close(self) -> None:
        self._subscription.close()

    async def lines(self) -> AsyncIterator[bytes]:
        deadline = time.monotonic() + self._options.timeout
        for event in self._initial:
            for line in self._translate(event):
                yield line
        self._initial = []
        if self._options.initial_events_end and self._options.bookmarks:
            rv = self._subscription.progress()
            if rv is not None:
                yield event_line(BOOKMARK, self._bookmark(rv, True))
        last_bookmark = time.monotonic()
        while True:
            for event in self._subscription.take():
                for line in self._translate(event):
                    yield line
            if self._subscription.closed:
                # Events queued before the close were taken above; nothing is lost.
                return
            now = time.monotonic()
            if now >= deadline:
                return
            if self._options.bookmarks and now - last_bookmark >= self._options.bookmark_interval:
                rv = self._subscription.progress()
                if rv is not None:
                    yield event_line(BOOKMARK, self._bookmark(rv, False))
                    last_bookmark = now
                continue
            wait = deadline - now
            if self._options.bookmarks:
                wait = min(wait, self._options.bookmark_interval - (now - last_bookmark))
            await self._subscription.wait(max(wait, 0.0))

    def _translate(self, event: Event) -> list[bytes]:
        """The event as this watch sees it: objects entering or leaving its selectors are
        ADDED or DELETED, as the real server's watch cache reports them."""
        if event.type == ADDED:
            if self._matches(event.object):
                return [event_line(ADDED, self._render(ADDED, event.object))]
            return []
        if event.type == DELETED:
            last = event.previous if event.previous is not None else event.object
            if self._matches(last):
                return [event_line(DELETED, self._render(DELETED, event.object))]
            return []
        now_matches = self._matches(event.object)
        before = event.previous is not None and self._matches(event.previous)
        if now_matches and before:
            return [event_line(MODIFIED, self._render(MODIFIED, event.object))]
        if now_matches:
            return [event_line(ADDED, self._render(ADDED, event.object))]
        if before and event.previous is not None:
            gone = clone(event.previous)
            gone.setdefault("metadata", {})["resourceVersion"] = str(event.rv)
            return [event_line(DELETED, self._render(DELETED, gone))]
        return []


class StreamingBody:
    """A chunked response that stops its producer when the client goes away."""

    def __init__(
        self,
        chunks: AsyncIterator[bytes],
        *,
        headers: list[tuple[bytes, bytes]],
        on_close: Callable[[], None],
    ) -> None:
        self._chunks = chunks
        self._headers = headers
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self._headers})

        async def produce() -> None:
            async for chunk in self._chunks:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        async def until_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        producer = asyncio.ensure_future(produce())
        watcher = asyncio.ensure_future(until_disconnect())
        try:
            await asyncio.wait((producer, watcher), return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._on_close()
            for task in (producer, watcher):
                task.cancel()
            await asyncio.gather(producer, watcher, return_exceptions=True)
            aclose = getattr(self._chunks, "aclose", None)
            if aclose is not None:
                await aclose()
        if producer.done() and not producer.cancelled():
            failure = producer.exception()
            if failure is not None:
                raise failure
