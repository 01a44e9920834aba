"""What every simulated controller does with the API: act as its own identity through the
registry (so every create runs the whole admission chain, webhooks included), build pods from
templates, create them in slow-start batches and record ``SuccessfulCreate`` / ``FailedCreate``.

Follows ``pkg/controller/controller_utils.go``: ``GetPodFromTemplate`` (labels, annotations
and finalizers of the template, ``generateName``, a controller owner reference),
``RealPodControl.createPods`` (``Created pod: NAME``; ``Error creating: <the API error>``, unless
the namespace is terminating) and ``slowStartBatch`` (1, 2, 4, ... creations at once, stopping
at the first batch with an error), and ``ActivePodsWithRanks`` for which pods go first on
scale-down.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from devapi import meta
from devapi.admission import UserInfo
from devapi.errors import APIError
from devapi.events import EVENTS, NORMAL, WARNING, EventRecorder
from devapi.registry import DeleteOptions, ListOptions, Registry, RequestContext
from devapi.resources import PODS, ResourceType
from devapi.selectors import EVERYTHING, FieldSelector
from devapi.store import clone
from devapi.types import JSONObject

logger = logging.getLogger(__name__)

SLOW_START_INITIAL_BATCH = 1
BURST_REPLICAS = 500  # the ReplicaSet controller's burstReplicas: creations per sync at most
TERMINAL = ("Succeeded", "Failed")


def _obj(value: Any) -> JSONObject:
    return value if isinstance(value, dict) else {}


def service_account(name: str) -> UserInfo:
    """A kube-controller-manager controller's identity (``--use-service-account-credentials``)."""
    return UserInfo(
        f"system:serviceaccount:kube-system:{name}",
        ("system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"),
    )


