"""The ReplicaSet controller (``pkg/controller/replicaset/replica_set.go``, ``syncReplicaSet``,
``manageReplicas``, ``calculateStatus``): keep ``spec.replicas`` active pods owned by each
ReplicaSet, creating from its template in slow-start batches or deleting the lowest-ranked,
and report ``replicas``, ``fullyLabeledReplicas``, ``readyReplicas``, ``availableReplicas``.
A failed creation fails the sync, which is retried through the rate-limited queue.
Orphaned pods matching the selector are not adopted.
"""

from __future__ import annotations

from typing import Any

from devapi import meta
from devapi.errors import APIError
from devapi.resources import PODS
from devapi.types import JSONObject
from devapi.workloads.kinds import REPLICA_SETS
from devapi.workloads.podcontrol import (
    BURST_REPLICAS,
    ControllerClient,
    deletion_rank,
    is_active,
    is_available,
    is_ready,
)


def _obj(value: Any) -> JSONObject:
    return value if isinstance(value, dict) else {}


class SyncFailed(Exception):
    """A sync that must be retried with the queue's backoff."""

    def __init__(self, cause: APIError) -> None:
        super().__init__(cause.message)
        self.cause = cause


class ReplicaSetController:
    name = "replicaset-controller"

    def __init__(self, client: ControllerClient) -> None:
        self.client = client

    async def sync(self, namespace: str, name: str) -> float | None:
        rs = self.client.get(REPLICA_SETS, namespace, name)
        if rs is None:
            return None
        spec = _obj(rs.get("spec"))
        active = [p for p in self.client.owned(PODS, rs) if is_active(p)]
        failure: APIError | None = None
        if not rs["metadata"].get("deletionTimestamp"):
            diff = len(active) - int(spec.get("replicas") or 0)
            if diff < 0:
                failure = await self.client.create_pods(
                    rs, _obj(spec.get("template")), -diff, f"{name}-"
                )
            elif diff > 0:
                victims = sorted(active, key=deletion_rank)[: min(diff, BURST_REPLICAS)]
                await self.client.delete_pods(rs, victims)
        requeue = await self._update_status(namespace, name)
        if failure is not None:
            raise SyncFailed(failure)
        return requeue

    async def _update_status(self, namespace: str, name: str) -> float | None:
        for _ in range(3):
            rs = self.client.get(REPLICA_SETS, namespace, name)
            if rs is None:
                return None
            spec = _obj(rs.get("spec"))
            min_ready = int(spec.get("minReadySeconds") or 0)
            active = [p for p in self.client.owned(PODS, rs) if is_active(p)]
            template_labels = meta.string_map(
                _obj(_obj(spec.get("template")).get("metadata")).get("labels")
            )
            now = self.client.clock()
            status: JSONObject = {
                "replicas": len(active),
                "fullyLabeledReplicas": sum(
                    1
                    for p in active
                    if all(meta.labels(p).get(k) == v for k, v in template_labels.items())
                ),
                "readyReplicas": sum(1 for p in active if is_ready(p)),
                "availableReplicas": sum(1 for p in active if is_available(p, min_ready, now)),
                "observedGeneration": rs["metadata"].get("generation", 1),
            }
            for zero in ("fullyLabeledReplicas", "readyReplicas", "availableReplicas"):
                if status[zero] == 0:
                    del status[zero]  # omitempty, as the real server stores it
            if rs.get("status") != status:
                rs["status"] = status
                try:
                    await self.client.update_status(REPLICA_SETS, rs)
                except APIError as err:
                    if err.code == 409:
                        continue
                    if err.code == 404:
                        return None
                    raise
            waiting = status.get("readyReplicas", 0) != status.get("availableReplicas", 0)
            return float(min_ready) if min_ready > 0 and waiting else None
        return None
