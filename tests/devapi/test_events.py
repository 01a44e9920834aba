"""Events through the real client and kubectl: create, list with the field selectors
``kubectl describe`` sends, watch, the ``kubectl get events`` table, and the recorder's
deduplication.

Upstream: pkg/registry/core/event/strategy.go (ToSelectableFields),
pkg/apis/core/validation/events.go (ValidateEventCreate), printers.go (printEvent),
k8s.io/kubectl/pkg/describe/describe.go (searchEvents), client-go tools/record (makeEvent,
EventCorrelator).
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from devapi import DevAPIServer
from devapi.events import NORMAL, WARNING, EventRecorder
from devapi.registry import RequestContext
from devapi.resources import PODS
from tests.devapi.support import Api, status_of, watch_events
from tests.devapi.test_kubectl import KUBECTL, Kubectl

POD = {
    "metadata": {"name": "web"},
    "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]},
}


def event(name: str, involved: dict[str, Any], **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"name": name},
        "involvedObject": involved,
        "reason": "Started",
        "message": "Started container app",
        "type": NORMAL,
        "source": {"component": "kubelet", "host": "node-1"},
        "count": 1,
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:00:05Z",
    }
    body.update(fields)
    return body


def pod_ref(pod: Any) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "namespace": "default",
        "name": pod.metadata.name,
        "uid": pod.metadata.uid,
    }


def test_events_are_created_listed_and_selected_by_involved_object(core: Api) -> None:
    """ToSelectableFields: involvedObject.*, reason, type, source, reportingComponent."""
    web = core.create_namespaced_pod("default", POD)
    other = core.create_namespaced_pod("default", {**POD, "metadata": {"name": "other"}})
    core.create_namespaced_event("default", event("web.1", pod_ref(web)))
    core.create_namespaced_event(
        "default",
        event("web.2", pod_ref(web), type=WARNING, reason="BackOff", message="Back-off"),
    )
    core.create_namespaced_event("default", event("other.1", pod_ref(other)))

    def names(selector: str) -> list[str]:
        found = core.list_namespaced_event("default", field_selector=selector)
        return sorted(e.metadata.name for e in found.items)

    # What kubectl describe sends: name, namespace, kind and uid of the described object.
    described = (
        f"involvedObject.name=web,involvedObject.namespace=default,"
        f"involvedObject.kind=Pod,involvedObject.uid={web.metadata.uid}"
    )
    assert names(described) == ["web.1", "web.2"]
    assert names("involvedObject.name=web,type=Warning") == ["web.2"]
    assert names("reason=Started") == ["other.1", "web.1"]
    assert names("source=kubelet") == ["other.1", "web.1", "web.2"]
    assert names(f"involvedObject.uid={other.metadata.uid}") == ["other.1"]
    everywhere = core.list_event_for_all_namespaces(field_selector="involvedObject.name=other")
    assert [e.metadata.name for e in everywhere.items] == ["other.1"]
    with pytest.raises(client.ApiException) as unknown:
        core.list_namespaced_event("default", field_selector="message=x")
    assert unknown.value.status == 400
    core.delete_namespaced_event("web.1", "default")
    assert names("involvedObject.name=web") == ["web.2"]


def test_an_event_about_another_namespace_is_invalid(core: Api) -> None:
    """ValidateEventCreate (legacyValidateEvent): the involved object's namespace."""
    involved = {"kind": "Pod", "namespace": "kube-system", "name": "web"}
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_event("default", event("web.1", involved))
    assert err.value.status == 422
    message = status_of(err.value)["message"]
    assert message == (
        'Event "web.1" is invalid: '
        'involvedObject.namespace: Invalid value: "kube-system": does not match event.namespace'
    )


