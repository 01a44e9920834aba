"""Objects, resourceVersions, conflicts and pagination, through the Kubernetes client."""

from __future__ import annotations

import pytest
from kubernetes import client

from devapi import DevAPIServer
from tests.devapi.support import Api, pod, status_of


def test_create_get_list_carry_server_fields_and_resource_versions(core: Api) -> None:
    created = core.create_namespaced_pod("default", pod("web"))
    meta = created.metadata
    assert meta.uid
    assert meta.creation_timestamp is not None
    assert meta.generation == 1
    assert int(meta.resource_version) > 0

    fetched = core.read_namespaced_pod("web", "default")
    assert fetched.metadata.uid == meta.uid
    assert fetched.metadata.resource_version == meta.resource_version

    listing = core.list_namespaced_pod("default")
    assert [p.metadata.name for p in listing.items] == ["web"]
    assert int(listing.metadata.resource_version) >= int(meta.resource_version)


def test_resource_version_is_one_global_increasing_counter(core: Api) -> None:
    a = core.create_namespaced_pod("default", pod("a"))
    ns = core.create_namespace({"metadata": {"name": "team-b"}})
    b = core.create_namespaced_pod("team-b", pod("b"))
    versions = [
        int(a.metadata.resource_version),
        int(ns.metadata.resource_version),
        int(b.metadata.resource_version),
    ]
    assert versions == sorted(versions)
    assert len(set(versions)) == 3


def test_update_with_stale_resource_version_is_409_conflict(core: Api) -> None:
    core.create_namespaced_pod("default", pod("web"))
    first = core.read_namespaced_pod("web", "default")
    second = core.read_namespaced_pod("web", "default")
    first.metadata.labels = {"edited": "first"}
    core.replace_namespaced_pod("web", "default", first)

    second.metadata.labels = {"edited": "second"}
    with pytest.raises(client.ApiException) as raised:
        core.replace_namespaced_pod("web", "default", second)
    assert raised.value.status == 409
    status = status_of(raised.value)
    assert status["reason"] == "Conflict"
    assert status["message"] == (
        'Operation cannot be fulfilled on pods "web": the object has been modified; please apply '
        "your changes to the latest version and try again"
    )
    assert status["details"] == {"name": "web", "kind": "pods"}
    assert core.read_namespaced_pod("web", "default").metadata.labels == {"edited": "first"}


def test_update_without_resource_version_is_unconditional(core: Api) -> None:
    core.create_namespaced_pod("default", pod("web"))
    body = core.read_namespaced_pod("web", "default")
    core.patch_namespaced_pod("web", "default", {"metadata": {"labels": {"moved": "on"}}})
    body.metadata.resource_version = None
    body.metadata.labels = {"replaced": "yes"}
    replaced = core.replace_namespaced_pod("web", "default", body)
    assert replaced.metadata.labels == {"replaced": "yes"}


def test_unchanged_update_keeps_the_resource_version(core: Api) -> None:
    created = core.create_namespaced_pod("default", pod("web"))
    again = core.replace_namespaced_pod(
        "web", "default", core.read_namespaced_pod("web", "default")
    )
    assert again.metadata.resource_version == created.metadata.resource_version


def test_not_found_and_already_exists_have_real_status_bodies(api_client: Api) -> None:
    core: Api = client.CoreV1Api(api_client)
    with pytest.raises(client.ApiException) as missing:
        core.read_namespaced_pod("nope", "default")
    assert missing.value.status == 404
    assert status_of(missing.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "nope" not found',
        "reason": "NotFound",
        "code": 404,
        "details": {"name": "nope", "kind": "pods"},
    }

    leases: Api = client.CoordinationV1Api(api_client)
    lease = {"metadata": {"name": "leader"}, "spec": {"holderIdentity": "a"}}
    leases.create_namespaced_lease("default", lease)
    with pytest.raises(client.ApiException) as exists:
        leases.create_namespaced_lease("default", lease)
    assert exists.value.status == 409
    status = status_of(exists.value)
    assert status["reason"] == "AlreadyExists"
    assert status["message"] == 'leases.coordination.k8s.io "leader" already exists'
    assert status["details"] == {"name": "leader", "group": "coordination.k8s.io", "kind": "leases"}


