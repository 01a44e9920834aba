"""The Deployment controller, without rolling-update subtleties
(``pkg/controller/deployment``): each Deployment owns one ReplicaSet per pod template, named
``<deployment>-<pod-template-hash>``, whose selector and template carry the
``pod-template-hash`` label; the current template's ReplicaSet is scaled to ``spec.replicas``
and every older one to 0 at once (as the ``Recreate`` strategy; ``RollingUpdate`` surge and
unavailability limits are not simulated). Scaling records ``ScalingReplicaSet`` events
(``Scaled up replica set X from A to B``); the status sums the ReplicaSets' and carries the
``Available`` and ``Progressing`` conditions.

The hash is ``rand.SafeEncodeString`` of a 32-bit FNV-1a hash, as upstream's
``controller.ComputeHash``, but of the template's canonical JSON rather than of Go's object
dump, so the suffix differs from a real cluster's.
"""

from __future__ import annotations

import math
from typing import Any

import orjson

from devapi import meta
from devapi.errors import APIError
from devapi.events import NORMAL
from devapi.store import clone
from devapi.types import JSONObject
from devapi.workloads.kinds import DEPLOYMENTS, POD_TEMPLATE_HASH_LABEL, REPLICA_SETS
from devapi.workloads.podcontrol import ControllerClient, owner_reference

REVISION = "deployment.kubernetes.io/revision"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
_ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery/pkg/util/rand


def _obj(value: Any) -> JSONObject:
    return value if isinstance(value, dict) else {}


def template_hash(template: JSONObject, collision_count: int | None = None) -> str:
    data = orjson.dumps(template, option=orjson.OPT_SORT_KEYS)
    if collision_count is not None:
        data += str(collision_count).encode()
    value = 0x811C9DC5
    for byte in data:
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(_ALPHANUMS[ord(c) % len(_ALPHANUMS)] for c in str(value))


def _scaled_text(name: str, before: int, after: int) -> str:
    direction = "up" if before < after else "down"
    return f"Scaled {direction} replica set {name} from {before} to {after}"


def _int_or_percent(value: Any, total: int, *, round_up: bool) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit():
        exact = int(value[:-1]) * total / 100
        return math.ceil(exact) if round_up else math.floor(exact)
    return 0


