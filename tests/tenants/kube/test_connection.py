"""Where the cluster is, and the raw list/watch calls against the real API server (as
tenantgate's ServiceAccount, through the fault proxy)."""

from __future__ import annotations

import copy
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.client import ApiException

from tenants.controller import AmountInterner, pod_facts
from tenants.kube.connection import ClusterTarget, Connection, decode_list, resolve_target
from tenants.kube.errors import (
    KubeConfigError,
    KubeForbidden,
    KubeGone,
    KubeUnavailable,
    wrap,
)
from testcluster import Cluster


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


# Cluster-scoped objects a test may create and the cluster's reset deletes at once: priority
# classes. (Namespaces are kept between tests, and every one left makes each reset longer.)


def _priority_class(scheduling: Any, name: str) -> None:
    scheduling.create_priority_class({"metadata": {"name": name}, "value": 1})


@pytest.fixture
def scheduling(admin_client: Any) -> Any:
    return client.SchedulingV1Api(admin_client)


def test_lists_come_in_pages_of_one_snapshot(
    connection: Connection, scheduling: Any, kube: Cluster
) -> None:
    for index in range(5):
        _priority_class(scheduling, f"conn-page-{index}")
    first = connection.list_page("priorityclasses", limit=3)
    assert len(first.items) == 3
    assert first.continue_token is not None
    assert first.resource_version
    _priority_class(scheduling, "conn-late")
    rest = connection.list_page("priorityclasses", limit=500, continue_token=first.continue_token)
    assert rest.continue_token is None
    names = {item["metadata"]["name"] for item in first.items + rest.items}
    assert {f"conn-page-{i}" for i in range(5)} <= names
    # The API server's own classes and deploy/'s are there too.
    assert {"system-node-critical", "system-cluster-critical", "tenant-burst"} <= names
    assert "conn-late" not in names  # created after the snapshot
    assert connection.host == kube.proxy.url


def test_a_watch_streams_events_and_bookmarks(connection: Connection, scheduling: Any) -> None:
    """The API server sends a BOOKMARK every minute, and once 2 s before the watch's own
    timeout (``nextBookmarkTime`` in staging/src/k8s.io/apiserver/pkg/storage/cacher/
    cache_watcher.go): a short watch gets one within seconds."""
    version = connection.list_page("priorityclasses", limit=500).resource_version
    stream = connection.watch("priorityclasses", resource_version=version, timeout_seconds=5)
    _priority_class(scheduling, "conn-watched")
    seen: list[tuple[str, str]] = []
    for event in stream:
        name = event["object"]["metadata"].get("name", "")
        seen.append((event["type"], name))
        if event["type"] == "BOOKMARK" and ("ADDED", "conn-watched") in seen:
            break
    stream.close()
    assert ("ADDED", "conn-watched") in seen
    assert seen[-1][0] == "BOOKMARK"


def test_a_watch_from_a_forgotten_version_is_gone(
    kube: Cluster, connection: Connection, scheduling: Any
) -> None:
    """The proxy stands in for etcd's compaction (compacting the shared etcd would expire every
    other client's history too); the 410 is the API server's own shape, an ERROR event in the
    stream (staging/src/k8s.io/apiserver/pkg/storage/errors.go)."""
    version = connection.list_page("priorityclasses", limit=500).resource_version
    _priority_class(scheduling, "conn-after")
    kube.proxy.compact_history()
    with pytest.raises(KubeGone):
        for _event in connection.watch(
            "priorityclasses", resource_version=version, timeout_seconds=5
        ):
            pass


def test_server_errors_are_wrapped(kube: Cluster, connection: Connection) -> None:
    kube.proxy.add_errors(503, verb="list", resource="pods")
    with pytest.raises(KubeUnavailable) as caught:
        connection.list_page("pods", limit=10)
    assert caught.value.status == 503
    assert caught.value.reason == "ServiceUnavailable"
    # The fault answered once; the next list reaches the API server (which may hold pods of
    # the system namespaces: none are assumed).
    assert connection.list_page("pods", limit=10).resource_version