def test_generate_name_gets_a_unique_suffix(core: Api) -> None:
    names = {
        core.create_namespaced_pod("default", pod(generate_name="worker-")).metadata.name
        for _ in range(5)
    }
    assert len(names) == 5
    assert all(n.startswith("worker-") and len(n) == len("worker-") + 5 for n in names)


def test_create_in_a_missing_namespace_is_404(core: Api) -> None:
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod("ghost", pod("web"))
    assert raised.value.status == 404
    assert status_of(raised.value)["message"] == 'namespaces "ghost" not found'


def test_invalid_pod_is_422_with_causes(core: Api) -> None:
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod(
            "default", {"metadata": {"name": "Bad_Name"}, "spec": {"containers": []}}
        )
    assert raised.value.status == 422
    status = status_of(raised.value)
    assert status["reason"] == "Invalid"
    assert status["message"].startswith(
        'Pod "Bad_Name" is invalid: [metadata.name: Invalid value: "Bad_Name"'
    )
    assert {
        "reason": "FieldValueRequired",
        "message": "Required value",
        "field": "spec.containers",
    } in status["details"]["causes"]


def test_malformed_quantity_is_400_before_anything_else(core: Api) -> None:
    body = pod("web")
    body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "lots"}}
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod("default", body)
    assert raised.value.status == 400
    assert "quantities must match the regular expression" in status_of(raised.value)["message"]


def test_pagination_with_limit_and_continue_reads_one_consistent_snapshot(
    core: Api,
) -> None:
    for i in range(5):
        core.create_namespaced_pod("default", pod(f"p{i}"))
    first = core.list_namespaced_pod("default", limit=2)
    assert [p.metadata.name for p in first.items] == ["p0", "p1"]
    assert first.metadata.remaining_item_count == 3
    # Changes after the first page do not show in later pages: they continue the snapshot.
    core.delete_namespaced_pod("p3", "default")
    core.create_namespaced_pod("default", pod("p9"))
    second = core.list_namespaced_pod("default", limit=2, _continue=first.metadata._continue)
    third = core.list_namespaced_pod("default", limit=2, _continue=second.metadata._continue)
    names = [p.metadata.name for p in second.items + third.items]
    assert names == ["p2", "p3", "p4"]
    assert third.metadata._continue is None
    assert second.metadata.resource_version == first.metadata.resource_version


def test_continue_token_is_410_once_the_history_is_compacted(
    devapi: DevAPIServer, core: Api
) -> None:
    for i in range(3):
        core.create_namespaced_pod("default", pod(f"p{i}"))
    first = core.list_namespaced_pod("default", limit=1)
    core.create_namespaced_pod("default", pod("later"))
    devapi.faults.compact_history()
    with pytest.raises(client.ApiException) as raised:
        core.list_namespaced_pod("default", limit=1, _continue=first.metadata._continue)
    assert raised.value.status == 410
    assert status_of(raised.value)["reason"] == "Expired"


def test_exact_resource_version_list_reads_the_past(core: Api) -> None:
    core.create_namespaced_pod("default", pod("old"))
    before = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", pod("new"))
    past = core.list_namespaced_pod(
        "default", resource_version=before, resource_version_match="Exact"
    )
    assert [p.metadata.name for p in past.items] == ["old"]
    assert past.metadata.resource_version == before


def test_namespaces_get_the_metadata_name_label(core: Api) -> None:
    ns = core.create_namespace({"metadata": {"name": "team-a", "labels": {"tenant": "a"}}})
    assert ns.metadata.labels == {"tenant": "a", "kubernetes.io/metadata.name": "team-a"}
    assert ns.status.phase == "Active"
    relabelled = core.patch_namespace(
        "team-a", {"metadata": {"labels": {"kubernetes.io/metadata.name": "x"}}}
    )
    assert relabelled.metadata.labels["kubernetes.io/metadata.name"] == "team-a"


def test_cluster_scoped_list_of_a_namespaced_resource_spans_namespaces(
    core: Api,
) -> None:
    core.create_namespace({"metadata": {"name": "team-a"}})
    core.create_namespaced_pod("team-a", pod("a"))
    core.create_namespaced_pod("default", pod("d"))
    everywhere = core.list_pod_for_all_namespaces()
    assert sorted((p.metadata.namespace, p.metadata.name) for p in everywhere.items) == [
        ("default", "d"),
        ("team-a", "a"),
    ]
