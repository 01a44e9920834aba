"""Lifecycle semantics through the client: deletion, finalizers, dry-run, namespaces, priority
classes, leases, CRDs and their custom resources, bindings."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tests.devapi.support import Api, api, crd, create_crd, pod, status_of, watch_events


def wait_deleted(list_call: Any, *args: Any, name: str, since: str) -> None:
    for event in watch_events(list_call, *args, resource_version=since, timeout_seconds=60):
        if event["type"] == "DELETED" and event["raw_object"]["metadata"]["name"] == name:
            return
    raise AssertionError(f"{name} was not deleted")


# --- deletion ----------------------------------------------------------------------------------


def test_unscheduled_pod_is_deleted_at_once(core: Api) -> None:
    core.create_namespaced_pod("default", pod("web"))
    deleted = core.delete_namespaced_pod("web", "default")
    assert deleted.metadata.name == "web"
    assert core.list_namespaced_pod("default").items == []


def test_scheduled_pod_is_deleted_gracefully(core: Api) -> None:
    core.create_namespaced_pod(
        "default", pod("web", nodeName="node-1", terminationGracePeriodSeconds=3600)
    )
    terminating = core.delete_namespaced_pod("web", "default")
    assert terminating.metadata.deletion_timestamp is not None
    assert terminating.metadata.deletion_grace_period_seconds == 3600
    still = core.read_namespaced_pod("web", "default")
    assert still.metadata.deletion_timestamp is not None

    shorter = core.delete_namespaced_pod("web", "default", grace_period_seconds=60)
    assert shorter.metadata.deletion_grace_period_seconds == 60
    core.delete_namespaced_pod("web", "default", grace_period_seconds=0)
    with pytest.raises(client.ApiException) as raised:
        core.read_namespaced_pod("web", "default")
    assert raised.value.status == 404


def test_the_simulated_kubelet_finishes_a_graceful_deletion(core: Api) -> None:
    core.create_namespaced_pod("default", pod("web", nodeName="node-1"))
    since = core.list_namespaced_pod("default").metadata.resource_version
    core.delete_namespaced_pod("web", "default", grace_period_seconds=1)
    wait_deleted(core.list_namespaced_pod, "default", name="web", since=since)


def test_finished_pods_are_deleted_at_once(core: Api) -> None:
    core.create_namespaced_pod("default", pod("job", nodeName="node-1"))
    core.patch_namespaced_pod_status("job", "default", {"status": {"phase": "Succeeded"}})
    core.delete_namespaced_pod("job", "default")
    assert core.list_namespaced_pod("default").items == []


def test_finalizers_hold_an_object_until_removed(core: Api) -> None:
    body = pod("held")
    body["metadata"]["finalizers"] = ["example.com/keep"]
    core.create_namespaced_pod("default", body)
    marked = core.delete_namespaced_pod("held", "default")
    assert marked.metadata.deletion_timestamp is not None
    with pytest.raises(client.ApiException) as raised:
        core.patch_namespaced_pod(
            "held", "default", {"metadata": {"finalizers": ["example.com/keep", "more"]}}
        )
    assert (
        "no new finalizers can be added if the object is being deleted"
        in status_of(raised.value)["message"]
    )
    core.patch_namespaced_pod(
        "held",
        "default",
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/keep"]}},
    )
    assert core.list_namespaced_pod("default").items == []


def test_delete_preconditions(core: Api) -> None:
    core.create_namespaced_pod("default", pod("web"))
    with pytest.raises(client.ApiException) as raised:
        core.delete_namespaced_pod(
            "web",
            "default",
            body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="other")),
        )
    assert raised.value.status == 409
    assert "Precondition failed: UID in precondition: other" in status_of(raised.value)["message"]


def test_delete_collection_by_label(core: Api) -> None:
    core.create_namespaced_pod("default", pod("a", labels={"batch": "1"}))
    core.create_namespaced_pod("default", pod("b", labels={"batch": "1"}))
    core.create_namespaced_pod("default", pod("c"))
    core.delete_collection_namespaced_pod("default", label_selector="batch=1")
    assert [p.metadata.name for p in core.list_namespaced_pod("default").items] == ["c"]


# --- dry-run -----------------------------------------------------------------------------------


def test_dry_run_create_persists_nothing_and_returns_the_object_as_stored(
    core: Api,
) -> None:
    before = core.list_namespaced_pod("default").metadata.resource_version
    shown = core.create_namespaced_pod("default", pod(generate_name="web-"), dry_run="All")
    assert shown.metadata.name.startswith("web-")
    assert shown.metadata.uid
    assert shown.status.phase == "Pending"
    assert shown.spec.scheduler_name == "default-scheduler"
    assert shown.metadata.resource_version is None
    after = core.list_namespaced_pod("default")
    assert after.items == []
    assert after.metadata.resource_version == before


def test_dry_run_update_patch_and_delete_persist_nothing(core: Api) -> None:
    created = core.create_namespaced_pod("default", pod("web"))
    patched = core.patch_namespaced_pod(
        "web", "default", {"metadata": {"labels": {"a": "1"}}}, dry_run="All"
    )
    assert patched.metadata.labels == {"a": "1"}
    body = core.read_namespaced_pod("web", "default")
    body.metadata.labels = {"b": "2"}
    assert core.replace_namespaced_pod("web", "default", body, dry_run="All").metadata.labels == {
        "b": "2"
    }
    core.delete_namespaced_pod("web", "default", dry_run="All")
    current = core.read_namespaced_pod("web", "default")
    assert current.metadata.labels is None
    assert current.metadata.resource_version == created.metadata.resource_version


def test_dry_run_create_of_an_existing_name_is_409(core: Api) -> None:
    core.create_namespaced_pod("default", pod("web"))
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod("default", pod("web"), dry_run="All")
    assert raised.value.status == 409


# --- namespaces --------------------------------------------------------------------------------


def test_namespace_termination_removes_its_contents(core: Api) -> None:
    core.create_namespace({"metadata": {"name": "team-a"}})
    core.create_namespaced_pod("team-a", pod("web", nodeName="node-1"))
    since = core.list_namespace().metadata.resource_version
    core.delete_namespace("team-a")
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod("team-a", pod("late"))
    assert raised.value.status in (403, 404)
    wait_deleted(core.list_namespace, name="team-a", since=since)
    assert core.list_namespaced_pod("team-a").items == []


def test_creating_in_a_terminating_namespace_is_forbidden(core: Api) -> None:
    core.create_namespace({"metadata": {"name": "team-a"}})
    body = pod("held")
    body["metadata"]["finalizers"] = ["example.com/keep"]
    core.create_namespaced_pod("team-a", body)
    core.delete_namespace("team-a")
    assert core.read_namespace("team-a").status.phase == "Terminating"
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod("team-a", pod("late"))
    assert raised.value.status == 403
    assert status_of(raised.value)["message"] == (
        'pods "late" is forbidden: unable to create new content in namespace team-a because it is '
        "being terminated"
    )


# --- priority classes and the Priority admission plugin ------------------------------------------


def test_priority_class_value_is_immutable(api_client: Api) -> None:
    scheduling: Api = client.SchedulingV1Api(api_client)
    scheduling.create_priority_class({"metadata": {"name": "tenant-burst"}, "value": 10})
    with pytest.raises(client.ApiException) as raised:
        scheduling.patch_priority_class("tenant-burst", {"value": 11})
    assert raised.value.status == 422
    assert status_of(raised.value)["message"] == (
        'PriorityClass.scheduling.k8s.io "tenant-burst" is invalid: value: Forbidden: may not be '
        "changed in an update."
    )


def test_priority_plugin_resolves_classes(api_client: Api, core: Api) -> None:
    scheduling: Api = client.SchedulingV1Api(api_client)
    scheduling.create_priority_class(
        {"metadata": {"name": "tenant-burst"}, "value": 10, "preemptionPolicy": "Never"}
    )
    burst = core.create_namespaced_pod("default", pod("burst", priorityClassName="tenant-burst"))
    assert (burst.spec.priority, burst.spec.preemption_policy) == (10, "Never")
    plain = core.create_namespaced_pod("default", pod("plain"))
    assert (plain.spec.priority, plain.spec.preemption_policy) == (0, "PreemptLowerPriority")

    with pytest.raises(client.ApiException) as unknown:
        core.create_namespaced_pod("default", pod("x", priorityClassName="missing"))
    assert unknown.value.status == 403
    assert (
        status_of(unknown.value)["message"]
        == 'pods "x" is forbidden: no PriorityClass with name missing was found'
    )
    with pytest.raises(client.ApiException) as mismatch:
        core.create_namespaced_pod(
            "default", pod("y", priorityClassName="tenant-burst", priority=99)
        )
    assert (
        "the integer value of priority (99) must not be provided in pod spec"
        in status_of(mismatch.value)["message"]
    )

    scheduling.create_priority_class(
        {"metadata": {"name": "everyone"}, "value": 5, "globalDefault": True}
    )
    defaulted = core.create_namespaced_pod("default", pod("z"))
    assert (defaulted.spec.priority_class_name, defaulted.spec.priority) == ("everyone", 5)


def test_system_priority_classes_exist(api_client: Api) -> None:
    classes: Api = api(client.SchedulingV1Api, api_client).list_priority_class()
    assert {pc.metadata.name: pc.value for pc in classes.items} == {
        "system-cluster-critical": 2000000000,
        "system-node-critical": 2000001000,
    }


# --- leases ------------------------------------------------------------------------------------


def test_leases_support_optimistic_concurrency(api_client: Api) -> None:
    leases: Api = client.CoordinationV1Api(api_client)
    created = leases.create_namespaced_lease(
        "kube-system",
        {
            "metadata": {"name": "tenantgate"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
        },
    )
    taken = leases.patch_namespaced_lease(
        "tenantgate",
        "kube-system",
        {
            "metadata": {"resourceVersion": created.metadata.resource_version},
            "spec": {"holderIdentity": "b"},
        },
    )
    assert taken.spec.holder_identity == "b"
    with pytest.raises(client.ApiException) as raised:
        leases.patch_namespaced_lease(
            "tenantgate",
            "kube-system",
            {
                "metadata": {"resourceVersion": created.metadata.resource_version},
                "spec": {"holderIdentity": "c"},
            },
        )
    assert raised.value.status == 409
    assert status_of(raised.value)["message"].startswith(
        'Operation cannot be fulfilled on leases.coordination.k8s.io "tenantgate"'
    )


# --- CRDs and custom resources -------------------------------------------------------------------


def widget(name: str, size: int = 1, api_version: str = "example.com/v1") -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"size": size},
    }


def test_a_crd_serves_its_custom_resources(api_client: Api) -> None:
    created: Api = api(client.ApiextensionsV1Api, api_client).create_custom_resource_definition(
        crd()
    )
    assert {c.type: c.status for c in created.status.conditions} == {
        "NamesAccepted": "True",
        "Established": "True",
    }
    custom: Api = client.CustomObjectsApi(api_client)
    made = custom.create_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", widget("w")
    )
    assert made["metadata"]["generation"] == 1
    assert "status" not in made
    got = custom.get_namespaced_custom_object("example.com", "v1", "default", "widgets", "w")
    assert got["spec"] == {"size": 1}
    listing = custom.list_namespaced_custom_object("example.com", "v1", "default", "widgets")
    assert listing["kind"] == "WidgetList"
    assert [i["metadata"]["name"] for i in listing["items"]] == ["w"]


def test_custom_resource_status_subresource_and_generation(api_client: Api) -> None:
    create_crd(api_client)
    custom: Api = client.CustomObjectsApi(api_client)
    custom.create_namespaced_custom_object("example.com", "v1", "default", "widgets", widget("w"))
    with_status = custom.patch_namespaced_custom_object_status(
        "example.com",
        "v1",
        "default",
        "widgets",
        "w",
        {"status": {"ready": True}, "spec": {"size": 9}},
    )
    assert with_status["status"] == {"ready": True}
    assert with_status["spec"] == {"size": 1}
    assert with_status["metadata"]["generation"] == 1

    relabelled = custom.patch_namespaced_custom_object(
        "example.com",
        "v1",
        "default",
        "widgets",
        "w",
        {"metadata": {"labels": {"a": "b"}}, "status": {"ready": False}},
    )
    assert relabelled["metadata"]["generation"] == 1
    assert relabelled["status"] == {"ready": True}
    grown = custom.patch_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", "w", {"spec": {"size": 2}}
    )
    assert grown["metadata"]["generation"] == 2


def test_cluster_scoped_custom_resources_and_optimistic_concurrency(
    api_client: Api,
) -> None:
    create_crd(
        api_client,
        kind="TenantLedger",
        plural="tenantledgers",
        group="tenantgate.io",
        scope="Cluster",
    )
    custom: Api = client.CustomObjectsApi(api_client)
    body: dict[str, Any] = {
        "apiVersion": "tenantgate.io/v1",
        "kind": "TenantLedger",
        "metadata": {"name": "team-a"},
        "spec": {"used": {}},
    }
    made = custom.create_cluster_custom_object("tenantgate.io", "v1", "tenantledgers", body)
    body["metadata"]["resourceVersion"] = made["metadata"]["resourceVersion"]
    body["spec"] = {"used": {"cpu": "1"}}
    custom.replace_cluster_custom_object("tenantgate.io", "v1", "tenantledgers", "team-a", body)
    with pytest.raises(client.ApiException) as raised:
        custom.replace_cluster_custom_object("tenantgate.io", "v1", "tenantledgers", "team-a", body)
    assert raised.value.status == 409
    assert status_of(raised.value)["message"].startswith(
        'Operation cannot be fulfilled on tenantledgers.tenantgate.io "team-a"'
    )


def test_deleting_a_crd_removes_its_resources(api_client: Api) -> None:
    create_crd(api_client)
    custom: Api = client.CustomObjectsApi(api_client)
    custom.create_namespaced_custom_object("example.com", "v1", "default", "widgets", widget("w"))
    api(client.ApiextensionsV1Api, api_client).delete_custom_resource_definition(
        "widgets.example.com"
    )
    with pytest.raises(client.ApiException) as raised:
        custom.list_namespaced_custom_object("example.com", "v1", "default", "widgets")
    assert raised.value.status == 404


def test_every_served_version_reads_the_same_objects(api_client: Api) -> None:
    create_crd(api_client, versions=("v1", "v1beta1"))
    custom: Api = client.CustomObjectsApi(api_client)
    custom.create_namespaced_custom_object(
        "example.com",
        "v1beta1",
        "default",
        "widgets",
        widget("w", api_version="example.com/v1beta1"),
    )
    as_v1 = custom.get_namespaced_custom_object("example.com", "v1", "default", "widgets", "w")
    assert as_v1["apiVersion"] == "example.com/v1"
    as_beta = custom.get_namespaced_custom_object(
        "example.com", "v1beta1", "default", "widgets", "w"
    )
    assert as_beta["apiVersion"] == "example.com/v1beta1"
    assert as_beta["metadata"]["uid"] == as_v1["metadata"]["uid"]


def test_invalid_crd_is_422(api_client: Api) -> None:
    body = crd()
    body["metadata"]["name"] = "wrong.example.com"
    with pytest.raises(client.ApiException) as raised:
        api(client.ApiextensionsV1Api, api_client).create_custom_resource_definition(body)
    assert raised.value.status == 422
    assert (
        'metadata.name: Invalid value: "wrong.example.com": '
        'must be spec.names.plural+"."+spec.group' in status_of(raised.value)["message"]
    )


# --- binding -----------------------------------------------------------------------------------


def test_binding_assigns_a_node_once(core: Api) -> None:
    core.create_namespaced_pod("default", pod("web"))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "web"},
        "target": {"kind": "Node", "name": "node-1"},
    }
    core.create_namespaced_pod_binding("web", "default", binding, _preload_content=False)
    assert core.read_namespaced_pod("web", "default").spec.node_name == "node-1"
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod_binding("web", "default", binding, _preload_content=False)
    assert raised.value.status == 409
    assert status_of(raised.value)["message"] == (
        'Operation cannot be fulfilled on pods/binding "web": '
        'pod web is already assigned to node "node-1"'
    )


def test_reapplying_an_unchanged_crd_changes_nothing(api_client: Api) -> None:
    extensions: Api = client.ApiextensionsV1Api(api_client)
    created = extensions.create_custom_resource_definition(crd())
    again = extensions.replace_custom_resource_definition("widgets.example.com", created)
    assert again.metadata.resource_version == created.metadata.resource_version
    assert again.metadata.generation == 1
