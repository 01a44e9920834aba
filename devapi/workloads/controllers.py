"""Runs the simulated kube-controller-manager (ReplicaSet, Deployment, Job, CronJob
controllers and the garbage collector) and, when asked, the simulated scheduler and kubelet,
on the test API server's event loop.

Each controller has a rate-limited work queue of ``(namespace, name)`` keys fed by the store's
changes, as informers feed the real ones: a change to an object enqueues it, a change to an
object it controls (by controller owner reference) enqueues the owner. A sync that fails is
retried with the queue's rate limiter; one that succeeds forgets the key's failures and may
ask to run again after some seconds. The garbage collector (``devapi.workloads.gc``) runs
every half second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from devapi.errors import APIError
from devapi.registry import Registry
from devapi.resources import PODS, ResourceType
from devapi.store import Event
from devapi.types import JSONObject
from devapi.workloads.cronjob import CronJobController
from devapi.workloads.deployment import DeploymentController
from devapi.workloads.gc import GarbageCollector, deletion_finalizers
from devapi.workloads.job import JobController
from devapi.workloads.kinds import CRON_JOBS, DEPLOYMENTS, JOBS, REPLICA_SETS
from devapi.workloads.kubelet import Kubelet
from devapi.workloads.podcontrol import ControllerClient
from devapi.workloads.replicaset import ReplicaSetController, SyncFailed
from devapi.workloads.workqueue import (
    CONTROLLER_BACKOFF,
    JOB_API_BACKOFF,
    JOB_POD_FAILURE_BACKOFF,
    Backoff,
    ItemExponentialFailureRateLimiter,
    WorkQueue,
    controller_rate_limiter,
)

logger = logging.getLogger(__name__)

DEFAULT_RUN_SECONDS = 3.0
GC_INTERVAL = 0.5
CRON_INTERVAL = 0.5


@dataclass(frozen=True)
class WorkloadSettings:
    """How the simulated controllers behave; the defaults are the real ones'."""

    run_pods: bool = False  # schedule and run pods on a simulated node
    run_seconds: float = DEFAULT_RUN_SECONDS  # how long a Job's pod runs before it succeeds
    controller_backoff: Backoff = CONTROLLER_BACKOFF
    job_api_backoff: Backoff = JOB_API_BACKOFF
    job_pod_failure_backoff: Backoff = JOB_POD_FAILURE_BACKOFF
    clock: Callable[[], float] = field(default=time.time, compare=False)


class _Controller(Protocol):
    name: str

    async def sync(self, namespace: str, name: str) -> float | None: ...


@dataclass
class _Loop:
    """One controller, its queue, the kind it manages and the kinds it owns."""

    controller: _Controller
    queue: WorkQueue
    primary: ResourceType
    owned: tuple[ResourceType, ...] = ()


def _namespace_name(obj: JSONObject) -> tuple[str, str]:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


class WorkloadControllers:
    """The controllers of one test API server."""

    def __init__(self, registry: Registry, settings: WorkloadSettings) -> None:
        self.registry = registry
        self.settings = settings

        def client(name: str) -> ControllerClient:
            return ControllerClient(registry, name, clock=settings.clock)

        def queue(backoff: Backoff) -> WorkQueue:
            return WorkQueue(controller_rate_limiter(backoff))

        self._loops = [
            _Loop(
                ReplicaSetController(client("replicaset-controller")),
                queue(settings.controller_backoff),
                REPLICA_SETS,
                (PODS,),
            ),
            _Loop(
                DeploymentController(client("deployment-controller")),
                queue(settings.controller_backoff),
                DEPLOYMENTS,
                (REPLICA_SETS,),
            ),
            _Loop(
                JobController(
                    client("job-controller"),
                    pod_failure_backoff=settings.job_pod_failure_backoff,
                ),
                WorkQueue(
                    ItemExponentialFailureRateLimiter(
                        settings.job_api_backoff.base, settings.job_api_backoff.maximum
                    )
                ),
                JOBS,
                (PODS,),
            ),
            _Loop(
                CronJobController(client("cronjob-controller")),
                queue(settings.controller_backoff),
                CRON_JOBS,
                (JOBS,),
            ),
        ]
        if settings.run_pods:
            self._loops.append(
                _Loop(
                    Kubelet(client("kubelet"), run_seconds=settings.run_seconds),
                    queue(settings.controller_backoff),
                    PODS,
                )
            )
        self._gc = GarbageCollector(client("generic-garbage-collector"), registry.store)
        registry.deletion_finalizers = deletion_finalizers

    async def run(self) -> None:
        store = self.registry.store
        event_loop = asyncio.get_running_loop()

        def hand_over(event: Event) -> None:
            # RuntimeError: the loop is closed, the server is stopping.
            with contextlib.suppress(RuntimeError):
                event_loop.call_soon_threadsafe(self._route, event)

        stop_listening = store.listen(hand_over)
        for loop in self._loops:
            for obj in store.scan(loop.primary.key, lambda _: True, copy=False):
                loop.queue.add(_namespace_name(obj))
        tasks = [asyncio.create_task(self._work(loop)) for loop in self._loops]
        tasks += [asyncio.create_task(self._collect_garbage())]
        tasks += [asyncio.create_task(self._resync(CRON_JOBS, CRON_INTERVAL))]
        try:
            await asyncio.gather(*tasks)
        finally:
            stop_listening()
            for task in tasks:
                task.cancel()
            for loop in self._loops:
                loop.queue.close()

    def _route(self, event: Event) -> None:
        for loop in self._loops:
            if event.key == loop.primary.key:
                loop.queue.add((event.namespace, event.name))
            if any(event.key == owned.key for owned in loop.owned):
                for ref in (event.object.get("metadata") or {}).get("ownerReferences") or []:
                    if (
                        isinstance(ref, dict)
                        and ref.get("controller") is True
                        and ref.get("kind") == loop.primary.kind
                    ):
                        loop.queue.add((event.namespace, str(ref.get("name"))))

    async def _work(self, loop: _Loop) -> None:
        while True:
            key = await loop.queue.get()
            namespace, name = key
            try:
                again = await loop.controller.sync(namespace, name)
            except SyncFailed as err:
                logger.info("%s: %s/%s: %s", loop.controller.name, namespace, name, err)
                loop.queue.add_rate_limited(key)
            except APIError as err:
                logger.warning("%s: %s/%s: %s", loop.controller.name, namespace, name, err.message)
                loop.queue.add_rate_limited(key)
            except Exception:  # a controller must never die; log and retry
                logger.exception("%s: sync of %s/%s failed", loop.controller.name, namespace, name)
                loop.queue.add_rate_limited(key)
            else:
                loop.queue.forget(key)
                if again is not None:
                    loop.queue.add_after(key, again)
            finally:
                loop.queue.done(key)

    async def _resync(self, rt: ResourceType, interval: float) -> None:
        """Time-driven controllers look again now and then (their clock may be a test's)."""
        loop = next(loop for loop in self._loops if loop.primary.key == rt.key)
        while True:
            await asyncio.sleep(interval)
            for obj in self.registry.store.scan(rt.key, lambda _: True, copy=False):
                loop.queue.add(_namespace_name(obj))

    async def _collect_garbage(self) -> None:
        while True:
            await asyncio.sleep(GC_INTERVAL)
            try:
                await self._gc.collect_once()
            except Exception:  # the collector must never die
                logger.exception("garbage collection failed")
