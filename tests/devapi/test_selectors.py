"""Label and field selectors on lists, through the Kubernetes client."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.devapi.support import Api, pod, status_of


@pytest.fixture
def labelled(core: Api) -> Api:
    core.create_namespaced_pod("default", pod("web-1", labels={"app": "web", "tier": "front"}))
    core.create_namespaced_pod("default", pod("web-2", labels={"app": "web", "tier": "back"}))
    core.create_namespaced_pod("default", pod("db", labels={"app": "db"}))
    core.create_namespaced_pod("default", pod("bare"))
    return core


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=web", ["web-1", "web-2"]),
        ("app==web", ["web-1", "web-2"]),
        ("app!=web", ["bare", "db"]),
        ("app in (db, web)", ["db", "web-1", "web-2"]),
        ("app notin (web)", ["bare", "db"]),
        ("tier", ["web-1", "web-2"]),
        ("!tier", ["bare", "db"]),
        ("app=web,tier=back", ["web-2"]),
        ("app in (web),!tier", []),
        ("", ["bare", "db", "web-1", "web-2"]),
    ],
)
def test_label_selectors(labelled: Api, selector: str, expected: list[str]) -> None:
    found = labelled.list_namespaced_pod("default", label_selector=selector)
    assert [p.metadata.name for p in found.items] == expected


@pytest.mark.parametrize("selector", ["app in web", "app=(x", "=web", "app=web,", "a b"])
def test_malformed_label_selector_is_400(labelled: Api, selector: str) -> None:
    with pytest.raises(client.ApiException) as raised:
        labelled.list_namespaced_pod("default", label_selector=selector)
    assert raised.value.status == 400
    assert status_of(raised.value)["reason"] == "BadRequest"


def test_field_selectors(core: Api) -> None:
    core.create_namespaced_pod("default", pod("placed", nodeName="node-1"))
    core.create_namespaced_pod("default", pod("custom", schedulerName="tenant-scheduler"))
    core.create_namespaced_pod("default", pod("plain"))
    core.patch_namespaced_pod_status("plain", "default", {"status": {"phase": "Running"}})

    def names(selector: str) -> list[str]:
        return [
            p.metadata.name
            for p in core.list_namespaced_pod("default", field_selector=selector).items
        ]

    assert names("metadata.name=placed") == ["placed"]
    assert names("metadata.namespace=default") == ["custom", "placed", "plain"]
    assert names("spec.nodeName=node-1") == ["placed"]
    assert names("spec.nodeName=") == ["custom", "plain"]
    assert names("spec.schedulerName=tenant-scheduler") == ["custom"]
    assert names("spec.schedulerName!=default-scheduler") == ["custom"]
    assert names("status.phase=Running") == ["plain"]
    assert names("status.phase!=Running,spec.nodeName!=node-1") == ["custom"]


def test_unsupported_field_selector_is_400(core: Api) -> None:
    with pytest.raises(client.ApiException) as raised:
        core.list_namespaced_pod("default", field_selector="spec.priority=3")
    assert raised.value.status == 400
    assert status_of(raised.value)["message"] == "field label not supported: spec.priority"


def test_namespace_list_by_label_and_phase(core: Api) -> None:
    core.create_namespace({"metadata": {"name": "team-a", "labels": {"tenant": "a"}}})
    found = core.list_namespace(label_selector="tenant=a", field_selector="status.phase=Active")
    assert [n.metadata.name for n in found.items] == ["team-a"]
    by_name = core.list_namespace(label_selector="kubernetes.io/metadata.name in (default,team-a)")
    assert [n.metadata.name for n in by_name.items] == ["default", "team-a"]