def test_events_can_be_watched(core: Api) -> None:
    seen: list[str] = []
    # From the list's resourceVersion: whenever the watch connects, it replays what came after.
    since = core.list_namespaced_event("default").metadata.resource_version

    def follow() -> None:
        for item in watch_events(
            core.list_namespaced_event, "default", resource_version=since, timeout_seconds=30
        ):
            seen.append(f"{item['type']} {item['object'].metadata.name}")
            if len(seen) == 2:
                return

    follower = threading.Thread(target=follow)
    follower.start()
    involved = {"kind": "Pod", "namespace": "default", "name": "web"}
    core.create_namespaced_event("default", event("web.1", involved))
    core.patch_namespaced_event("web.1", "default", {"count": 2})
    follower.join(30)
    assert seen == ["ADDED web.1", "MODIFIED web.1"]


def test_the_recorder_counts_repeats_of_one_event(devapi: DevAPIServer, core: Api) -> None:
    """client-go's EventCorrelator: the same event again increments count on the first."""
    web = core.create_namespaced_pod("default", POD)
    registry = devapi.registry
    from devapi.admission import UserInfo
    from devapi.events import EVENTS

    ctx = RequestContext(user=UserInfo("system:kube-controller-manager"))

    async def create(namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return await registry.create(EVENTS, "v1", namespace, body, ctx)

    async def update(namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        return await registry.update(EVENTS, "v1", namespace, name, body, ctx)

    recorder = EventRecorder("test-controller", create=create, update=update)
    stored = registry.get(PODS, "v1", "default", "web")

    async def record() -> None:
        for _ in range(3):
            await recorder.record(stored, WARNING, "FailedCreate", "Error creating: denied")
        await recorder.record(stored, NORMAL, "SuccessfulCreate", "Created pod: web")

    asyncio.run(record())
    events = core.list_namespaced_event("default", field_selector="involvedObject.name=web")
    counted = {(e.reason, e.count) for e in events.items}
    assert counted == {("FailedCreate", 3), ("SuccessfulCreate", 1)}
    failed = next(e for e in events.items if e.reason == "FailedCreate")
    assert failed.source.component == "test-controller"
    now = [1_000_000.0]
    spammy = EventRecorder("spammy", create=create, update=update, clock=lambda: now[0])

    async def flood() -> None:
        for _ in range(30):
            await spammy.record(stored, WARNING, "FailedCreate", "Error creating: denied")
        now[0] += 300  # the spam filter's bucket gets one event back
        await spammy.record(stored, WARNING, "FailedCreate", "Error creating: denied")

    asyncio.run(flood())
    flooded = core.list_namespaced_event("default", field_selector="source=spammy")
    assert [e.count for e in flooded.items] == [26]
    assert failed.involved_object.uid == web.metadata.uid
    assert failed.metadata.name.startswith("web.")


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_kubectl_get_events_and_describe_pod(kubeconfig: Path, tmp_path: Path, core: Api) -> None:
    kubectl = Kubectl(kubeconfig, tmp_path)
    web = core.create_namespaced_pod("default", POD)
    other = core.create_namespaced_pod("default", {**POD, "metadata": {"name": "other"}})
    core.create_namespaced_event(
        "default", event("web.1", pod_ref(web), message="Pulled image for web")
    )
    core.create_namespaced_event(
        "default", event("other.1", pod_ref(other), message="Pulled image for other")
    )
    listed = kubectl("get", "events")
    assert listed.code == 0, listed.stderr
    header, *rows = listed.stdout.strip().splitlines()
    assert header.split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert any("pod/web" in row and "Pulled image for web" in row for row in rows)
    wide = kubectl("get", "events", "-o", "wide")
    assert "kubelet, node-1" in wide.stdout
    described = kubectl("describe", "pod", "web")
    assert described.code == 0, described.stderr
    events_part = described.stdout.split("Events:", 1)[1]
    assert "Pulled image for web" in events_part
    assert "Pulled image for other" not in events_part


# --- events.k8s.io/v1 --------------------------------------------------------------------------


def new_event(name: str, regarding: dict[str, Any], **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "tenantgate.io/controller",
        "reportingInstance": "tenantgate-0",
        "action": "Queue",
        "reason": "Queued",
        "note": "position 1 of 3",
        "type": NORMAL,
        "regarding": regarding,
    }
    body.update(fields)
    return body


def test_events_k8s_io_events_are_the_same_objects(api_client: Api, core: Api) -> None:
    """pkg/apis/events/v1/conversion.go: regarding/involvedObject, note/message,
    reportingController/reportingComponent; AddFieldLabelConversionsForEvent."""
    events: Api = client.EventsV1Api(api_client)
    web = core.create_namespaced_pod("default", POD)
    created = events.create_namespaced_event("default", new_event("web.q", pod_ref(web)))
    assert (created.note, created.regarding.uid, created.reporting_controller) == (
        "position 1 of 3",
        web.metadata.uid,
        "tenantgate.io/controller",
    )
    # Through the core API: the same object, its legacy field names.
    legacy = core.read_namespaced_event("web.q", "default")
    assert (legacy.message, legacy.involved_object.name, legacy.reporting_component) == (
        "position 1 of 3",
        "web",
        "tenantgate.io/controller",
    )
    core.create_namespaced_event("default", event("web.1", pod_ref(web)))
    # Read raw: a legacy event's eventTime is null, which the generated client's model refuses.
    raw = events.list_namespaced_event(
        "default", field_selector="regarding.name=web,type=Normal", _preload_content=False
    )
    found = json.loads(raw.data)["items"]
    assert sorted(e["metadata"]["name"] for e in found) == ["web.1", "web.q"]
    old_style = next(e for e in found if e["metadata"]["name"] == "web.1")
    assert old_style["eventTime"] is None
    assert (old_style["deprecatedCount"], old_style["deprecatedSource"]) == (
        1,
        {"component": "kubelet", "host": "node-1"},
    )
    assert old_style["note"] == "Started container app"
    by_controller = events.list_namespaced_event(
        "default", field_selector="reportingController=tenantgate.io/controller"
    )
    assert [e.metadata.name for e in by_controller.items] == ["web.q"]
    patched = events.patch_namespaced_event("web.q", "default", {"note": "position 2 of 3"})
    assert patched.note == "position 2 of 3"
    assert core.read_namespaced_event("web.q", "default").message == "position 2 of 3"
    events.delete_namespaced_event("web.q", "default")
    assert [e.metadata.name for e in core.list_namespaced_event("default").items] == ["web.1"]


def test_an_events_k8s_io_event_needs_its_time(devapi: DevAPIServer) -> None:
    """ValidateEventCreate: the generated client refuses such a body itself, so it is sent
    as plain JSON."""
    body = new_event("web.q", {"kind": "Pod", "namespace": "default", "name": "web"})
    del body["eventTime"]
    request = urllib.request.Request(
        f"{devapi.url}/apis/events.k8s.io/v1/namespaces/default/events",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=30)
    assert err.value.code == 422
    assert json.loads(err.value.read())["message"] == (
        'Event.events.k8s.io "web.q" is invalid: eventTime: Required value'
    )


def test_events_k8s_io_events_can_be_watched(api_client: Api) -> None:
    events: Api = client.EventsV1Api(api_client)
    seen: list[str] = []
    since = events.list_namespaced_event("default").metadata.resource_version

    def follow() -> None:
        for item in watch_events(
            events.list_namespaced_event, "default", resource_version=since, timeout_seconds=30
        ):
            seen.append(f"{item['type']} {item['object'].note}")
            return

    follower = threading.Thread(target=follow)
    follower.start()
    events.create_namespaced_event(
        "default", new_event("web.q", {"kind": "Pod", "namespace": "default", "name": "web"})
    )
    follower.join(30)
    assert seen == ["ADDED position 1 of 3"]
