"""Watch streams through the Kubernetes client: events, bookmarks, resumption, 410 Gone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from devapi import DevAPIServer
from tests.devapi.support import Api, pod, watch_events

Event = dict[str, Any]


def events(
    stream: Iterator[Event], count: int, *, skip_bookmarks: bool = True
) -> list[tuple[str, str, str]]:
    """The first ``count`` events as (type, name, resourceVersion)."""
    seen: list[tuple[str, str, str]] = []
    for event in stream:
        if skip_bookmarks and event["type"] == "BOOKMARK":
            continue
        metadata = event["raw_object"]["metadata"]
        seen.append((event["type"], metadata.get("name", ""), metadata["resourceVersion"]))
        if len(seen) == count:
            break
    return seen


def test_list_then_watch_from_the_list_revision_loses_nothing(core: Api) -> None:
    core.create_namespaced_pod("default", pod("before"))
    listing = core.list_namespaced_pod("default")
    core.create_namespaced_pod("default", pod("added"))
    core.patch_namespaced_pod("before", "default", {"metadata": {"labels": {"v": "2"}}})
    core.delete_namespaced_pod("added", "default")

    stream = watch_events(
        core.list_namespaced_pod,
        "default",
        resource_version=listing.metadata.resource_version,
        timeout_seconds=30,
    )
    seen = events(stream, 3)
    assert [(t, n) for t, n, _ in seen] == [
        ("ADDED", "added"),
        ("MODIFIED", "before"),
        ("DELETED", "added"),
    ]
    revisions = [int(rv) for _, _, rv in seen]
    assert revisions == sorted(revisions)
    assert revisions[0] > int(listing.metadata.resource_version)


def test_watch_without_resource_version_starts_with_the_current_state(
    core: Api,
) -> None:
    core.create_namespaced_pod("default", pod("a"))
    core.create_namespaced_pod("default", pod("b"))
    stream = watch_events(core.list_namespaced_pod, "default", timeout_seconds=30)
    first = events(stream, 2)
    assert [(t, n) for t, n, _ in first] == [("ADDED", "a"), ("ADDED", "b")]


def test_bookmarks_report_progress(core: Api) -> None:
    listing = core.list_namespaced_pod("default")
    stream = watch_events(
        core.list_namespaced_pod,
        "default",
        resource_version=listing.metadata.resource_version,
        allow_watch_bookmarks=True,
        timeout_seconds=60,
    )
    kinds: list[str] = []
    created_rv = 0
    for event in stream:
        kinds.append(event["type"])
        rv = int(event["raw_object"]["metadata"]["resourceVersion"])
        if event["type"] == "BOOKMARK" and not created_rv:
            assert rv >= int(listing.metadata.resource_version)
            assert event["raw_object"]["kind"] == "Pod"
            created_rv = int(
                core.create_namespaced_pod("default", pod("x")).metadata.resource_version
            )
        elif event["type"] == "BOOKMARK":
            assert rv >= created_rv
            break
    assert kinds[0] == "BOOKMARK"
    assert "ADDED" in kinds


def test_resuming_from_the_last_seen_revision_continues_exactly(core: Api) -> None:
    listing = core.list_namespaced_pod("default")
    core.create_namespaced_pod("default", pod("one"))
    core.create_namespaced_pod("default", pod("two"))
    first = events(
        watch_events(
            core.list_namespaced_pod,
            "default",
            resource_version=listing.metadata.resource_version,
            timeout_seconds=30,
        ),
        1,
    )
    assert [n for _, n, _ in first] == ["one"]
    core.create_namespaced_pod("default", pod("three"))
    rest = events(
        watch_events(
            core.list_namespaced_pod, "default", resource_version=first[0][2], timeout_seconds=30
        ),
        2,
    )
    assert [n for _, n, _ in rest] == ["two", "three"]


def test_watch_from_a_compacted_revision_is_410_gone(devapi: DevAPIServer, core: Api) -> None:
    old = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", pod("web"))
    devapi.faults.compact_history()
    stream = watch_events(
        core.list_namespaced_pod, "default", resource_version=old, timeout_seconds=30
    )
    with pytest.raises(client.ApiException) as raised:
        next(iter(stream))
    assert raised.value.status == 410
    assert (
        raised.value.reason
        == f"Expired: too old resource version: {old} ({devapi.store.compacted_rv()})"
    )
    # Relisting gives a revision the server can watch from again.
    fresh = core.list_namespaced_pod("default")
    core.create_namespaced_pod("default", pod("after"))
    seen = events(
        watch_events(
            core.list_namespaced_pod,
            "default",
            resource_version=fresh.metadata.resource_version,
            timeout_seconds=30,
        ),
        1,
    )
    assert [n for _, n, _ in seen] == ["after"]


def test_a_short_history_expires_old_revisions() -> None:
    with DevAPIServer(history_size=3) as devserver:
        api_client: Api = client.ApiClient(client.Configuration(host=devserver.url))
        try:
            core: Api = client.CoreV1Api(api_client)
            old = core.list_namespaced_pod("default").metadata.resource_version
            for i in range(4):
                core.create_namespaced_pod("default", pod(f"p{i}"))
            stream = watch_events(
                core.list_namespaced_pod, "default", resource_version=old, timeout_seconds=30
            )
            with pytest.raises(client.ApiException) as raised:
                next(iter(stream))
            assert raised.value.status == 410
        finally:
            api_client.close()


def test_objects_leaving_and_entering_a_selector_are_deleted_and_added(
    core: Api,
) -> None:
    listing = core.list_namespaced_pod("default")
    core.create_namespaced_pod("default", pod("web", labels={"app": "web"}))
    core.patch_namespaced_pod("web", "default", {"metadata": {"labels": {"app": "db"}}})
    core.patch_namespaced_pod("web", "default", {"metadata": {"labels": {"app": "web", "v": "2"}}})
    core.create_namespaced_pod("default", pod("other", labels={"app": "db"}))
    stream = watch_events(
        core.list_namespaced_pod,
        "default",
        label_selector="app=web",
        resource_version=listing.metadata.resource_version,
        timeout_seconds=30,
    )
    seen = events(stream, 3)
    assert [(t, n) for t, n, _ in seen] == [("ADDED", "web"), ("DELETED", "web"), ("ADDED", "web")]


def test_field_selector_watch(core: Api) -> None:
    listing = core.list_namespaced_pod("default")
    core.create_namespaced_pod("default", pod("unscheduled"))
    core.create_namespaced_pod("default", pod("placed", nodeName="node-1"))
    stream = watch_events(
        core.list_namespaced_pod,
        "default",
        field_selector="spec.nodeName=node-1",
        resource_version=listing.metadata.resource_version,
        timeout_seconds=30,
    )
    assert [n for _, n, _ in events(stream, 1)] == ["placed"]


def test_namespaced_watch_sees_only_its_namespace(core: Api) -> None:
    core.create_namespace({"metadata": {"name": "team-a"}})
    listing = core.list_pod_for_all_namespaces()
    core.create_namespaced_pod("default", pod("elsewhere"))
    core.create_namespaced_pod("team-a", pod("here"))
    seen = events(
        watch_events(
            core.list_namespaced_pod,
            "team-a",
            resource_version=listing.metadata.resource_version,
            timeout_seconds=30,
        ),
        1,
    )
    assert [n for _, n, _ in seen] == ["here"]
    everywhere = events(
        watch_events(
            core.list_pod_for_all_namespaces,
            resource_version=listing.metadata.resource_version,
            timeout_seconds=30,
        ),
        2,
    )
    assert [n for _, n, _ in everywhere] == ["elsewhere", "here"]


def test_send_initial_events_ends_the_initial_state_with_an_annotated_bookmark(
    core: Api,
) -> None:
    core.create_namespaced_pod("default", pod("a"))
    stream = watch_events(
        core.list_namespaced_pod,
        "default",
        send_initial_events=True,
        resource_version_match="NotOlderThan",
        allow_watch_bookmarks=True,
        timeout_seconds=30,
    )
    first = next(iter(stream))
    assert (first["type"], first["raw_object"]["metadata"]["name"]) == ("ADDED", "a")
    second = next(iter(stream))
    assert second["type"] == "BOOKMARK"
    assert second["raw_object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_a_dropped_watch_is_resumed_by_the_client_without_losing_events(
    devapi: DevAPIServer, core: Api
) -> None:
    core.create_namespaced_pod("default", pod("first"))
    names: list[str] = []
    for event in watch_events(core.list_namespaced_pod, "default"):
        if event["type"] == "BOOKMARK":
            continue
        names.append(event["raw_object"]["metadata"]["name"])
        if names == ["first"]:
            assert devapi.faults.drop_watches() == 1
            # Created while no watch is open: the client's rewatch from its last revision
            # must still deliver it.
            core.create_namespaced_pod("default", pod("second"))
        if len(names) == 2:
            break
    assert names == ["first", "second"]


def test_a_dropped_watch_with_a_timeout_ends_the_stream(devapi: DevAPIServer, core: Api) -> None:
    core.create_namespaced_pod("default", pod("only"))
    seen: list[str] = []
    for event in watch_events(core.list_namespaced_pod, "default", timeout_seconds=300):
        seen.append(event["type"])
        devapi.faults.drop_watches()
    assert seen == ["ADDED"]


def test_deleted_event_carries_the_deletion_revision(core: Api) -> None:
    created = core.create_namespaced_pod("default", pod("gone"))
    listing = core.list_namespaced_pod("default")
    core.delete_namespaced_pod("gone", "default")
    ((kind, name, rv),) = events(
        watch_events(
            core.list_namespaced_pod,
            "default",
            resource_version=listing.metadata.resource_version,
            timeout_seconds=30,
        ),
        1,
    )
    assert (kind, name) == ("DELETED", "gone")
    assert int(rv) > int(created.metadata.resource_version)
