"""PATCH in its three formats and the status/resize subresources, through the client."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.devapi.support import Api, create_crd, pod, status_of


def two_containers() -> dict[str, object]:
    body = pod("web")
    body["spec"]["containers"] = [
        {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}]},
        {"name": "sidecar", "image": "proxy:1"},
    ]
    return body


def test_strategic_merge_patch_merges_containers_by_name(core: Api) -> None:
    core.create_namespaced_pod("default", two_containers())
    patched = core.patch_namespaced_pod(
        "web",
        "default",
        {"spec": {"containers": [{"name": "sidecar", "image": "proxy:2"}]}},
    )
    assert [(c.name, c.image) for c in patched.spec.containers] == [
        ("app", "app:1"),
        ("sidecar", "proxy:2"),
    ]
    assert patched.spec.containers[0].env[0].name == "A"


def owner(uid: str) -> dict[str, str]:
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"rs-{uid}", "uid": uid}


def test_strategic_merge_patch_directives(core: Api) -> None:
    body = pod("web")
    body["metadata"]["finalizers"] = ["example.com/a"]
    body["metadata"]["ownerReferences"] = [owner("a"), owner("b")]
    core.create_namespaced_pod("default", body)
    reordered = core.patch_namespaced_pod(
        "web",
        "default",
        {
            "metadata": {
                "finalizers": ["example.com/b"],
                "$setElementOrder/ownerReferences": [{"uid": "b"}, {"uid": "a"}],
                "ownerReferences": [{"uid": "b", "name": "renamed"}],
            }
        },
    )
    assert reordered.metadata.finalizers == ["example.com/a", "example.com/b"]
    assert [(o.uid, o.name) for o in reordered.metadata.owner_references] == [
        ("b", "renamed"),
        ("a", "rs-a"),
    ]
    pruned = core.patch_namespaced_pod(
        "web",
        "default",
        {
            "metadata": {
                "ownerReferences": [{"uid": "a", "$patch": "delete"}],
                "$deleteFromPrimitiveList/finalizers": ["example.com/a"],
            }
        },
    )
    assert [o.uid for o in pruned.metadata.owner_references] == ["b"]
    assert pruned.metadata.finalizers == ["example.com/b"]
    replaced = core.patch_namespaced_pod(
        "web", "default", {"metadata": {"labels": {"$patch": "replace", "only": "this"}}}
    )
    assert replaced.metadata.labels == {"only": "this"}


def test_json_merge_patch_replaces_lists(core: Api) -> None:
    core.create_namespaced_pod("default", two_containers())
    patched = core.patch_namespaced_pod(
        "web",
        "default",
        {"metadata": {"labels": {"a": "b"}, "annotations": None}},
        _content_type="application/merge-patch+json",
    )
    assert patched.metadata.labels == {"a": "b"}
    with pytest.raises(client.ApiException) as raised:
        core.patch_namespaced_pod(
            "web",
            "default",
            {"spec": {"containers": [{"name": "sidecar", "image": "proxy:2"}]}},
            _content_type="application/merge-patch+json",
        )
    # The merge patch replaced the container list, which a pod update may not do.
    assert raised.value.status == 422
    assert "pod updates may not change fields other than" in status_of(raised.value)["message"]


def test_json_patch(core: Api) -> None:
    core.create_namespaced_pod("default", pod("web", labels={"a": "1"}))
    patched = core.patch_namespaced_pod(
        "web",
        "default",
        [
            {"op": "add", "path": "/metadata/labels/b", "value": "2"},
            {"op": "replace", "path": "/spec/containers/0/image", "value": "app:2"},
        ],
    )
    assert patched.metadata.labels == {"a": "1", "b": "2"}
    assert patched.spec.containers[0].image == "app:2"
    with pytest.raises(client.ApiException) as raised:
        core.patch_namespaced_pod(
            "web", "default", [{"op": "test", "path": "/metadata/labels/a", "value": "nope"}]
        )
    assert raised.value.status == 422


def test_patch_with_a_stale_resource_version_is_409(core: Api) -> None:
    created = core.create_namespaced_pod("default", pod("web"))
    core.patch_namespaced_pod("web", "default", {"metadata": {"labels": {"a": "1"}}})
    with pytest.raises(client.ApiException) as raised:
        core.patch_namespaced_pod(
            "web",
            "default",
            {
                "metadata": {
                    "resourceVersion": created.metadata.resource_version,
                    "labels": {"b": "2"},
                }
            },
        )
    assert raised.value.status == 409


def test_status_subresource_changes_only_status(core: Api) -> None:
    core.create_namespaced_pod("default", pod("web"))
    current = core.read_namespaced_pod("web", "default")
    current.status.phase = "Running"
    current.spec.containers[0].image = "ignored:9"
    current.metadata.labels = {"ignored": "too"}
    updated = core.replace_namespaced_pod_status("web", "default", current)
    assert updated.status.phase == "Running"
    assert updated.spec.containers[0].image == "registry.example/app:1.0"
    assert updated.metadata.labels is None
    assert updated.status.qos_class == "BestEffort"
    # ...and the main resource does not change status.
    again = core.patch_namespaced_pod(
        "web", "default", {"status": {"phase": "Failed"}, "metadata": {"labels": {"a": "1"}}}
    )
    assert again.status.phase == "Running"
    assert again.metadata.labels == {"a": "1"}


def test_resize_changes_only_cpu_and_memory(core: Api) -> None:
    body = pod("web")
    body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m", "memory": "64Mi"}}
    core.create_namespaced_pod("default", body)
    resized = core.patch_namespaced_pod_resize(
        "web",
        "default",
        {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "250m"}}}]}},
    )
    assert resized.spec.containers[0].resources.requests == {"cpu": "250m", "memory": "64Mi"}

    with pytest.raises(client.ApiException) as other_field:
        core.patch_namespaced_pod_resize(
            "web", "default", {"spec": {"containers": [{"name": "app", "image": "x:2"}]}}
        )
    assert other_field.value.status == 422
    assert status_of(other_field.value)["message"] == (
        'Pod "web" is invalid: spec: Forbidden: only cpu and memory resources are mutable'
    )
    with pytest.raises(client.ApiException) as removed:
        core.patch_namespaced_pod_resize(
            "web",
            "default",
            {
                "spec": {
                    "containers": [{"name": "app", "resources": {"requests": {"memory": None}}}]
                }
            },
        )
    assert "resource requests cannot be removed" in status_of(removed.value)["message"]
    with pytest.raises(client.ApiException) as main:
        core.patch_namespaced_pod(
            "web",
            "default",
            {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}]}},
        )
    assert main.value.status == 422


def test_pod_update_may_change_images_tolerations_and_remove_scheduling_gates(
    core: Api,
) -> None:
    created = core.create_namespaced_pod(
        "default", pod("web", schedulingGates=[{"name": "tenantgate.io/queued"}])
    )
    tolerations = [t.to_dict() for t in created.spec.tolerations]
    added = {"key": "dedicated", "operator": "Exists"}
    updated = core.patch_namespaced_pod(
        "web",
        "default",
        {
            "spec": {
                "schedulingGates": [{"$patch": "replace"}],
                "containers": [{"name": "app", "image": "app:2"}],
                "tolerations": [*_camel(tolerations), added],
            }
        },
    )
    assert updated.spec.scheduling_gates is None or updated.spec.scheduling_gates == []
    assert updated.spec.containers[0].image == "app:2"
    assert len(updated.spec.tolerations) == len(tolerations) + 1
    # DefaultTolerationSeconds runs on updates too and adds back the not-ready/unreachable
    # tolerations; dropping the added one is refused.
    with pytest.raises(client.ApiException) as dropped:
        core.patch_namespaced_pod("web", "default", {"spec": {"tolerations": _camel(tolerations)}})
    assert dropped.value.status == 422
    with pytest.raises(client.ApiException) as raised:
        core.patch_namespaced_pod(
            "web", "default", {"spec": {"schedulingGates": [{"name": "new"}]}}
        )
    assert (
        "only deletion is allowed, but found new scheduling gate 'new'"
        in status_of(raised.value)["message"]
    )


def test_custom_resources_refuse_strategic_merge_patch(api_client: Api) -> None:
    create_crd(api_client, scope="Namespaced")
    custom: Api = client.CustomObjectsApi(api_client)
    custom.create_namespaced_custom_object(
        "example.com",
        "v1",
        "default",
        "widgets",
        {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w"},
            "spec": {"size": 1},
        },
    )
    with pytest.raises(client.ApiException) as raised:
        custom.patch_namespaced_custom_object(
            "example.com",
            "v1",
            "default",
            "widgets",
            "w",
            {"spec": {"size": 2}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert raised.value.status == 415
    merged = custom.patch_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", "w", {"spec": {"size": 2}}
    )
    assert merged["spec"] == {"size": 2}


def _camel(tolerations: list[dict[str, object]]) -> list[dict[str, object]]:
    names = {"toleration_seconds": "tolerationSeconds"}
    return [{names.get(k, k): v for k, v in t.items() if v is not None} for t in tolerations]
