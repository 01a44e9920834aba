"""Queue mode with three replicas sharing one ledger, and the leader killed mid-run, on the
real control plane.

600 concurrent creates, and 200 deletes of running pods while they run, against a tenant whose
guarantee holds ``ROOM`` pods, with ``overQuota: queue``. A watch of the namespace follows every
pod: at no instant do more than ``ROOM`` pods run without the gate (0 over-admission), and
once the deletions stop, the new leader has released exactly as many as fit, kept every other
pod in line in creation order, and the TenantLedger equals the truth.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from testcluster import Cluster
from tests.integration.harness import PODS_QUOTA_CONFIG, RETRYABLE, eventually
from tests.integration.test_ha import (
    NAMESPACE,
    WAIT,
    HACluster,
    _has_leader,
    ha_cluster,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

GATE = "tenantgate.io/quota"
ROOM = 20
CREATES = 600
DELETES = 200

CONFIG = PODS_QUOTA_CONFIG + "    overQuota: queue\n    queue: {{maxPending: 1000}}\n"


def gated(item: dict[str, Any]) -> bool:
    gates = (item.get("spec") or {}).get("schedulingGates") or []
    return any(gate.get("name") == GATE for gate in gates)


class Running:
    """Every pod of the namespace from one watch; the most ever running ungated at once."""

    def __init__(self, cluster: HACluster) -> None:
        self._api = cluster.api_client()
        self._pods: dict[str, bool] = {}  # name -> running ungated
        self.most = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        watcher: Any = watch.Watch
        self._watch: Any = watcher()
        core: Any = client.CoreV1Api(self._api)
        listed = core.list_namespaced_pod(NAMESPACE, _preload_content=False)
        document = json.loads(listed.data)
        listed.release_conn()
        self._version = document["metadata"]["resourceVersion"]
        for item in document["items"]:
            self._apply("ADDED", item)
        self._thread = threading.Thread(target=self._run, args=(core,), daemon=True)
        self._thread.start()

    def _apply(self, kind: str, item: dict[str, Any]) -> None:
        name = item["metadata"]["name"]
        with self._lock:
            if kind == "DELETED":
                self._pods.pop(name, None)
            else:
                # A bound pod deleted with grace 0 is first written with its deletionTimestamp,
                # then removed (Store.Delete -> updateForGracefulDeletionAndFinalizers in
                # k8s.io/apiserver/pkg/registry/generic/registry/store.go; the grace comes from
                # CheckGracefulDelete in pkg/registry/core/pod/strategy.go): from that first
                # event it no longer runs, as for the quota evaluator.
                self._pods[name] = not gated(item) and not item["metadata"].get("deletionTimestamp")
            self.most = max(self.most, sum(self._pods.values()))

    def _run(self, core: Any) -> None:
        while not self._stop.is_set():
            try:
                for event in self._watch.stream(
                    core.list_namespaced_pod,
                    NAMESPACE,
                    resource_version=self._version,
                    timeout_seconds=30,
                    _preload_content=False,
                ):
                    raw = event["raw_object"]
                    self._version = raw["metadata"]["resourceVersion"]
                    self._apply(event["type"], raw)
            except Exception:  # a dropped watch resumes from the last version
                time.sleep(0.05)

    def running(self) -> list[str]:
        with self._lock:
            return sorted(name for name, up in self._pods.items() if up)

    def stop(self) -> None:
        self._stop.set()
        self._watch.stop()
        self._api.close()


def create(core: Any, name: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"containers": [{"name": "app", "image": "busybox"}]},
    }
    for attempt in range(60):
        try:
            core.create_namespaced_pod(NAMESPACE, body, _request_timeout=30)
        except client.ApiException as exc:
            if exc.status == 409 and "AlreadyExists" in str(exc.body):
                return
            if exc.status in RETRYABLE:
                time.sleep(random.uniform(0.01, 0.05) * min(attempt + 1, 10))
                continue
            raise AssertionError(f"{name}: {exc.status}: {exc.body}") from exc
        except Exception:
            time.sleep(0.05)
            continue
        return
    raise AssertionError(f"{name}: still told to retry after 60 attempts")


@pytest.fixture
def cluster(kube: Cluster, kube_cert_dir: Path, tmp_path: Path) -> Iterator[HACluster]:
    # The replicas release pods as the shipped ServiceAccount, the default gate owner: the
    # webhook sees the token's user, system:serviceaccount:<namespace>:<name> (MakeUsername in
    # k8s.io/apiserver/pkg/authentication/serviceaccount/util.go). The Python test API
    # server's kubeconfig made them kubernetes-admin, so the test used to name that user the
    # gate owner.
    with ha_cluster(
        kube, tmp_path, cert_dir=kube_cert_dir, guaranteed=ROOM, ceiling=ROOM, config=CONFIG
    ) as running:
        yield running


def test_600_creates_and_deletes_with_the_leader_killed_never_over_admit(
    cluster: HACluster,
) -> None:
    observer = Running(cluster)
    api = cluster.api_client(pool=16)
    core = client.CoreV1Api(api)
    deleted: list[str] = []
    deletes_done = threading.Event()

    def deleter() -> None:
        # Deletions of running pods, as they appear: each frees room for one queued pod.
        while len(deleted) < DELETES:
            candidates = [n for n in observer.running() if n not in deleted]
            if not candidates:
                time.sleep(0.01)
                continue
            name = random.choice(candidates)
            try:
                core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
            deleted.append(name)
        deletes_done.set()

    killed = threading.Event()
    answered: list[int] = [0]
    answered_lock = threading.Lock()

    def creator(index: int) -> None:
        create(core, f"p-{index:03d}")
        # Half-way by answers, not by the index: p-300's own create may be retried until
        # after every other one, and a leader killed then has nothing left to hand over.
        with answered_lock:
            answered[0] += 1
            kill = answered[0] >= CREATES // 2 and not killed.is_set()
            if kill:
                killed.set()
        if kill:
            cluster.leader().kill()

    try:
        worker = threading.Thread(target=deleter, daemon=True)
        worker.start()
        with ThreadPoolExecutor(max_workers=12) as pool:
            list(pool.map(creator, range(CREATES)))
        assert deletes_done.wait(WAIT * 3), f"only {len(deleted)} deletions"
        survivors = [r for r in cluster.replicas if r.alive]
        assert len(survivors) == 2

        eventually(
            lambda: _has_leader(cluster) and cluster.leader().alive,
            "a surviving replica to hold the Lease",
            timeout=WAIT,
        )

        # Once a new leader holds the Lease, the room is filled again, and no more.
        def settled() -> bool:
            return len(observer.running()) == ROOM

        try:
            eventually(settled, f"{ROOM} pods running again", timeout=WAIT)
        except AssertionError:
            status = json.loads(cluster.leader().get("/status")[1])
            raise AssertionError(
                f"{len(observer.running())} running of {len(cluster.pods())} pods; ledger "
                f"{cluster.ledger_status().get('used')}; leader's queue {status.get('queue')}"
            ) from None
        assert observer.most <= ROOM, f"{observer.most} pods ran at once for room {ROOM}"
        leader = cluster.leader()
        assert leader.alive
        pods = cluster.pods()
        waiting = [p for p in pods if gated(p)]
        assert len(pods) == CREATES - len(deleted)
        assert len(waiting) == len(pods) - ROOM

        def listed() -> list[str]:
            code, body = leader.get("/queue?tenant=team-a")
            assert code == 200
            rows = json.loads(body)["tenants"]["team-a"]["pods"]
            return [row["pod"].split("/", 1)[1] for row in rows]

        expected = [
            p["metadata"]["name"]
            for p in sorted(
                waiting,
                key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]),
            )
        ]
        eventually(lambda: listed() == expected, "every waiting pod in line, in order")
        # The stored ledger follows the leader's queue within a write (or, for an entry a
        # killed leader left behind, the next recount): exactly the waiting pods, settled.
        uids = sorted(p["metadata"]["uid"] for p in waiting)
        seen: list[dict[str, Any]] = []

        def stored_queue_is_the_waiting_pods() -> bool:
            seen[:] = [cluster.ledger_status()]
            entries = seen[0].get("queued", [])
            return (
                seen[0]["used"]["guaranteed"].get("pods") == str(ROOM)
                and sorted(e.get("podUID", "") for e in entries) == uids
                and not any(e.get("expiresAt") for e in entries)
            )

        try:
            eventually(stored_queue_is_the_waiting_pods, "the stored queue to be the waiting pods")
        except AssertionError:
            entries = seen[0].get("queued", [])
            extra = [e for e in entries if e.get("podUID") not in set(uids)]
            missing = set(uids) - {e.get("podUID") for e in entries}
            raise AssertionError(
                f"stored used {seen[0].get('used')}; {len(entries)} queued entries for "
                f"{len(uids)} waiting pods; not waiting: {extra[:5]}; "
                f"missing: {sorted(missing)[:5]}"
            ) from None
    finally:
        observer.stop()
        api.close()