def owner_reference(owner: JSONObject) -> JSONObject:
    """``metav1.NewControllerRef``."""
    metadata = _obj(owner.get("metadata"))
    return {
        "apiVersion": owner.get("apiVersion"),
        "kind": owner.get("kind"),
        "name": metadata.get("name"),
        "uid": metadata.get("uid"),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controller_uid(obj: JSONObject) -> str | None:
    for ref in _obj(obj.get("metadata")).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return str(ref.get("uid") or "")
    return None


def pod_from_template(template: JSONObject, owner: JSONObject, generate_name: str) -> JSONObject:
    """``GetPodFromTemplate``."""
    template_meta = _obj(template.get("metadata"))
    metadata: JSONObject = {
        "generateName": generate_name,
        "ownerReferences": [owner_reference(owner)],
    }
    for field in ("labels", "annotations"):
        if template_meta.get(field):
            metadata[field] = clone(template_meta[field])
    if template_meta.get("finalizers"):
        metadata["finalizers"] = list(template_meta["finalizers"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": clone(_obj(template.get("spec"))),
    }


def is_active(pod: JSONObject) -> bool:
    """``controller.IsPodActive``: not finished and not being deleted."""
    return _obj(pod.get("status")).get("phase") not in TERMINAL and not _obj(
        pod.get("metadata")
    ).get("deletionTimestamp")


def _condition(pod: JSONObject, kind: str) -> JSONObject | None:
    for condition in _obj(pod.get("status")).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == kind:
            return condition
    return None


def is_ready(pod: JSONObject) -> bool:
    ready = _condition(pod, "Ready")
    return ready is not None and ready.get("status") == "True"


def is_available(pod: JSONObject, min_ready_seconds: int, now: float) -> bool:
    """``podutil.IsPodAvailable``: ready for at least ``min_ready_seconds``."""
    ready = _condition(pod, "Ready")
    if ready is None or ready.get("status") != "True":
        return False
    if min_ready_seconds <= 0:
        return True
    since = meta.parse_timestamp(ready.get("lastTransitionTime"))
    return since is not None and since.timestamp() + min_ready_seconds <= now


def deletion_rank(pod: JSONObject) -> tuple[int, int, int, float]:
    """``ActivePods`` ordering: unscheduled, then pending, then not ready, then the newest, go
    first (smaller sorts first)."""
    status = _obj(pod.get("status"))
    scheduled = 1 if _obj(pod.get("spec")).get("nodeName") else 0
    phase = {"Pending": 0, "Unknown": 1, "Running": 2}.get(str(status.get("phase")), 2)
    ready = 1 if is_ready(pod) else 0
    created = meta.parse_timestamp(_obj(pod.get("metadata")).get("creationTimestamp"))
    return (scheduled, phase, ready, -(created.timestamp() if created else 0.0))


class ControllerClient:
    """One controller's view of the API: its identity, its events."""

    def __init__(self, registry: Registry, name: str, *, clock: Callable[[], float] = time.time):
        self.registry = registry
        self.ctx = RequestContext(user=service_account(name))
        self.clock = clock
        self.events = EventRecorder(
            name,
            create=self._create_event,
            update=self._update_event,
            clock=clock,
        )

    def context(self) -> RequestContext:
        return RequestContext(user=self.ctx.user)

    async def _create_event(self, namespace: str, body: JSONObject) -> JSONObject:
        return await self.registry.create(EVENTS, "v1", namespace, body, self.context())

    async def _update_event(self, namespace: str, body: JSONObject) -> JSONObject:
        name = str(body["metadata"]["name"])
        return await self.registry.update(EVENTS, "v1", namespace, name, body, self.context())

    def list_all(self, rt: ResourceType, namespace: str | None) -> list[JSONObject]:
        listing = self.registry.list(
            rt, rt.storage_version, namespace, ListOptions(EVERYTHING, FieldSelector())
        )
        items: list[JSONObject] = listing["items"]
        return items

    def owned(self, rt: ResourceType, owner: JSONObject) -> list[JSONObject]:
        """The objects of ``rt`` that ``owner`` controls."""
        uid = owner["metadata"]["uid"]
        namespace = owner["metadata"]["namespace"]
        return [obj for obj in self.list_all(rt, namespace) if controller_uid(obj) == uid]

    def get(self, rt: ResourceType, namespace: str, name: str) -> JSONObject | None:
        try:
            return self.registry.get(rt, rt.storage_version, namespace, name)
        except APIError as err:
            if err.code == 404:
                return None
            raise

    async def create(self, rt: ResourceType, namespace: str, body: JSONObject) -> JSONObject:
        return await self.registry.create(rt, rt.storage_version, namespace, body, self.context())

    async def update(self, rt: ResourceType, obj: JSONObject) -> JSONObject:
        metadata = obj["metadata"]
        return await self.registry.update(
            rt, rt.storage_version, metadata["namespace"], metadata["name"], obj, self.context()
        )

    async def update_status(self, rt: ResourceType, obj: JSONObject) -> JSONObject:
        metadata = obj["metadata"]
        return await self.registry.update(
            rt,
            rt.storage_version,
            metadata["namespace"],
            metadata["name"],
            obj,
            self.context(),
            subresource="status",
        )

    async def delete(self, rt: ResourceType, obj: JSONObject) -> None:
        metadata = obj["metadata"]
        try:
            await self.registry.delete(
                rt,
                rt.storage_version,
                metadata["namespace"],
                metadata["name"],
                DeleteOptions(
                    propagation_policy="Background", precondition_uid=metadata.get("uid")
                ),
                self.context(),
            )
        except APIError as err:
            if err.code not in (404, 409):
                raise

    async def create_pods(
        self, owner: JSONObject, template: JSONObject, count: int, generate_name: str
    ) -> APIError | None:
        """``slowStartBatch`` of ``createPods``: the first error, or None."""
        remaining = min(count, BURST_REPLICAS)
        batch = SLOW_START_INITIAL_BATCH
        namespace = str(owner["metadata"]["namespace"])
        while remaining > 0:
            size = min(batch, remaining)
            results = await asyncio.gather(
                *(self._create_pod(owner, template, namespace, generate_name) for _ in range(size))
            )
            failures = [r for r in results if r is not None]
            if failures:
                return failures[0]
            remaining -= size
            batch *= 2
        return None

    async def _create_pod(
        self, owner: JSONObject, template: JSONObject, namespace: str, generate_name: str
    ) -> APIError | None:
        pod = pod_from_template(template, owner, generate_name)
        try:
            created = await self.registry.create(PODS, "v1", namespace, pod, self.context())
        except APIError as err:
            if "unable to create new content in namespace" not in err.message:
                await self.events.record(owner, WARNING, "FailedCreate", f"Error creating: {err}")
            return err
        await self.events.record(
            owner, NORMAL, "SuccessfulCreate", f"Created pod: {created['metadata']['name']}"
        )
        return None

    async def delete_pods(self, owner: JSONObject, pods: Sequence[JSONObject]) -> None:
        """``DeletePod`` for each, recording ``SuccessfulDelete``."""
        for pod in pods:
            await self.delete(PODS, pod)
            await self.events.record(
                owner, NORMAL, "SuccessfulDelete", f"Deleted pod: {pod['metadata']['name']}"
            )


Sync = Callable[[str, str], Awaitable[float | None]]
