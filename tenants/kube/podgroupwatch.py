"""Coscheduling PodGroups, read through a watch where their CRD is installed.

A pod labelled ``scheduling.x-k8s.io/pod-group`` belongs to the ``PodGroup`` of that name,
whose ``spec.minMember`` is the group's size (kubernetes-sigs/scheduler-plugins,
apis/scheduling/v1alpha1/types.go). Every member of a group asks for the same object, and the
scheduler-plugins controller keeps it current: a watch answers them all from memory instead of
one GET each. :class:`PodGroupWatch` lists and watches the PodGroups of every namespace (an
:class:`~tenants.kube.informer.Informer` thread) once the API server serves them: checked at
start, and again (at most every ``recheck`` seconds) when a PodGroup is asked for while the
CRD was missing, so a CRD installed later is picked up without a restart.
:class:`WatchedSizes` answers a PodGroup's size from the watch only, and hands every other
:class:`~classifier.podgroups.SizeRef` to the reader it wraps.

RBAC: ``list`` and ``watch`` on ``podgroups.scheduling.x-k8s.io``; never ``get``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from classifier.podgroups import COSCHEDULING_API_VERSION, SizeRef
from tenants.groups.sizes import SizeAnswer, SizeReader
from tenants.kube.backoff import BackoffPolicy, ItemBackoff
from tenants.kube.connection import PODGROUP_PLURAL, Connection
from tenants.kube.errors import KubeError
from tenants.kube.informer import WATCH_TIMEOUT_SECONDS, Informer

logger = logging.getLogger(__name__)

STOP_SECONDS = 5.0
RECHECK_SECONDS = 30.0
# How long a read waits for the first list of a watch just started.
SYNC_WAIT_SECONDS = 5.0
Key = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True, slots=True)
class WatchedPodGroup:
    """A listed or watched PodGroup: where it is, and its whole object (for ``size_of``)."""

    key: Key
    document: Mapping[str, Any]


def podgroup_item(obj: Mapping[str, Any]) -> WatchedPodGroup | None:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return None
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not isinstance(namespace, str) or not name:
        return None
    spec = obj.get("spec")
    # Only the spec is kept: a size is read from it, and statuses change on every member.
    return WatchedPodGroup((namespace, name), {"spec": spec if isinstance(spec, dict) else {}})


class _Sink:
    def __init__(self, groups: dict[Key, Mapping[str, Any]]) -> None:
        self._groups = groups

    def replace(self, items: list[WatchedPodGroup], *, initial: bool) -> None:
        self._groups.clear()
        self._groups.update((item.key, item.document) for item in items)

    def upsert(self, item: WatchedPodGroup) -> None:
        self._groups[item.key] = item.document

    def delete(self, item: WatchedPodGroup) -> None:
        self._groups.pop(item.key, None)


class PodGroupWatch:
    """The PodGroups of every namespace, kept current while the API server serves them."""

    def __init__(
        self,
        connection: Connection,
        *,
        backoff: BackoffPolicy | None = None,
        watch_timeout: int = WATCH_TIMEOUT_SECONDS,
        recheck: float = RECHECK_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._connection = connection
        self._backoff = ItemBackoff(backoff)
        self._watch_timeout = watch_timeout
        self._recheck = recheck
        self._clock = clock
        self._checked: float | None = None
        self._groups: dict[Key, Mapping[str, Any]] = {}
        self._informer: Informer[WatchedPodGroup] | None = None
        self._stopped = False
        self._starting = asyncio.Lock()

    @property
    def started(self) -> bool:
        return self._informer is not None

    async def ensure_started(self) -> bool:
        """Whether the watch runs, starting it if PodGroups are served now (checked at most
        every ``recheck`` seconds)."""
        if self._informer is not None:
            return True
        if self._stopped:
            return False
        now = self._clock()
        if self._checked is not None and now - self._checked < self._recheck:
            return False
        return await self.start(asyncio.get_running_loop())

    async def wait_synced(self, seconds: float) -> bool:
        informer = self._informer
        if informer is None:
            return False
        return informer.synced or await asyncio.to_thread(informer.wait_synced, seconds)

    async def start(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Start watching if PodGroups are served; False (and nothing started) when not.
        True at once when the watch already runs."""
        async with self._starting:
            if self._informer is None and not self._stopped:
                self._start_if_served(loop, await self._served())
            return self._informer is not None

    async def _served(self) -> bool:
        self._checked = self._clock()
        try:
            served = await asyncio.to_thread(self._connection.podgroups.served)
        except KubeError as exc:
            logger.warning("PodGroups: %s; their sizes are read one GET at a time", exc)
            return False
        if not served:
            logger.info("no PodGroup CRD (scheduling.x-k8s.io/v1alpha1): PodGroups not watched")
        return served

    def _start_if_served(self, loop: asyncio.AbstractEventLoop, served: bool) -> None:
        if not served:
            return
        # call_soon_threadsafe's signature is wider than the informer's Deliver.
        deliver: Any = loop.call_soon_threadsafe
        self._informer = Informer(
            PODGROUP_PLURAL,
            connection=self._connection,
            convert=podgroup_item,
            sink=_Sink(self._groups),
            deliver=deliver,
            backoff=self._backoff,
            watch_timeout=self._watch_timeout,
        )
        self._informer.start()
        logger.info("watching coscheduling PodGroups")

    @property
    def synced(self) -> bool:
        return self._informer is not None and self._informer.synced

    def get(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The PodGroup as last seen (its spec); None when there is none. Only meaningful
        once :attr:`synced`."""
        return self._groups.get((namespace, name))

    async def stop(self) -> None:
        self._stopped = True
        informer = self._informer
        if informer is None:
            return
        informer.stop()
        deadline = time.monotonic() + STOP_SECONDS
        done = await asyncio.to_thread(informer.join, max(deadline - time.monotonic(), 0.0))
        if not done:
            logger.warning("PodGroup watch: still finishing a call")


class WatchedSizes:
    """A :class:`~tenants.groups.sizes.SizeReader`: PodGroups from ``watch``, everything
    else from ``fallback``."""

    def __init__(
        self, fallback: SizeReader, watch: PodGroupWatch, *, sync_wait: float = SYNC_WAIT_SECONDS
    ) -> None:
        self._fallback = fallback
        self._watch = watch
        self._sync_wait = sync_wait

    async def read(self, ref: SizeRef) -> SizeAnswer:
        if ref.kind != "PodGroup" or ref.api_version != COSCHEDULING_API_VERSION:
            return await self._fallback.read(ref)
        what = f"PodGroup {ref.namespace}/{ref.name}"
        if not await self._watch.ensure_started():
            return SizeAnswer(
                None, f"{what}: the PodGroup CRD ({COSCHEDULING_API_VERSION}) is not installed"
            )
        if not await self._watch.wait_synced(self._sync_wait):
            return SizeAnswer(None, f"{what}: PodGroups are still being listed")
        document = self._watch.get(ref.namespace, ref.name)
        if document is None:
            return SizeAnswer(None, f"{what} was not found")
        size = ref.size_of(document)
        if size is None or size < 1:
            return SizeAnswer(None, f"{what} has no {' or '.join(ref.fields)}")
        return SizeAnswer(size)


__all__ = ["PodGroupWatch", "WatchedPodGroup", "WatchedSizes", "podgroup_item"]
