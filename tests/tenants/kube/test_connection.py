"""Where the cluster is, and the raw list/watch calls against the test API server."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from admission.devapi import DevAPIServer
from tenants.kube.connection import ClusterTarget, Connection, resolve_target
from tenants.kube.errors import KubeConfigError, KubeGone, KubeUnavailable


def test_offline_when_asked() -> None:
    target = resolve_target(kubeconfig=Path("/x"), offline=True, environ={"KUBECONFIG": "/y"})
    assert target.offline
    assert target.source == "offline mode requested (--offline)"


def test_an_explicit_kubeconfig_wins_over_the_environment() -> None:
    target = resolve_target(kubeconfig=Path("/etc/kc"), offline=False, environ={"KUBECONFIG": "/y"})
    assert target == ClusterTarget("kubeconfig", "kubeconfig /etc/kc", "/etc/kc")


def test_kubeconfig_from_the_environment() -> None:
    target = resolve_target(kubeconfig=None, offline=False, environ={"KUBECONFIG": "/a:/b"})
    assert target == ClusterTarget("kubeconfig", "kubeconfig /a:/b (KUBECONFIG)", "/a:/b")


def test_in_cluster_when_the_service_environment_is_set() -> None:
    environ = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    target = resolve_target(kubeconfig=None, offline=False, environ=environ)
    assert target.mode == "in-cluster"


def test_offline_when_no_cluster_is_configured() -> None:
    target = resolve_target(kubeconfig=None, offline=False, environ={"HOME": "/root"})
    assert target == ClusterTarget("offline", "no cluster configured")
    # The user's ~/.kube/config is never picked up silently.
    assert resolve_target(kubeconfig=None, offline=False, environ={"KUBECONFIG": " "}).offline


def test_an_unusable_kubeconfig_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(KubeConfigError, match="load kubeconfig"):
        Connection.open(ClusterTarget("kubeconfig", f"kubeconfig {missing}", str(missing)))
    garbage = tmp_path / "garbage"
    garbage.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    with pytest.raises(KubeConfigError):
        Connection.open(ClusterTarget("kubeconfig", "kubeconfig garbage", str(garbage)))


def test_offline_targets_cannot_connect() -> None:
    with pytest.raises(KubeConfigError, match="cannot connect: no cluster configured"):
        Connection.open(ClusterTarget("offline", "no cluster configured"))


def test_in_cluster_without_a_service_account_is_a_config_error() -> None:
    with pytest.raises(KubeConfigError):
        Connection.open(ClusterTarget("in-cluster", "in-cluster service account"))


def _namespace(name: str) -> dict[str, object]:
    return {"metadata": {"name": name, "labels": {"team": name}}}


def test_lists_come_in_pages_of_one_snapshot(connection: Connection, core: Any) -> None:
    for index in range(5):
        core.create_namespace(_namespace(f"ns-{index}"))
    first = connection.list_page("namespaces", limit=3)
    assert len(first.items) == 3
    assert first.continue_token is not None
    assert first.resource_version
    core.create_namespace(_namespace("late"))
    rest = connection.list_page("namespaces", limit=100, continue_token=first.continue_token)
    assert rest.continue_token is None
    names = {item["metadata"]["name"] for item in first.items + rest.items}
    assert {f"ns-{i}" for i in range(5)} <= names
    assert "late" not in names  # created after the snapshot
    assert connection.host.startswith("http://127.0.0.1:")


def test_a_watch_streams_events_and_bookmarks(connection: Connection, core: Any) -> None:
    version = connection.list_page("namespaces", limit=500).resource_version
    stream = connection.watch("namespaces", resource_version=version, timeout_seconds=30)
    core.create_namespace(_namespace("watched"))
    seen: list[tuple[str, str]] = []
    for event in stream:
        name = event["object"]["metadata"].get("name", "")
        seen.append((event["type"], name))
        if event["type"] == "BOOKMARK" and ("ADDED", "watched") in seen:
            break
    stream.close()
    assert ("ADDED", "watched") in seen
    assert seen[-1][0] == "BOOKMARK"


def test_a_watch_from_a_forgotten_version_is_gone(
    devapi: DevAPIServer, connection: Connection, core: Any
) -> None:
    version = connection.list_page("namespaces", limit=500).resource_version
    core.create_namespace(_namespace("after"))
    devapi.faults.compact_history()
    with pytest.raises(KubeGone):
        for _event in connection.watch("namespaces", resource_version=version, timeout_seconds=5):
            pass


def test_server_errors_are_wrapped(devapi: DevAPIServer, connection: Connection) -> None:
    devapi.faults.add_errors(503, verb="list", resource="pods")
    with pytest.raises(KubeUnavailable) as caught:
        connection.list_page("pods", limit=10)
    assert caught.value.status == 503
    assert caught.value.reason == "ServiceUnavailable"
    assert connection.list_page("pods", limit=10).items == []


def test_closing_a_watch_unblocks_its_reader(connection: Connection) -> None:
    version = connection.list_page("pods", limit=500).resource_version
    stream = connection.watch("pods", resource_version=version, timeout_seconds=60)
    finished = threading.Event()

    def read() -> None:
        for _event in stream:
            pass
        finished.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    stream.close()
    reader.join(30)
    assert finished.is_set()
