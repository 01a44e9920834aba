"""Cluster sync: pods, namespaces and priority classes watched into the ledger controller.

:class:`ClusterSync` runs three :class:`~tenants.kube.informer.Informer` threads. Namespaces
and priority classes are listed first; pods wait for the namespaces, so that the first pod
list is charged to the right ``namespaceSelector`` tenants in one pass. Every change reaches
the :class:`~tenants.controller.LedgerController` on the event-loop thread. Priority classes
are kept as a table (name -> value, preemption policy and whether it is the cluster's
globalDefault) handed to ``on_priority_classes`` whenever it changes. ``synced`` turns true
once all three first lists have been applied, and stays true across reconnections and relists
(the ledger is still right meanwhile).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

from pydantic import ValidationError

from classifier.config import PriorityClassSpec
from tenants.controller import AmountInterner, LedgerController, PodFacts, pod_facts
from tenants.kube.backoff import BackoffPolicy, ItemBackoff
from tenants.kube.connection import RESOURCES, Connection, Resource
from tenants.kube.informer import (
    PAGE_SIZE,
    WATCH_TIMEOUT_SECONDS,
    Informer,
    InformerStatus,
    RestartHook,
    release_free_memory,
)

logger = logging.getLogger(__name__)

PriorityClassTable = Mapping[str, PriorityClassSpec]
STOP_SECONDS: Final = 5.0


@dataclass(frozen=True, slots=True)
class NamespaceItem:
    name: str
    labels: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class PriorityClassItem:
    name: str
    spec: PriorityClassSpec | None  # None: not a valid PriorityClass (ignored)


def namespace_item(obj: Mapping[str, Any]) -> NamespaceItem | None:
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        return None
    labels = meta.get("labels")
    return NamespaceItem(
        meta["name"],
        {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)}
        if isinstance(labels, dict)
        else {},
    )


def priority_class_item(obj: Mapping[str, Any]) -> PriorityClassItem | None:
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        return None
    name: str = meta["name"]
    fields: dict[str, Any] = {"value": obj.get("value")}
    if isinstance(obj.get("preemptionPolicy"), str):
        fields["preemptionPolicy"] = obj["preemptionPolicy"]
    if isinstance(obj.get("description"), str):
        fields["description"] = obj["description"]
    if obj.get("globalDefault") is True:
        fields["globalDefault"] = True
    try:
        return PriorityClassItem(name, PriorityClassSpec.model_validate(fields))
    except ValidationError:
        logger.warning("priority class %s: unusable value %r; ignored", name, obj.get("value"))
        return PriorityClassItem(name, None)


class _PodSink:
    def __init__(self, controller: LedgerController, clock: Callable[[], float]) -> None:
        self._controller = controller
        self._clock = clock

    def replace(self, items: list[PodFacts], *, initial: bool) -> None:
        self._controller.replace_pods(items, now=self._clock(), initial=initial)
        # A list of every pod leaves large temporary tables (the listed pods by uid, the
        # rebuild's per-tenant charges) that glibc keeps mapped: ~17 MiB at 150,000 pods.
        release_free_memory()

    def upsert(self, item: PodFacts) -> None:
        self._controller.apply_pod(item, now=self._clock())

    def delete(self, item: PodFacts) -> None:
        self._controller.delete_pod(item, now=self._clock())


class _NamespaceSink:
    def __init__(self, controller: LedgerController, clock: Callable[[], float]) -> None:
        self._controller = controller
        self._clock = clock

    def replace(self, items: list[NamespaceItem], *, initial: bool) -> None:
        self._controller.replace_namespaces(
            {item.name: item.labels for item in items}, now=self._clock()
        )

    def upsert(self, item: NamespaceItem) -> None:
        self._controller.apply_namespace(item.name, item.labels, now=self._clock())

    def delete(self, item: NamespaceItem) -> None:
        self._controller.delete_namespace(item.name, now=self._clock())


class _PriorityClassSink:
    def __init__(self, on_change: Callable[[PriorityClassTable], None]) -> None:
        self.table: dict[str, PriorityClassSpec] = {}
        self._on_change = on_change

    def replace(self, items: list[PriorityClassItem], *, initial: bool) -> None:
        table = {item.name: item.spec for item in items if item.spec is not None}
        if initial or table != self.table:
            self.table = table
            self._on_change(dict(table))

    def upsert(self, item: PriorityClassItem) -> None:
        if item.spec is None:
            self.delete(item)
        elif self.table.get(item.name) != item.spec:
            self.table[item.name] = item.spec
            self._on_change(dict(self.table))

    def delete(self, item: PriorityClassItem) -> None:
        if self.table.pop(item.name, None) is not None:
            self._on_change(dict(self.table))


class ClusterSync:
    """The three informers of one cluster connection, and what they have synced."""

    def __init__(
        self,
        connection: Connection,
        *,
        controller: LedgerController,
        on_priority_classes: Callable[[PriorityClassTable], None],
        clock: Callable[[], float] = time.time,
        on_restart: RestartHook | None = None,
        backoff: BackoffPolicy | None = None,
        page_size: int = PAGE_SIZE,
        watch_timeout: int = WATCH_TIMEOUT_SECONDS,
        resources: Collection[Resource] = RESOURCES,
    ) -> None:
        # A subset serves the HA runtime: every replica watches namespaces and priority
        # classes, only the lease holder watches pods (tenants.kube.leader.LeaderDuties).
        unknown = set(resources) - set(RESOURCES)
        if unknown or not resources:
            raise ValueError(f"resources must be a non-empty subset of {RESOURCES}")
        self.resources: tuple[Resource, ...] = tuple(r for r in RESOURCES if r in resources)
        self.connection = connection
        self._controller = controller
        self._clock = clock
        self._on_restart = on_restart
        self._backoff = ItemBackoff(backoff)
        self._page_size = page_size
        self._watch_timeout = watch_timeout
        self._priority_sink = _PriorityClassSink(on_priority_classes)
        self._informers: dict[Resource, Informer[Any]] = {}
        self._started_at: float | None = None

    @property
    def priority_classes(self) -> PriorityClassTable:
        """The cluster's priority classes as last seen (empty before the first list)."""
        return dict(self._priority_sink.table)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start watching; every change is applied on ``loop``'s thread."""
        if self._informers:
            raise RuntimeError("cluster sync was already started")
        deliver = loop.call_soon_threadsafe
        common: dict[str, Any] = {
            "connection": self.connection,
            "deliver": deliver,
            "backoff": self._backoff,
            "on_restart": self._on_restart,
            "page_size": self._page_size,
            "watch_timeout": self._watch_timeout,
        }
        namespaces: Informer[NamespaceItem] = Informer(
            "namespaces",
            convert=namespace_item,
            sink=_NamespaceSink(self._controller, self._clock),
            **common,
        )
        priority_classes: Informer[PriorityClassItem] = Informer(
            "priorityclasses", convert=priority_class_item, sink=self._priority_sink, **common
        )
        pods: Informer[PodFacts] = Informer(
            "pods",
            convert=partial(pod_facts, intern=AmountInterner()),
            sink=_PodSink(self._controller, self._clock),
            after=namespaces if "namespaces" in self.resources else None,
            **common,
        )
        every: dict[Resource, Informer[Any]] = {
            "namespaces": namespaces,
            "priorityclasses": priority_classes,
            "pods": pods,
        }
        self._informers = {resource: every[resource] for resource in self.resources}
        self._started_at = self._clock()
        for informer in self._informers.values():
            informer.start()
        logger.info("syncing %s from %s", ", ".join(self.resources), self.connection.host)

    async def stop(self) -> None:
        """Stop every watch and wait (briefly) for the threads; nothing is applied after."""
        informers = list(self._informers.values())
        for informer in informers:
            informer.stop()

        def join() -> list[str]:
            deadline = time.monotonic() + STOP_SECONDS
            return [
                informer.resource
                for informer in informers
                if not informer.join(max(deadline - time.monotonic(), 0.0))
            ]

        stuck = await asyncio.to_thread(join)
        if stuck:
            # Daemon threads blocked in a list call; they deliver nothing once stopped.
            logger.warning("cluster sync: %s still finishing a call", ", ".join(stuck))
        self.connection.close()

    @property
    def synced(self) -> bool:
        return bool(self._informers) and all(i.synced for i in self._informers.values())

    def status(self) -> dict[Resource, InformerStatus]:
        return {resource: informer.status for resource, informer in self._informers.items()}

    def readiness_detail(self) -> tuple[bool, str]:
        """(synced, what to show in ``/readyz``)."""
        host = self.connection.host
        if self.synced:
            counts = []
            if "pods" in self.resources:
                counts.append(f"{self._controller.pod_count} pods")
            if "priorityclasses" in self.resources:
                counts.append(f"{len(self._priority_sink.table)} priority classes")
            if "namespaces" in self.resources and "pods" not in self.resources:
                counts.append("namespaces")
            return True, f"synced from {host}: {', '.join(counts)}"
        if not self._informers:
            return False, f"cluster sync with {host} not started"
        pending = [r for r in self.resources if not self._informers[r].synced]
        errors = [
            f"{r}: {self._informers[r].status.last_error}"
            for r in pending
            if self._informers[r].status.last_error
        ]
        detail = f"waiting for the first list of {', '.join(pending)} from {host}"
        if errors:
            detail += f" (last error: {'; '.join(errors)})"
        return False, detail


__all__ = [
    "ClusterSync",
    "NamespaceItem",
    "PriorityClassItem",
    "PriorityClassTable",
    "namespace_item",
    "priority_class_item",
]
