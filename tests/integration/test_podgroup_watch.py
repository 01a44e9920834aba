"""Coscheduling PodGroups read through a watch (tenants/kube/podgroupwatch.py), on the real
control plane, with tenantgate's own ServiceAccount and the shipped RBAC: sizes follow the
PodGroup, a CRD installed later is picked up, and a coscheduled group is admitted whole with
its size from the watch (never one GET per member).

The PodGroup CRD is the scheduler-plugins project's own (tests/fixtures/crds/SOURCES.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from classifier.podgroups import SizeRef, claim_group
from tenants.groups.sizes import SizeAnswer
from tenants.kube.connection import ClusterTarget, Connection
from tenants.kube.podgroupwatch import PodGroupWatch, WatchedSizes
from testcluster import Cluster
from tests.integration.conftest import StartTenantgate
from tests.integration.harness import (
    api_client,
    create_namespace,
    eventually,
    installed_crds,
    one_tenant_config,
    pod,
    write_config,
)

CRD = "scheduling.x-k8s.io_podgroups.yaml"


class Fallback:
    """The reader WatchedSizes falls back to: records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[SizeRef] = []

    async def read(self, ref: SizeRef) -> SizeAnswer:
        self.asked.append(ref)
        return SizeAnswer(None, "asked the fallback")


@pytest.fixture
def podgroups_crd(kubeconfig: Path) -> Iterator[None]:
    with installed_crds(kubeconfig, CRD):
        yield


@pytest.fixture
def connection(kube: Cluster, tmp_path: Path) -> Iterator[Connection]:
    kubeconfig = kube.tenantgate_kubeconfig(tmp_path / "tenantgate.kubeconfig")
    opened = Connection.open(ClusterTarget("kubeconfig", "test", str(kubeconfig)))
    yield opened
    opened.close()


def podgroup(name: str, min_member: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": min_member},
    }


def member_ref(namespace: str, group: str) -> SizeRef:
    pod = {"metadata": {"namespace": namespace, "labels": {"scheduling.x-k8s.io/pod-group": group}}}
    claim = claim_group(pod)
    assert claim is not None
    assert claim.size_from is not None
    return claim.size_from


def test_podgroup_sizes_come_from_the_watch_and_follow_changes(
    podgroups_crd: None, kubeconfig: Path, core: Any, connection: Connection
) -> None:
    create_namespace(core, {"metadata": {"name": "team-pg"}})
    custom: Any = client.CustomObjectsApi(api_client(kubeconfig))
    args = ("scheduling.x-k8s.io", "v1alpha1", "team-pg", "podgroups")
    custom.create_namespaced_custom_object(*args, podgroup("train", 4))

    async def scenario() -> None:
        watch = PodGroupWatch(connection)
        assert await watch.start(asyncio.get_running_loop())
        fallback = Fallback()
        sizes = WatchedSizes(fallback, watch)
        try:
            assert await sizes.read(member_ref("team-pg", "train")) == SizeAnswer(4)
            assert await sizes.read(member_ref("team-pg", "other")) == SizeAnswer(
                None, "PodGroup team-pg/other was not found"
            )
            custom.patch_namespaced_custom_object(*args, "train", {"spec": {"minMember": 6}})
            for _ in range(3000):
                if (await sizes.read(member_ref("team-pg", "train"))).size == 6:
                    break
                await asyncio.sleep(0.01)
            assert await sizes.read(member_ref("team-pg", "train")) == SizeAnswer(6)
            # Anything but a PodGroup goes to the reader the watch wraps.
            job = SizeRef("batch/v1", "Job", "team-pg", "j", ("spec.parallelism",))
            assert await sizes.read(job) == SizeAnswer(None, "asked the fallback")
            assert fallback.asked == [job]
        finally:
            await watch.stop()

    asyncio.run(scenario())


def test_without_the_crd_nothing_is_watched_until_it_is_installed(
    connection: Connection, kubeconfig: Path, core: Any
) -> None:
    create_namespace(core, {"metadata": {"name": "team-pg"}})
    ref = member_ref("team-pg", "train")

    async def before() -> PodGroupWatch:
        watch = PodGroupWatch(connection, recheck=0.0)
        assert not await watch.start(asyncio.get_running_loop())
        fallback = Fallback()
        assert await WatchedSizes(fallback, watch).read(ref) == SizeAnswer(
            None,
            "PodGroup team-pg/train: the PodGroup CRD (scheduling.x-k8s.io/v1alpha1) is not "
            "installed",
        )
        assert fallback.asked == []
        return watch

    async def after(watch: PodGroupWatch) -> None:
        # Installed later: the next PodGroup asked for starts the watch.
        sizes = WatchedSizes(Fallback(), watch)
        try:
            assert await sizes.read(ref) == SizeAnswer(3)
            assert watch.started
        finally:
            await watch.stop()

    watch = asyncio.run(before())
    with installed_crds(kubeconfig, CRD):
        custom: Any = client.CustomObjectsApi(api_client(kubeconfig))
        custom.create_namespaced_custom_object(
            "scheduling.x-k8s.io", "v1alpha1", "team-pg", "podgroups", podgroup("train", 3)
        )
        asyncio.run(after(watch))


COSCHEDULING_CONFIG = one_tenant_config("team-pg", cpu="8")


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    return write_config(tmp_path, COSCHEDULING_CONFIG)


def gated(stored: Any) -> bool:
    return any(gate.name == "tenantgate.io/quota" for gate in stored.spec.scheduling_gates or [])


def test_a_coscheduled_group_is_sized_by_the_watched_podgroup_and_released_whole(
    podgroups_crd: None,
    start_tenantgate: StartTenantgate,
    kubeconfig: Path,
    core: Any,
    kube: Cluster,
) -> None:
    kube.proxy.seen.clear()
    start_tenantgate()
    create_namespace(core, {"metadata": {"name": "team-pg"}})
    custom: Any = client.CustomObjectsApi(api_client(kubeconfig))
    custom.create_namespaced_custom_object(
        "scheduling.x-k8s.io", "v1alpha1", "team-pg", "podgroups", podgroup("train", 3)
    )
    labels = {"scheduling.x-k8s.io/pod-group": "train"}
    first = core.create_namespaced_pod("team-pg", pod("train-0", labels=labels))
    assert gated(first)
    assert first.metadata.annotations["tenantgate.io/group-size"] == "3"
    core.create_namespaced_pod("team-pg", pod("train-1", labels=labels))
    assert all(gated(p) for p in core.list_namespaced_pod("team-pg").items)
    core.create_namespaced_pod("team-pg", pod("train-2", labels=labels))

    def released() -> bool:
        pods = core.list_namespaced_pod("team-pg").items
        return len(pods) == 3 and not any(gated(p) for p in pods)

    eventually(released, "the coscheduled group to be released")
    # Read from the watch: tenantgate never asked for one PodGroup.
    reads = {
        (key[1], key[2])
        for key in kube.proxy.seen
        if key[0] == "tenantgate" and "podgroups" in key[2]
    }
    assert reads == {
        ("list", "podgroups.scheduling.x-k8s.io"),
        ("watch", "podgroups.scheduling.x-k8s.io"),
    }
