"""Fault injection, armed from Python and over ``/__dev/faults``, observed through the client."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from kubernetes import client

from devapi import DevAPIServer
from tests.devapi.support import Api, pod, status_of, watch_events


def dev_call(
    api_client: Api, method: str, path: str, body: Any = None, *, status: int = 200
) -> Any:
    response = api_client.call_api(
        *api_client.param_serialize(
            method, path, body=body, header_params={"Content-Type": "application/json"}
        )
    )
    response.read()
    assert response.status == status
    return orjson.loads(response.data)


def test_error_responses_for_a_count_then_recovery(devapi: DevAPIServer, core: Api) -> None:
    devapi.faults.add_errors(503, count=2, verb="list", resource="pods")
    for _ in range(2):
        with pytest.raises(client.ApiException) as raised:
            core.list_namespaced_pod("default")
        assert raised.value.status == 503
        assert status_of(raised.value)["reason"] == "ServiceUnavailable"
    assert core.list_namespaced_pod("default").items == []
    # Other verbs and resources were never affected.
    assert core.read_namespace("default").metadata.name == "default"


def test_errors_can_target_a_path(devapi: DevAPIServer, core: Api) -> None:
    core.create_namespace({"metadata": {"name": "team-a"}})
    devapi.faults.add_errors(500, path="/api/v1/namespaces/team-a/", message="etcd is sad")
    assert core.list_namespaced_pod("default").items == []
    with pytest.raises(client.ApiException) as raised:
        core.list_namespaced_pod("team-a")
    assert (raised.value.status, status_of(raised.value)["message"]) == (500, "etcd is sad")


def test_too_many_requests_carries_retry_after(devapi: DevAPIServer, core: Api) -> None:
    devapi.faults.add_errors(429, verb="create")
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod("default", pod("web"))
    assert raised.value.status == 429
    headers: Api = raised.value.headers
    assert headers["Retry-After"] == "1"


def test_latency_is_added_and_consumed(devapi: DevAPIServer, core: Api) -> None:
    devapi.faults.add_latency(0.05, verb="get", count=2)
    core.read_namespace("default")
    assert devapi.faults.snapshot()["latencies"][0]["remaining"] == 1
    core.read_namespace("default")
    assert devapi.faults.snapshot()["latencies"] == []


def test_conflict_storm_answers_409_for_the_next_updates(
    devapi: DevAPIServer, api_client: Api
) -> None:
    leases: Api = client.CoordinationV1Api(api_client)
    leases.create_namespaced_lease(
        "default", {"metadata": {"name": "l"}, "spec": {"holderIdentity": "a"}}
    )
    devapi.faults.conflict_storm("leases.coordination.k8s.io", count=3)
    for _ in range(3):
        with pytest.raises(client.ApiException) as raised:
            leases.patch_namespaced_lease("l", "default", {"spec": {"holderIdentity": "b"}})
        assert raised.value.status == 409
        assert status_of(raised.value)["message"].startswith(
            'Operation cannot be fulfilled on leases.coordination.k8s.io "l"'
        )
    assert (
        leases.patch_namespaced_lease(
            "l", "default", {"spec": {"holderIdentity": "b"}}
        ).spec.holder_identity
        == "b"
    )


def test_faults_over_http(devapi: DevAPIServer, api_client: Api, core: Api) -> None:
    dev_call(
        api_client,
        "POST",
        "/__dev/faults/errors",
        {"status": 500, "count": 1, "verb": "get", "resource": "namespaces"},
    )
    dev_call(api_client, "POST", "/__dev/faults/conflicts", {"resource": "pods", "count": 1})
    state = dev_call(
        api_client, "POST", "/__dev/faults/latency", {"seconds": 0.01, "verb": "list", "count": 1}
    )
    assert state["errors"][0]["status"] == 500
    assert state["conflicts"] == {"pods": 1}
    with pytest.raises(client.ApiException) as raised:
        core.read_namespace("default")
    assert raised.value.status == 500
    core.create_namespaced_pod("default", pod("web"))
    with pytest.raises(client.ApiException) as conflicted:
        core.patch_namespaced_pod("web", "default", {"metadata": {"labels": {"a": "1"}}})
    assert conflicted.value.status == 409

    listing = core.list_namespaced_pod("default")
    compacted = dev_call(api_client, "POST", "/__dev/faults/compact")
    assert int(compacted["resourceVersion"]) >= int(listing.metadata.resource_version)
    cleared = dev_call(api_client, "DELETE", "/__dev/faults")
    assert cleared["errors"] == []
    assert cleared["latencies"] == []
    assert cleared["conflicts"] == {}

    invalid = dev_call(api_client, "POST", "/__dev/faults/errors", {"status": 200}, status=400)
    assert invalid["message"].startswith("invalid errors fault: status:")


def test_drop_watches_over_http(api_client: Api, core: Api) -> None:
    core.create_namespaced_pod("default", pod("web"))
    seen = []
    for event in watch_events(core.list_namespaced_pod, "default", timeout_seconds=300):
        seen.append(event["type"])
        assert dev_call(api_client, "POST", "/__dev/faults/drop-watches") == {"dropped": 1}
    assert seen == ["ADDED"]