def test_the_shipped_rbac_is_what_the_connection_may_do(connection: Connection) -> None:
    """tenantgate's ServiceAccount lists what it watches, and nothing it was not granted:
    a 403 from the real authorizer (plugin/pkg/auth/authorizer/rbac/rbac.go) is KubeForbidden."""
    for resource in ("pods", "namespaces", "priorityclasses", "tenantledgers"):
        assert connection.list_page(resource, limit=1).resource_version
    with pytest.raises(ApiException) as refused:
        connection.core.list_secret_for_all_namespaces(limit=1)
    error = wrap(refused.value, action="list secrets")
    assert isinstance(error, KubeForbidden)
    assert (error.status, error.reason) == (403, "Forbidden")
    assert "system:serviceaccount:tenantgate-system:tenantgate" in error.message


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


# -- decoding list pages ------------------------------------------------------------------------

_FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


# Shared across examples, as the informer's is across pods: a remembered request must never
# be handed to a pod whose resource fields differ.
_SHARED = AmountInterner()


def _fixture_pods() -> list[dict[str, Any]]:
    """Every pod (or pod template, made a pod) in the manifest and review fixtures."""
    pods: list[dict[str, Any]] = []
    for path in sorted((_FIXTURES / "manifests").glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if not isinstance(document, dict):
                continue
            if document.get("kind") == "Pod":
                pods.append(document)
                continue
            spec = document.get("spec")
            template = spec.get("template") if isinstance(spec, dict) else None
            job = spec.get("jobTemplate") if isinstance(spec, dict) else None
            if isinstance(job, dict):
                template = job["spec"].get("template")
            # A ScheduledSparkApplication's spec.template is an application, not a pod.
            if isinstance(template, dict) and isinstance(template.get("spec"), dict):
                pods.append({"kind": "Pod", "apiVersion": "v1", **template})
    for path in sorted((_FIXTURES / "reviews").glob("*.json")):
        request = orjson.loads(path.read_bytes())["request"]
        pods.extend(request[key] for key in ("object", "oldObject") if request.get(key))
    return pods


def _variants(pod: dict[str, Any], index: int) -> list[dict[str, Any]]:
    """The pod as stored, plus the states the ledger tells apart (tier, reservation, deletion)."""
    stored = copy.deepcopy(pod)
    meta = stored.setdefault("metadata", {})
    meta.setdefault("namespace", f"ns-{index % 3}")
    meta["uid"] = f"uid-{index}"
    meta["resourceVersion"] = str(1000 + index)
    meta["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    tiered = copy.deepcopy(stored)
    tiered_meta = tiered["metadata"]
    tiered_meta["labels"] = {**(tiered_meta.get("labels") or {}), "tenantgate.io/tier": "burst"}
    tiered_meta["annotations"] = {
        **(tiered_meta.get("annotations") or {}),
        "tenantgate.io/reservation": "r-1",
    }
    tiered["spec"]["priorityClassName"] = "tenant-burst"
    ending = copy.deepcopy(stored)
    ending["metadata"]["deletionTimestamp"] = "2025-03-14T09:26:54Z"
    ending["metadata"]["deletionGracePeriodSeconds"] = 30
    ending["status"] = {"phase": "Succeeded"}
    overhead = copy.deepcopy(stored)
    overhead["spec"]["overhead"] = {"cpu": "250m", "memory": "120Mi"}
    overhead["spec"]["resources"] = {"limits": {"cpu": "4", "memory": "8Gi"}}
    return [stored, tiered, ending, overhead]


def _page(items: list[Any]) -> bytes:
    return orjson.dumps(
        {"kind": "PodList", "metadata": {"resourceVersion": "7", "continue": "c"}, "items": items}
    )


def test_a_pod_page_gives_the_same_facts_reduced_as_whole() -> None:
    pods = [
        variant for index, pod in enumerate(_fixture_pods()) for variant in _variants(pod, index)
    ]
    assert len(pods) > 100
    body = _page(pods)
    reduced = decode_list("pods", body)
    whole = orjson.loads(body)
    assert reduced["metadata"] == whole["metadata"]
    # Every fixture fits the schema: nothing fell back to parsing the page whole.
    assert all("managedFields" not in item["metadata"] for item in reduced["items"])
    facts = [pod_facts(item) for item in reduced["items"]]
    assert facts == [pod_facts(item) for item in whole["items"]]
    # The informer's way: one interner remembering each distinct spec's request.
    intern = AmountInterner()
    assert facts == [pod_facts(item, intern=intern) for item in reduced["items"]]
    assert facts == [pod_facts(item, intern=intern) for item in whole["items"]]
    assert {f.tier_label for f in facts if f is not None} == {None, "burst"}


@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(2**63), 2**63 - 1)
        | st.text(max_size=4)
        | st.just("1Gi"),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
        max_leaves=6,
    ),
    st.sampled_from(
        [
            ("metadata",),
            ("metadata", "labels"),
            ("metadata", "labels", "tenantgate.io/tier"),
            ("metadata", "annotations"),
            ("metadata", "deletionTimestamp"),
            ("metadata", "deletionGracePeriodSeconds"),
            ("spec", "containers"),
            ("spec", "containers", 0),
            ("spec", "containers", 0, "resources"),
            ("spec", "containers", 0, "resources", "requests"),
            ("spec", "containers", 0, "resources", "requests", "cpu"),
            ("spec", "containers", 0, "restartPolicy"),
            ("spec", "initContainers", 0),
            ("spec", "initContainers", 0, "restartPolicy"),
            ("spec", "initContainers"),
            ("spec", "overhead"),
            ("spec", "resources"),
            ("spec", "priorityClassName"),
            ("status",),
            ("status", "phase"),
            ("status", "containerStatuses"),
            ("status", "containerStatuses", 0),
            ("status", "containerStatuses", 0, "name"),
            ("status", "containerStatuses", 0, "allocatedResources"),
            ("status", "containerStatuses", 0, "resources"),
            ("status", "initContainerStatuses"),
            ("status", "conditions"),
            ("status", "conditions", 0, "reason"),
        ]
    ),
)
@example("Always", ("spec", "initContainers", 0, "restartPolicy"))
@example(1, ("spec", "containers", 0, "resources", "requests", "cpu"))
@example({"cpu": "1"}, ("spec", "overhead"))
@example({"requests": {"cpu": "3"}}, ("spec", "resources"))
@settings(max_examples=150, deadline=None)
def test_any_value_anywhere_reads_the_same(value: Any, where: tuple[str | int, ...]) -> None:
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "n", "uid": "u", "labels": {}},
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
            "initContainers": [
                {"name": "i", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}
            ],
        },
        "status": {
            "phase": "Running",
            # A resize applied, then one found infeasible (UseStatusResources reads these).
            "containerStatuses": [
                {"name": "c", "allocatedResources": {"cpu": "2"}, "resources": {"requests": {}}}
            ],
            "conditions": [{"type": "PodResizePending", "reason": "Infeasible"}],
        },
    }
    # The unchanged pod's request is remembered first, so a key missing a field shows.
    pod_facts(copy.deepcopy(pod), intern=_SHARED)
    target: Any = pod
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    body = _page([pod])
    reduced, whole = decode_list("pods", body), orjson.loads(body)
    expected = [pod_facts(i) for i in whole["items"]]
    assert [pod_facts(i) for i in reduced["items"]] == expected
    assert [pod_facts(i, intern=_SHARED) for i in reduced["items"]] == expected


def test_other_lists_and_unfit_pages_are_parsed_whole() -> None:
    namespaces = _page([{"metadata": {"name": "a", "labels": {"x": "y"}}, "extra": 1}])
    assert decode_list("namespaces", namespaces) == orjson.loads(namespaces)
    unfit = _page([{"metadata": None}, 3])
    assert decode_list("pods", unfit) == orjson.loads(unfit)
    with pytest.raises(orjson.JSONDecodeError):
        decode_list("pods", b"{not json")