class DeploymentController:
    name = "deployment-controller"

    def __init__(self, client: ControllerClient) -> None:
        self.client = client

    async def sync(self, namespace: str, name: str) -> float | None:
        deployment = self.client.get(DEPLOYMENTS, namespace, name)
        if deployment is None or deployment["metadata"].get("deletionTimestamp"):
            return None
        spec = _obj(deployment.get("spec"))
        replicas = int(spec.get("replicas") or 0)
        template = _obj(spec.get("template"))
        collision = _obj(deployment.get("status")).get("collisionCount")
        suffix = template_hash(template, collision if isinstance(collision, int) else None)
        owned = self.client.owned(REPLICA_SETS, deployment)
        current = next(
            (rs for rs in owned if meta.labels(rs).get(POD_TEMPLATE_HASH_LABEL) == suffix), None
        )
        if current is None:
            revision = 1 + max(
                (int(meta.metadata(rs).get("annotations", {}).get(REVISION, "0")) for rs in owned),
                default=0,
            )
            current = await self._create_replica_set(deployment, suffix, replicas, revision)
            if current is None:
                return None
        elif int(_obj(current.get("spec")).get("replicas") or 0) != replicas:
            await self._scale(deployment, current, replicas)
        for old in owned:
            other = old["metadata"]["uid"] != current["metadata"]["uid"]
            if other and int(_obj(old.get("spec")).get("replicas") or 0) != 0:
                await self._scale(deployment, old, 0)
        await self._update_status(namespace, name, suffix)
        return None

    async def _create_replica_set(
        self, deployment: JSONObject, suffix: str, replicas: int, revision: int
    ) -> JSONObject | None:
        spec = _obj(deployment.get("spec"))
        template = clone(_obj(spec.get("template")))
        labels = dict(meta.labels(template))
        labels[POD_TEMPLATE_HASH_LABEL] = suffix
        meta.metadata(template)["labels"] = labels
        selector = clone(_obj(spec.get("selector")))
        selector.setdefault("matchLabels", {})[POD_TEMPLATE_HASH_LABEL] = suffix
        name = f"{deployment['metadata']['name']}-{suffix}"
        body: JSONObject = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": {REVISION: str(revision), DESIRED_REPLICAS: str(replicas)},
                "ownerReferences": [owner_reference(deployment)],
            },
            "spec": {"replicas": replicas, "selector": selector, "template": template},
        }
        if spec.get("minReadySeconds"):
            body["spec"]["minReadySeconds"] = spec["minReadySeconds"]
        try:
            created = await self.client.create(
                REPLICA_SETS, deployment["metadata"]["namespace"], body
            )
        except APIError as err:
            if err.code == 409:
                return self.client.get(REPLICA_SETS, deployment["metadata"]["namespace"], name)
            raise
        if replicas > 0:
            await self.client.events.record(
                deployment, NORMAL, "ScalingReplicaSet", _scaled_text(name, 0, replicas)
            )
        return created

    async def _scale(self, deployment: JSONObject, rs: JSONObject, replicas: int) -> None:
        before = int(_obj(rs.get("spec")).get("replicas") or 0)
        rs["spec"]["replicas"] = replicas
        annotations = meta.metadata(rs).setdefault("annotations", {})
        annotations[DESIRED_REPLICAS] = str(_obj(deployment.get("spec")).get("replicas") or 0)
        await self.client.update(REPLICA_SETS, rs)
        await self.client.events.record(
            deployment,
            NORMAL,
            "ScalingReplicaSet",
            _scaled_text(rs["metadata"]["name"], before, replicas),
        )

    async def _update_status(self, namespace: str, name: str, suffix: str) -> None:
        for _ in range(3):
            deployment = self.client.get(DEPLOYMENTS, namespace, name)
            if deployment is None:
                return
            spec = _obj(deployment.get("spec"))
            replicas = int(spec.get("replicas") or 0)
            owned = self.client.owned(REPLICA_SETS, deployment)

            def total(field: str, sets: list[JSONObject]) -> int:
                return sum(int(_obj(rs.get("status")).get(field) or 0) for rs in sets)

            current = [rs for rs in owned if meta.labels(rs).get(POD_TEMPLATE_HASH_LABEL) == suffix]
            available = total("availableReplicas", owned)
            rolling = _obj(_obj(spec.get("strategy")).get("rollingUpdate"))
            max_unavailable = _int_or_percent(
                rolling.get("maxUnavailable", "25%"), replicas, round_up=False
            )
            previous = _obj(deployment.get("status"))
            status: JSONObject = {
                "observedGeneration": deployment["metadata"].get("generation", 1),
                "replicas": total("replicas", owned),
                "updatedReplicas": total("replicas", current),
                "readyReplicas": total("readyReplicas", owned),
                "availableReplicas": available,
                "unavailableReplicas": max(replicas - available, 0),
            }
            status = {k: v for k, v in status.items() if v or k == "observedGeneration"}
            minimum = available >= replicas - max_unavailable
            rs_name = current[0]["metadata"]["name"] if current else ""
            done = total("availableReplicas", current) >= replicas and total(
                "replicas", owned
            ) == total("replicas", current)
            status["conditions"] = [
                self._condition(
                    previous,
                    "Available",
                    minimum,
                    "MinimumReplicasAvailable" if minimum else "MinimumReplicasUnavailable",
                    "Deployment has minimum availability."
                    if minimum
                    else "Deployment does not have minimum availability.",
                ),
                self._condition(
                    previous,
                    "Progressing",
                    True,
                    "NewReplicaSetAvailable" if done else "ReplicaSetUpdated",
                    f'ReplicaSet "{rs_name}" has successfully progressed.'
                    if done
                    else f'ReplicaSet "{rs_name}" is progressing.',
                ),
            ]
            if "collisionCount" in previous:
                status["collisionCount"] = previous["collisionCount"]
            if previous == status:
                return
            deployment["status"] = status
            try:
                await self.client.update_status(DEPLOYMENTS, deployment)
                return
            except APIError as err:
                if err.code != 409:
                    raise

    def _condition(
        self, previous: JSONObject, kind: str, true: bool, reason: str, message: str
    ) -> JSONObject:
        now = meta.now_timestamp(self.client.clock())
        old = next(
            (
                c
                for c in previous.get("conditions") or []
                if isinstance(c, dict) and c.get("type") == kind
            ),
            {},
        )
        value = "True" if true else "False"
        same_state = old.get("status") == value
        same = same_state and old.get("reason") == reason and old.get("message") == message
        return {
            "type": kind,
            "status": value,
            "lastUpdateTime": old.get("lastUpdateTime", now) if same else now,
            "lastTransitionTime": old.get("lastTransitionTime", now) if same_state else now,
            "reason": reason,
            "message": message,
        }
