"""Pod groups with three replicas sharing one ledger, the leader killed while the groups are
being created, on the real control plane.

Five groups of 8 pods are created member by member, interleaved, into a tenant with room for
16 pods; the leader is killed half-way. A watch of the namespace follows every pod: at no
instant do more than 16 pods run, and no group is ever partly released: once the gates of a
group start coming off they all do (within moments: one PATCH per pod), whichever replica
leads. At the end exactly two groups run, whole, and the other three wait, whole.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from testcluster import Cluster
from tests.integration.harness import PODS_QUOTA_CONFIG, RETRYABLE, eventually
from tests.integration.test_ha import NAMESPACE, WAIT, HACluster, _has_leader, ha_cluster
from tests.integration.test_queue_ha import Running, gated

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOM = 16
GROUPS = 5
SIZE = 8


@pytest.fixture
def cluster(kube: Cluster, kube_cert_dir: Path, tmp_path: Path) -> Iterator[HACluster]:
    with ha_cluster(
        kube,
        tmp_path,
        cert_dir=kube_cert_dir,
        guaranteed=ROOM,
        ceiling=ROOM,
        config=PODS_QUOTA_CONFIG,
    ) as running:
        yield running


def group_of(name: str) -> str:
    return name.rsplit("-", 1)[0]


def member(group: int, index: int) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"g{group}-{index}",
            "namespace": NAMESPACE,
            "labels": {
                "tenantgate.io/pod-group": f"g{group}",
                "tenantgate.io/pod-group-size": str(SIZE),
            },
        },
        "spec": {"containers": [{"name": "app", "image": "busybox"}]},
    }


def test_five_groups_with_the_leader_killed_are_never_partly_released(
    cluster: HACluster,
) -> None:
    observer = Running(cluster)
    api = cluster.api_client(pool=8)
    core: Any = client.CoreV1Api(api)
    partly: dict[str, float] = {}  # group -> since when some but not all of it runs
    longest: dict[str, float] = {}
    stop = threading.Event()

    def watch_groups() -> None:
        while not stop.is_set():
            now = time.monotonic()
            counts: dict[str, int] = {}
            for name in observer.running():
                counts[group_of(name)] = counts.get(group_of(name), 0) + 1
            for group in {f"g{n}" for n in range(GROUPS)}:
                count = counts.get(group, 0)
                if 0 < count < SIZE:
                    since = partly.setdefault(group, now)
                    longest[group] = max(longest.get(group, 0.0), now - since)
                else:
                    partly.pop(group, None)
            time.sleep(0.02)

    sampler = threading.Thread(target=watch_groups, daemon=True)
    sampler.start()
    creates = [(g, i) for i in range(SIZE) for g in range(GROUPS)]  # member by member
    done = [0]
    lock = threading.Lock()
    killed = threading.Event()

    def create(item: tuple[int, int]) -> None:
        group, index = item
        for _ in range(60):
            try:
                core.create_namespaced_pod(NAMESPACE, member(group, index), _request_timeout=30)
                break
            except client.ApiException as exc:
                if exc.status == 409 and "AlreadyExists" in str(exc.body):
                    break
                if exc.status in RETRYABLE:
                    time.sleep(0.05)
                    continue
                raise
        with lock:
            done[0] += 1
            kill = done[0] >= len(creates) // 2 and not killed.is_set()
            if kill:
                killed.set()
        if kill:
            cluster.leader().kill()

    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(create, creates))
        eventually(
            lambda: _has_leader(cluster) and cluster.leader().alive,
            "a surviving replica to hold the Lease",
            timeout=WAIT,
        )

        def settled() -> bool:
            return len(observer.running()) == ROOM

        eventually(settled, f"{ROOM} pods running", timeout=WAIT)
        time.sleep(2)  # nothing more is released
    finally:
        stop.set()
        sampler.join(5)
        observer.stop()
        api.close()
    assert observer.most <= ROOM, f"{observer.most} pods ran at once for room {ROOM}"
    assert all(seconds < 5.0 for seconds in longest.values()), longest
    pods = cluster.pods()
    assert len(pods) == GROUPS * SIZE
    by_group: dict[str, list[bool]] = {}
    for item in pods:
        by_group.setdefault(group_of(item["metadata"]["name"]), []).append(gated(item))
    whole = sorted(group for group, gates in by_group.items() if not any(gates))
    assert len(whole) == ROOM // SIZE, by_group
    assert all(all(gates) or not any(gates) for gates in by_group.values()), by_group
    used = cluster.ledger_status().get("used", {})
    assert used.get("guaranteed", {}).get("pods") == str(ROOM), used
