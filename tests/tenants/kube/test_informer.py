"""The informer's list-then-watch loop, driven by a scripted source (no server, no timing)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tenants.kube.backoff import BackoffPolicy, ItemBackoff
from tenants.kube.connection import ListPage, Resource
from tenants.kube.errors import KubeGone, KubeUnavailable
from tenants.kube.informer import EventStream, Informer, gc_paused, release_free_memory

WAIT = 30.0


def obj(name: str, version: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": version}}


class ScriptedStream:
    """Yields scripted events, then raises the scripted error or blocks until closed."""

    def __init__(self, events: list[dict[str, Any]], *, error: Exception | None, end: bool) -> None:
        self._events = events
        self._error = error
        self._end = end
        self.closed = threading.Event()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        yield from self._events
        if self._error is not None:
            raise self._error
        if not self._end:
            self.closed.wait(WAIT)

    def close(self) -> None:
        self.closed.set()


class ScriptedSource:
    """Lists answer from ``pages`` (a list per call, or an exception); watches from ``watches``."""

    def __init__(self) -> None:
        self.lists: list[list[ListPage | Exception] | Exception] = []
        self.watches: list[tuple[list[dict[str, Any]], Exception | None, bool]] = []
        self.calls: list[tuple[str, str | None]] = []
        self._pages: list[ListPage | Exception] = []
        self.lock = threading.Lock()
        self.idle = threading.Event()  # set when the script is exhausted

    def list_page(
        self, resource: Resource, *, limit: int, continue_token: str | None = None
    ) -> ListPage:
        with self.lock:
            self.calls.append(("list", continue_token))
            if continue_token is None:
                script = self.lists.pop(0)
                if isinstance(script, Exception):
                    raise script
                self._pages = list(script)
            page = self._pages.pop(0)
            if isinstance(page, Exception):
                raise page
            return page

    def watch(
        self, resource: Resource, *, resource_version: str, timeout_seconds: int
    ) -> EventStream:
        with self.lock:
            self.calls.append(("watch", resource_version))
            if not self.watches:
                self.idle.set()
                return ScriptedStream([], error=None, end=False)
            events, error, end = self.watches.pop(0)
            return ScriptedStream(events, error=error, end=end)


class RecordingSink:
    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []

    def replace(self, items: list[str], *, initial: bool) -> None:
        self.log.append(("replace-initial" if initial else "replace", sorted(items)))

    def upsert(self, item: str) -> None:
        self.log.append(("upsert", item))

    def delete(self, item: str) -> None:
        self.log.append(("delete", item))


def name_of(raw: dict[str, Any]) -> str | None:
    name = raw["metadata"].get("name")
    return name if isinstance(name, str) else None


def run(source: ScriptedSource, **kwargs: Any) -> tuple[RecordingSink, Informer[str], list[str]]:
    sink = RecordingSink()
    restarts: list[str] = []
    options: dict[str, Any] = {"convert": name_of, "page_size": 2, **kwargs}
    informer: Informer[str] = Informer(
        "pods",
        connection=source,
        sink=sink,
        deliver=lambda action: action(),
        backoff=ItemBackoff(BackoffPolicy(base=0.001, cap=0.002, jitter=0)),
        on_restart=lambda resource, reason: restarts.append(reason),
        **options,
    )
    informer.start()
    assert source.idle.wait(WAIT), source.calls
    informer.stop()
    assert informer.join(WAIT)
    return sink, informer, restarts


def page(names: list[str], version: str, token: str | None = None) -> ListPage:
    return ListPage([obj(n, version) for n in names], version, token)


def test_it_lists_in_pages_then_watches_from_the_lists_version() -> None:
    source = ScriptedSource()
    source.lists = [[page(["a", "b"], "10", "t1"), page(["c"], "11")]]
    source.watches = [
        (
            [
                {"type": "ADDED", "object": obj("d", "12")},
                {"type": "MODIFIED", "object": obj("a", "13")},
                {"type": "DELETED", "object": obj("b", "14")},
            ],
            None,
            True,
        ),
    ]
    sink, informer, restarts = run(source)
    assert sink.log == [
        ("replace-initial", ["a", "b", "c"]),
        ("upsert", "d"),
        ("upsert", "a"),
        ("delete", "b"),
    ]
    assert source.calls == [("list", None), ("list", "t1"), ("watch", "10"), ("watch", "14")]
    assert informer.synced
    assert informer.status.lists == 1
    assert informer.status.events == 3
    assert restarts == ["closed"]


def test_bookmarks_move_the_resume_point() -> None:
    source = ScriptedSource()
    source.lists = [[page(["a"], "5")]]
    source.watches = [([{"type": "BOOKMARK", "object": obj("", "40")}], None, True)]
    sink, informer, _ = run(source)
    assert source.calls[-1] == ("watch", "40")
    assert informer.status.resource_version == "40"
    assert sink.log == [("replace-initial", ["a"])]


def test_a_dropped_watch_resumes_from_the_last_version_seen() -> None:
    source = ScriptedSource()
    source.lists = [[page(["a"], "5")]]
    source.watches = [
        ([{"type": "ADDED", "object": obj("b", "6")}], KubeUnavailable("reset by peer"), False)
    ]
    sink, _, restarts = run(source)
    assert source.calls == [("list", None), ("watch", "5"), ("watch", "6")]
    assert sink.log == [("replace-initial", ["a"]), ("upsert", "b")]
    assert restarts == ["error"]


def test_gone_lists_again_and_hands_over_the_whole_list() -> None:
    source = ScriptedSource()
    source.lists = [[page(["a", "b"], "5")], [page(["b", "c"], "50")]]
    source.watches = [([], KubeGone("too old", status=410), False)]
    sink, _, restarts = run(source)
    assert sink.log == [("replace-initial", ["a", "b"]), ("replace", ["b", "c"])]
    assert source.calls == [("list", None), ("watch", "5"), ("list", None), ("watch", "50")]
    assert restarts == ["expired"]


def test_an_expired_continue_token_restarts_the_list() -> None:
    source = ScriptedSource()
    source.lists = [
        [page(["a", "b"], "5", "t1"), KubeGone("continue expired", status=410)],
        [page(["a", "c"], "9")],
    ]
    sink, _, _ = run(source)
    assert sink.log == [("replace-initial", ["a", "c"])]
    assert source.calls[-1] == ("watch", "9")


def test_failing_lists_are_retried_until_one_works() -> None:
    source = ScriptedSource()
    source.lists = [KubeUnavailable("refused"), KubeUnavailable("refused"), [page(["a"], "3")]]
    sink, informer, restarts = run(source)
    assert sink.log == [("replace-initial", ["a"])]
    assert restarts == ["error", "error"]
    assert informer.status.last_error is None


def test_nothing_is_delivered_after_stop() -> None:
    source = ScriptedSource()
    source.lists = [[page(["a"], "3")]]
    delivered: list[str] = []
    held: list[Any] = []
    informer: Informer[str] = Informer(
        "pods",
        connection=source,
        convert=name_of,
        sink=RecordingSink(),
        deliver=held.append,  # an event loop that has not run the callbacks yet
        backoff=ItemBackoff(),
    )
    informer.start()
    assert source.idle.wait(WAIT)
    informer.stop()
    assert informer.join(WAIT)
    for action in held:
        action()
        delivered.append("ran")
    assert not informer.synced


def test_it_waits_for_the_informer_it_comes_after() -> None:
    first_source, second_source = ScriptedSource(), ScriptedSource()
    first_source.lists = [[page(["ns"], "1")]]
    second_source.lists = [[page(["pod"], "1")]]
    order: list[str] = []
    release = threading.Event()

    def gated(action: Any) -> None:
        release.wait(WAIT)
        ordered("namespaces", action)

    def ordered(name: str, action: Any) -> None:
        order.append(name)
        action()

    first: Informer[str] = Informer(
        "namespaces",
        connection=first_source,
        convert=name_of,
        sink=RecordingSink(),
        deliver=gated,
        backoff=ItemBackoff(),
    )
    second: Informer[str] = Informer(
        "pods",
        connection=second_source,
        convert=name_of,
        sink=RecordingSink(),
        deliver=lambda action: ordered("pods", action),
        backoff=ItemBackoff(),
        after=first,
    )
    second.start()
    first.start()
    assert second_source.calls == []
    release.set()
    assert second_source.idle.wait(WAIT)
    assert order[0] == "namespaces"
    for informer in (first, second):
        informer.stop()
        assert informer.join(WAIT)


def test_an_object_that_cannot_be_read_is_skipped(caplog: pytest.LogCaptureFixture) -> None:
    source = ScriptedSource()
    source.lists = [[page(["a", "boom"], "5")]]
    source.watches = [
        (
            [
                {"type": "ADDED", "object": obj("boom", "6")},
                {"type": "ADDED", "object": obj("b", "7")},
            ],
            None,
            True,
        )
    ]

    def picky(raw: dict[str, Any]) -> str | None:
        name = name_of(raw)
        if name == "boom":
            raise TypeError("unexpected shape")
        return name

    sink, _, _ = run(source, convert=picky)
    assert sink.log == [("replace-initial", ["a"]), ("upsert", "b")]
    assert source.calls[-1] == ("watch", "7")
    assert "pods: cannot read object 'boom'; skipped" in caplog.text


def test_it_starts_once() -> None:
    source = ScriptedSource()
    source.lists = [[page([], "1")]]
    _, informer, _ = run(source)
    with pytest.raises(RuntimeError, match="already started"):
        informer.start()


def test_gc_paused_pauses_and_restores_the_collector() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():  # nested (or another informer's thread): still paused
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_gc_paused_restores_even_when_the_step_fails() -> None:
    with pytest.raises(KubeUnavailable), gc_paused():
        raise KubeUnavailable("down")
    assert gc.isenabled()


def test_gc_paused_keeps_a_disabled_collector_disabled() -> None:
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_lists_run_with_the_collector_paused_and_restore_it() -> None:
    seen: list[bool] = []

    def convert(raw: dict[str, Any]) -> str | None:
        seen.append(gc.isenabled())
        return name_of(raw)

    source = ScriptedSource()
    source.lists = [[page(["a", "b"], "5", token="t"), page(["c"], "5")]]
    sink, _, _ = run(source, convert=convert)
    assert sink.log[0] == ("replace-initial", ["a", "b", "c"])
    assert seen == [False, False, False]
    assert gc.isenabled()


def test_release_free_memory_is_safe_to_call() -> None:
    release_free_memory()
    release_free_memory()
