"""Discovery, version and OpenAPI documents, read with the Kubernetes client."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from kubernetes import client

from tests.devapi.support import Api, api, create_crd, pod


def get_json(api_client: Api, path: str, *, status: int = 200) -> Any:
    response = api_client.call_api(*api_client.param_serialize("GET", path))
    response.read()
    assert response.status == status
    return orjson.loads(response.data)


def test_version(api_client: Api) -> None:
    info: Api = api(client.VersionApi, api_client).get_code()
    assert (info.major, info.minor) == ("1", "33")
    assert info.git_version.startswith("v1.33.")


def test_core_and_group_discovery(api_client: Api) -> None:
    assert api(client.CoreApi, api_client).get_api_versions().versions == ["v1"]
    discovered: Api = api(client.ApisApi, api_client).get_api_versions()
    groups = {g.name: g.preferred_version.group_version for g in discovered.groups}
    assert groups == {
        "admissionregistration.k8s.io": "admissionregistration.k8s.io/v1",
        "apiextensions.k8s.io": "apiextensions.k8s.io/v1",
        "apps": "apps/v1",
        "batch": "batch/v1",
        "coordination.k8s.io": "coordination.k8s.io/v1",
        "events.k8s.io": "events.k8s.io/v1",
        "node.k8s.io": "node.k8s.io/v1",
        "scheduling.k8s.io": "scheduling.k8s.io/v1",
    }


def test_core_resource_list(api_client: Api) -> None:
    resources = {r.name: r for r in api(client.CoreV1Api, api_client).get_api_resources().resources}
    assert set(resources) == {
        "events",
        "pods",
        "pods/status",
        "pods/resize",
        "pods/binding",
        "limitranges",
        "namespaces",
        "namespaces/status",
        "namespaces/finalize",
    }
    pods = resources["pods"]
    assert (pods.kind, pods.namespaced, pods.short_names, pods.categories) == (
        "Pod",
        True,
        ["po"],
        ["all"],
    )
    assert set(pods.verbs) == {
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    }
    assert resources["pods/binding"].kind == "Binding"
    assert resources["pods/resize"].verbs == ["get", "patch", "update"]
    assert resources["namespaces"].namespaced is False


def test_a_crd_appears_in_discovery_and_openapi(api_client: Api) -> None:
    create_crd(
        api_client,
        group="tenantgate.io",
        kind="TenantLedger",
        plural="tenantledgers",
        scope="Cluster",
        versions=("v1", "v1alpha1"),
    )
    group = get_json(api_client, "/apis/tenantgate.io")
    assert [v["version"] for v in group["versions"]] == ["v1", "v1alpha1"]
    assert group["preferredVersion"]["version"] == "v1"
    listing = get_json(api_client, "/apis/tenantgate.io/v1")
    (ledgers,) = [r for r in listing["resources"] if r["name"] == "tenantledgers"]
    assert (ledgers["kind"], ledgers["namespaced"], ledgers["shortNames"]) == (
        "TenantLedger",
        False,
        ["wd"],
    )
    assert {r["name"] for r in listing["resources"]} == {"tenantledgers", "tenantledgers/status"}
    index = get_json(api_client, "/openapi/v3")
    assert "apis/tenantgate.io/v1" in index["paths"]
    document = get_json(
        api_client, index["paths"]["apis/tenantgate.io/v1"]["serverRelativeURL"].split("?")[0]
    )
    patch = document["paths"]["/apis/tenantgate.io/v1/tenantledgers/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {
        "group": "tenantgate.io",
        "version": "v1",
        "kind": "TenantLedger",
    }
    assert "fieldValidation" in [p["name"] for p in patch["parameters"]]


def test_openapi_patch_operations_leave_strategic_merge_to_kubectl(
    api_client: Api,
) -> None:
    document = get_json(api_client, "/openapi/v3/api/v1")
    patch = document["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]
    assert sorted(patch["requestBody"]["content"]) == [
        "application/apply-patch+yaml",
        "application/json-patch+json",
        "application/merge-patch+json",
    ]


@pytest.mark.parametrize(
    "path",
    ["/apis/nope.example.com/v1", "/apis/nope.example.com", "/api/v1/nothings", "/api/v1/pods/x"],
)
def test_unknown_paths_are_404_status(api_client: Api, path: str) -> None:
    status = get_json(api_client, path, status=404)
    assert (status["kind"], status["reason"]) == ("Status", "NotFound")
    assert status["message"] == "the server could not find the requested resource"


def test_metadata_only_representations(api_client: Api, core: Api) -> None:
    core.create_namespaced_pod("default", pod("web", labels={"app": "web"}))
    accept = {"Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"}
    response = api_client.call_api(
        *api_client.param_serialize("GET", "/api/v1/namespaces/default/pods", header_params=accept)
    )
    response.read()
    listing = orjson.loads(response.data)
    assert listing["kind"] == "PartialObjectMetadataList"
    assert listing["items"][0]["kind"] == "PartialObjectMetadata"
    assert listing["items"][0]["metadata"]["labels"] == {"app": "web"}
    assert "spec" not in listing["items"][0]


def test_tables_for_kubectl_get(api_client: Api, core: Api) -> None:
    core.create_namespaced_pod("default", pod("web", nodeName="node-1"))
    accept = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}
    response = api_client.call_api(
        *api_client.param_serialize("GET", "/api/v1/namespaces/default/pods", header_params=accept)
    )
    response.read()
    table = orjson.loads(response.data)
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]][:5] == [
        "Name",
        "Ready",
        "Status",
        "Restarts",
        "Age",
    ]
    (row,) = table["rows"]
    assert row["cells"][:4] == ["web", "0/1", "Pending", 0]
    assert row["cells"][6] == "node-1"
    assert row["object"]["kind"] == "PartialObjectMetadata"
