"""Everything ``tenantgate serve`` runs, wired in one place: :func:`build_runtime`.

The runtime owns the process's state and its background work:

* the config (``--config`` or the embedded example), compiled into a policy (only the policy is
  kept, not the validated config); the file is polled and a changed one swapped in atomically,
  while a broken one keeps the last good policy (every problem logged as
  ``FILE:LINE: FIELD: MESSAGE``, a readiness detail and a metric say so);
* the in-memory ledger, the :class:`~tenants.decisions.PolicyAdmitter` and the
  :class:`~tenants.controller.LedgerController` keeping the ledger equal to the cluster;
* the cluster connection (in-cluster, a kubeconfig, or offline, said loudly) and its watches,
  whose priority classes replace the config's values (a class the config names that the
  cluster lacks is reported in ``/readyz`` and makes tenantgate deny, with a clear message, a pod
  it would give that class: the API server would reject it with a cryptic one);
* readiness (config, cluster; the server adds certs), metrics, ``/status`` with the recent
  denials and releases and the status page drawn from it, and the periodic reservation expiry
  and full recount.

Every ledger change happens on the event-loop thread: admission awaits the ledger store there
and the watch threads hand their events over with ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Final

from starlette.applications import Starlette

import certs
from admission.app import create_app, create_metrics_app
from admission.configreload import ConfigRejected, read_policy
from admission.health import Check, Readiness
from admission.metrics import Metrics
from admission.server import ServeError
from admission.settings import Settings
from admission.status import StatusCollector, StatusSources, queue_route, status_route
from admission.statuspage import statuspage_routes
from admission.version import package_version
from classifier import podview
from classifier.config import PriorityClassSpec
from tenants.config import Policy, PolicyError, global_default_class
from tenants.configfile import ConfigError, load
from tenants.controller import LedgerController, find_drift
from tenants.decisions import PolicyAdmitter
from tenants.kube.backoff import BackoffPolicy
from tenants.kube.cohortclient import CohortStoreCollector, KubeCohortClient
from tenants.kube.cohortstore import CohortLedgerStore
from tenants.kube.connection import RESOURCES, ClusterTarget, Connection, Resource, resolve_target
from tenants.kube.errors import KubeError
from tenants.kube.groupsizes import KubeSizeReader
from tenants.kube.informer import release_free_memory
from tenants.kube.leader import (
    Duty,
    KubeLeaseClient,
    LeaderCollector,
    LeaderDuties,
    LeaderElector,
    LeaseTimings,
)
from tenants.kube.ledgerstore import KubeLedgerClient, KubeLedgerStore, LedgerStoreCollector
from tenants.kube.ledgerwatch import LedgerWatch
from tenants.kube.namespaces import KubeNamespaceReader
from tenants.kube.podgroupwatch import PodGroupWatch, WatchedSizes
from tenants.kube.releaser import KubePodClient, QueueCollector, Releaser, queue_listing
from tenants.kube.sync import ClusterSync, PriorityClassTable
from tenants.ledger import MemoryLedger, cancel, dequeue
from tenants.queue.release import PaceSettings
from tenants.recent import RecentDecisions
from tenants.verdicts import AdmissionInput, Verdict

logger = logging.getLogger(__name__)

DEFAULT_CONFIG: Final = Path(__file__).resolve().parent / "defaults" / "tenantgate.yaml"
_SYNC_POLL_SECONDS: Final = 0.5
_SHARED_RESOURCES: Final[tuple[Resource, ...]] = ("namespaces", "priorityclasses")


# The cyclic GC while serving. CPython's default young-generation threshold (700) makes the
# collector run every dozen review pairs (a pair parses two ~10 KB pods into hundreds of
# containers that refcounting frees, but their allocation still counts) and a full collection
# about every thousand pairs, which walks the whole heap (config, compiled policy, ledger):
# 20 ms with 100 tenants, 80 ms with the ledger of 150,000 pods, ~10% of the review CPU.
# Freezing what exists once the config (and, with a cluster, the ledger) is built moves it out
# of every later collection; 10,000 makes young collections ~15x rarer (a pair leaves a few
# objects behind, so about one per thousand pairs, ~2 ms each: well under the 5 ms p99 budget),
# while unreachable cycles wait for at most 10,000 allocations (a few MB) to be freed.
GC_YOUNG_THRESHOLD: Final = 10_000
_gc_tuned = False


def tune_gc() -> None:
    """Collect once, freeze every object alive now, raise the young threshold (once a process).

    Called as the server starts, after the config is compiled; the ledger built by the first
    cluster sync is frozen later (:meth:`Runtime.startup`). Frozen objects are still freed by
    reference counting: only the cyclic collector stops looking at them.
    """
    global _gc_tuned
    if _gc_tuned:
        return
    _gc_tuned = True
    gc.collect()
    gc.freeze()
    young, middle, oldest = gc.get_threshold()
    gc.set_threshold(max(GC_YOUNG_THRESHOLD, young), middle, oldest)
    logger.debug("gc: %d objects frozen, thresholds %s", gc.get_freeze_count(), gc.get_threshold())


@dataclass(frozen=True, slots=True)
class Timings:
    """How often the background work runs; from :class:`Settings` (flag or ``TENANTGATE_*``)."""

    config_poll_seconds: float = 2.0
    sweep_seconds: float = 5.0
    recount_seconds: float = 300.0
    watch_timeout_seconds: int = 300
    # Leader election of the kubernetes ledger backend (client-go's usual 15 s / 10 s / 2 s).
    lease_duration_seconds: float = 15.0
    lease_renew_deadline_seconds: float = 10.0
    lease_retry_period_seconds: float = 2.0

    def lease_timings(self) -> LeaseTimings:
        try:
            return LeaseTimings(
                lease_duration=self.lease_duration_seconds,
                renew_deadline=self.lease_renew_deadline_seconds,
                retry_period=self.lease_retry_period_seconds,
            )
        except ValueError as exc:
            raise ServeError(f"TENANTGATE_LEASE_*: {exc}") from None

    @classmethod
    def from_settings(cls, settings: Settings) -> Timings:
        """The periods set by flags or ``TENANTGATE_*`` (validated by :class:`Settings`)."""
        return cls(**{item.name: getattr(settings, item.name) for item in fields(cls)})


# --------------------------------------------------------------------------- priority classes


def effective_classes(
    declared: Mapping[str, PriorityClassSpec], live: PriorityClassTable
) -> tuple[dict[str, PriorityClassSpec], frozenset[str]]:
    """The config's priority classes (``declared``) with the cluster's values for them.

    Returns them and the names the cluster does not have (they keep the config's values).
    """
    merged: dict[str, PriorityClassSpec] = {}
    missing: set[str] = set()
    for name, spec in declared.items():
        actual = live.get(name)
        if actual is None:
            missing.add(name)
            merged[name] = spec
            continue
        if (actual.value, actual.preemptionPolicy) != (spec.value, spec.preemptionPolicy):
            logger.info(
                "priority class %s: the cluster's value %d (%s) replaces the config's %d (%s)",
                name,
                actual.value,
                actual.preemptionPolicy,
                spec.value,
                spec.preemptionPolicy,
            )
        merged[name] = spec.model_copy(
            update={"value": actual.value, "preemptionPolicy": actual.preemptionPolicy}
        )
    return merged, frozenset(missing)


def missing_classes_detail(missing: frozenset[str]) -> str:
    return (
        f"priority classes named by the config do not exist in the cluster: "
        f"{', '.join(sorted(missing))} (pods that would get them are denied)"
    )


class ClusterGuard:
    """The admitter as the cluster's state allows it to answer.

    While the first sync is running the ledger does not know the cluster's pods yet, so pods of
    claimed namespaces get a retryable denial rather than an answer that may over-admit. A pod
    the policy would give a priority class the cluster does not have is denied with that
    reason (and its fresh booking cancelled): the API server would refuse it anyway.
    """

    def __init__(
        self,
        inner: PolicyAdmitter,
        *,
        synced: Callable[[], bool],
        namespace_labels: Callable[[str], Mapping[str, str] | None],
    ) -> None:
        self.inner = inner
        self._synced = synced
        self._namespace_labels = namespace_labels
        self.missing_classes: frozenset[str] = frozenset()

    @property
    def policy(self) -> Policy:
        return self.inner.policy

    async def mutate(self, request: AdmissionInput, *, now: float) -> Verdict:
        waiting = self._waiting(request)
        if waiting is not None:
            return waiting
        verdict = await self.inner.mutate(request, now=now)
        if not self.missing_classes or not verdict.allowed or verdict.patched is None:
            return verdict
        written = podview.string(podview.spec(verdict.patched).get("priorityClassName"))
        asked = podview.string(podview.spec(request.object or {}).get("priorityClassName"))
        if written is None or written == asked or written not in self.missing_classes:
            return verdict
        tenant = verdict.audit_annotations.get("tenant")
        reservation = verdict.audit_annotations.get("reservation")
        if tenant and reservation and not request.dry_run:
            await self.inner.ledger.transact(
                tenant,
                lambda ledger: (
                    dequeue(cancel(ledger, reservation_id=reservation), entry_id=reservation),
                    None,
                ),
            )
        tier = verdict.audit_annotations.get("tier", "")
        return Verdict.deny(
            f"priority class {written} (tier {tier} of tenant {tenant}) does not exist in the "
            "cluster; ask the platform team to create it (deploy/webhooks/) or to fix the "
            "tenantgate config",
            cause="priority_class",
        )

    async def validate(self, request: AdmissionInput, *, now: float) -> Verdict:
        waiting = self._waiting(request)
        if waiting is not None:
            return waiting
        return await self.inner.validate(request, now=now)

    def _waiting(self, request: AdmissionInput) -> Verdict | None:
        if self._synced():
            return None
        if request.kind != "Pod" or request.group or request.operation not in ("CREATE", "UPDATE"):
            return None
        if request.operation == "UPDATE" and request.sub_resource != "resize":
            return None
        policy = self.inner.policy
        namespace = request.namespace
        if policy.tenant_for(namespace, self._namespace_labels(namespace)) is None:
            return None
        return Verdict.deny(
            "tenantgate is still counting the cluster's pods (ledger not synced yet); "
            "retry in a few seconds",
            code=503,
            reason="ServiceUnavailable",
            cause="ledger_unavailable",
        )


# --------------------------------------------------------------------------- the runtime


async def recount(controller: LedgerController, *, clock: Callable[[], float]) -> None:
    """One full recount, with the pass over every pod off the event loop.

    The controller's state is copied on the loop, compared with the truth in a thread (150,000
    pods take a fraction of a second there, which admission must not wait for), and only a
    suspect tenant is checked again and repaired on the loop.
    """
    try:
        frozen = controller.freeze(now=clock())
        suspects = await asyncio.to_thread(find_drift, frozen)
        if not suspects:
            controller.mark_recounted(now=frozen.now)
            logger.debug("recount: the ledger matches %d pods", len(frozen.pods))
            return
        controller.recount(now=clock())
    except Exception:
        logger.exception("ledger recount failed")


def _count(problems: int) -> str:
    return f"{problems} problem{'' if problems == 1 else 's'}"


def _fingerprint(path: Path) -> str | None:
    """A digest of the file's content (None when unreadable): ConfigMap updates swap symlinks,
    so content, not mtime, is what tells a change.

    Read in chunks: the whole file every poll (5 MiB at 10,000 tenants) would leave that much
    mapped in each worker thread's malloc arena.
    """
    try:
        with path.open("rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError:
        return None


class Runtime:
    """The running webhook: apps, state and background tasks (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        *,
        config_file: str,
        policy: Policy,
        config_path: Path,
        target: ClusterTarget,
        connection: Connection | None,
        timings: Timings,
        clock: Callable[[], float],
        identity: Identity | None = None,
    ) -> None:
        self.settings = settings
        # Who tenantgate is to the API server: the one user its webhook lets remove the gate.
        self.identity = identity or Identity(settings.gate_owner_identity, source="settings")
        self.timings = timings
        self.target = target
        self.connection = connection
        self._clock = clock
        self._config_path = config_path
        self._watch_config = settings.config is not None
        # The file's policy (the config's priority class values), without the validated
        # config: the cluster's values are compiled into it again from the policy alone.
        self._file = config_file
        self._base = policy
        self._fingerprint = _fingerprint(config_path)
        self._live_classes: PriorityClassTable | None = None
        self._recompile_lock = asyncio.Lock()
        self._recompile_task: asyncio.Task[None] | None = None
        self.config_reload_failures = 0
        self.config_error: str | None = None
        self._restart_lock = threading.Lock()
        self._restarts: dict[tuple[str, str], int] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False
        self.recent = RecentDecisions()
        self.certificate: certs.CertificateInfo | None = None

        policy = self._base
        self.ledger: MemoryLedger | KubeLedgerStore = self._ledger_store(policy, connection)
        self.controller = LedgerController(self.ledger, policy=policy)
        online = connection is not None
        # A pod group's size, when its pods do not carry it: coscheduling PodGroups from a
        # watch, other objects (an Indexed Job's Job, an operator's object) by GET.
        self.sizes = KubeSizeReader(connection.api_client) if connection is not None else None
        # A namespace created a moment before its first pod may not have reached the watch.
        self.namespaces = (
            KubeNamespaceReader(connection.api_client) if connection is not None else None
        )
        self.podgroup_watch: PodGroupWatch | None = None
        sizes: WatchedSizes | None = None
        if connection is not None and self.sizes is not None:
            self.podgroup_watch = PodGroupWatch(
                connection, backoff=BackoffPolicy(), watch_timeout=timings.watch_timeout_seconds
            )
            sizes = WatchedSizes(self.sizes, self.podgroup_watch)
        self.admitter = PolicyAdmitter(
            policy,
            self.ledger,
            namespace_labels=self.controller.namespace_labels if online else None,
            namespace_lookup=self.namespaces,
            gate_owner=self.identity.user,
            sizes=sizes,
            group_members=self.controller.group_members if online else None,
        )
        # Queue mode: releases happen where pods are watched (the lease holder with several
        # replicas); offline nothing can be released.
        self.releaser: Releaser | None = None
        if connection is not None:
            try:
                pace = PaceSettings(
                    base_delay=settings.release_base_delay_seconds,
                    max_delay=settings.release_max_delay_seconds,
                    rate=settings.release_rate,
                    burst=settings.release_burst,
                    max_failures=settings.release_max_failures,
                )
            except ValueError as exc:
                raise ServeError(f"TENANTGATE_RELEASE_*: {exc}") from None
            self.releaser = Releaser(
                self.controller,
                self.ledger,
                KubePodClient(connection.api_client),
                pace=pace,
                unschedulable_after=settings.released_unschedulable_seconds,
                clock=clock,
                recent=self.recent,
            )
        self.sync: ClusterSync | None = None
        if connection is not None:
            self.sync = ClusterSync(
                connection,
                controller=self.controller,
                on_priority_classes=self._priority_classes_changed,
                clock=clock,
                on_restart=self._count_restart,
                backoff=BackoffPolicy(),
                watch_timeout=timings.watch_timeout_seconds,
                # With the kubernetes ledger only the lease holder watches pods (LeaderDuties).
                resources=_SHARED_RESOURCES if self.shared else RESOURCES,
            )
        self.elector: LeaderElector | None = None
        self.duties: LeaderDuties | None = None
        self.ledger_watch: LedgerWatch | None = None
        if isinstance(self.ledger, KubeLedgerStore) and connection is not None:
            # Every replica's /status and usage metrics follow what any replica wrote.
            self.ledger_watch = LedgerWatch(
                connection,
                self.ledger,
                backoff=BackoffPolicy(),
                watch_timeout=timings.watch_timeout_seconds,
                on_restart=self._count_restart,
            )
            self.elector = LeaderElector(
                KubeLeaseClient(connection.api_client, namespace=settings.namespace),
                timings=timings.lease_timings(),
                on_leading=self.ledger.set_leading,
            )
            self.duties = LeaderDuties(
                store=self.ledger,
                controller=self.controller,
                connect=lambda: Connection.open(target),
                sweep_seconds=timings.sweep_seconds,
                recount_seconds=timings.recount_seconds,
                watch_timeout=timings.watch_timeout_seconds,
                clock=clock,
                on_restart=self._count_restart,
                backoff=BackoffPolicy(),
                duties=self._leader_duties(),
            )
        self.guard = ClusterGuard(
            self.admitter, synced=self.synced, namespace_labels=self.controller.namespace_labels
        )

        self.readiness = Readiness()
        self.readiness.mark_ok("config", self._config_detail())
        self.readiness.add_probe("cluster", self._cluster_check)
        if self.elector is not None:
            self.readiness.add_probe("ledger", self._ledger_check)
        self.metrics = Metrics(tenant_of=self.controller.tenant_of)
        self.metrics.watch_readiness(self.readiness)
        sources = StatusSources(
            policy=lambda: self.admitter.policy,
            ledgers=self.ledger.snapshot,
            synced=self.synced,
            mode=target.mode,
            cluster=connection.host if connection is not None else None,
            stats=lambda: self.controller.stats,
            pods=lambda: self.controller.pod_count if online else None,
            config=self._config_status,
            identity=self.identity.as_json,
            queue=self._queue_summary,
            releases=self.releaser.status if self.releaser is not None else dict,
            queue_listing=lambda now, tenant: queue_listing(
                self.controller, now=now, tenant=tenant
            ),
            clock=clock,
            recent=self.recent.to_json,
            certificate=self._certificate_status,
            replica=self._replica_status,
            readiness=lambda: self.readiness.report().to_json(),
            version=package_version(),
        )
        self.metrics.registry.register(
            StatusCollector(
                sources,
                watch_restarts=self._restart_counts,
                config_reload_failures=lambda: self.config_reload_failures,
                config_ok=lambda: self.config_error is None,
            )
        )
        if isinstance(self.ledger, KubeLedgerStore):
            self.metrics.registry.register(LedgerStoreCollector(self.ledger))
        if isinstance(self.ledger, CohortLedgerStore):
            self.metrics.registry.register(CohortStoreCollector(self.ledger))
        if self.elector is not None:
            self.metrics.registry.register(LeaderCollector(self.elector))
        self.metrics.registry.register(QueueCollector(self.controller, self.releaser, clock=clock))
        self.app: Starlette = create_app(
            settings,
            admitter=self.guard,
            readiness=self.readiness,
            metrics=self.metrics,
            clock=clock,
            recent=self.recent,
        )
        self.metrics_app: Starlette = create_metrics_app(
            readiness=self.readiness,
            metrics=self.metrics,
            extra_routes=[status_route(sources), queue_route(sources), *statuspage_routes()],
        )

    # -- state ---------------------------------------------------------------------------

    def _queue_summary(self, tenant: str, now: float) -> Mapping[str, Any]:
        return self.controller.queues.summary(tenant, self.controller.queue_policy(tenant), now=now)

    @property
    def policy(self) -> Policy:
        return self.admitter.policy

    @property
    def config_file(self) -> str:
        """The config file serving (as given, or the embedded default's path)."""
        return self._file

    def certificate_loaded(self, certificate: certs.CertificateInfo) -> None:
        """The server serves ``certificate`` from now on (``serve`` calls this on each load)."""
        self.certificate = certificate
        self.metrics.observe_certificate(not_after=certificate.not_after)

    def _certificate_status(self) -> dict[str, Any] | None:
        served = self.certificate
        if served is None:
            return None
        return {
            "notBefore": served.not_before.timestamp(),
            "notAfter": served.not_after.timestamp(),
            "serial": served.serial_hex,
        }

    def _replica_status(self) -> dict[str, Any]:
        """Leader or follower: only the leader confirms, releases, expires and recounts."""
        elector = self.elector
        if elector is None:
            # No election (one replica, in-memory ledger): this replica does all of it.
            return {"role": "leader", "election": False, "holder": None, "identity": None}
        return {
            "role": "leader" if elector.is_leader else "follower",
            "election": True,
            "holder": elector.holder or None,
            "identity": elector.identity,
        }

    def synced(self) -> bool:
        """Whether the ledger reflects the cluster (always true offline: nothing to sync)."""
        return self.sync is None or self.sync.synced

    @property
    def shared(self) -> bool:
        """Whether the ledger lives in the Kubernetes API, shared with other replicas."""
        return isinstance(self.ledger, KubeLedgerStore)

    @staticmethod
    def _ledger_store(
        policy: Policy, connection: Connection | None
    ) -> MemoryLedger | KubeLedgerStore:
        if policy.ledger_backend != "kubernetes":
            return MemoryLedger()
        if connection is None:
            logger.warning(
                "ledger.backend is kubernetes but no cluster is configured: counting in memory"
            )
            return MemoryLedger()
        logger.info("ledger: TenantLedger objects in %s, shared by every replica", connection.host)
        return CohortLedgerStore(
            KubeLedgerClient(connection.api_client), KubeCohortClient(connection.api_client)
        )

    def _ledger_check(self) -> Check:
        # Never a reason to be unready: admission works on every replica, leading or not.
        elector = self.elector
        if elector is None:
            return Check(ok=True, detail="in memory")
        holder = elector.holder or "nobody yet"
        if elector.is_leader:
            holder = f"{holder} (this replica)"
        return Check(
            ok=True, detail=f"kubernetes: TenantLedger objects; controller lease held by {holder}"
        )

    def _config_detail(self) -> str:
        tenants = len(self._base.tenants)
        source = self._file if self._watch_config else f"embedded {self._file}"
        return f"{source}: {tenants} tenants"

    def _config_status(self) -> dict[str, Any]:
        return {
            "file": str(self._config_path),
            "watched": self._watch_config,
            "tenants": len(self._base.tenants),
            "reloadError": self.config_error,
            "missingPriorityClasses": sorted(self.guard.missing_classes),
            "globalDefaultPriorityClass": self.admitter.policy.global_default,
        }

    def _cluster_check(self) -> Check:
        if self.sync is None:
            return Check(
                ok=True, detail=f"offline: {self.target.source}; ledger counts admissions only"
            )
        ok, detail = self.sync.readiness_detail()
        return Check(ok=ok, detail=f"{detail}; as {self.identity.describe()}")

    def _count_restart(self, resource: str, reason: str) -> None:
        # Called from the watch threads.
        with self._restart_lock:
            key = (resource, reason)
            self._restarts[key] = self._restarts.get(key, 0) + 1

    def _restart_counts(self) -> dict[tuple[str, str], int]:
        with self._restart_lock:
            return dict(self._restarts)

    # -- lifecycle -----------------------------------------------------------------------

    async def startup(self) -> None:
        """Start the background work; returns at once (readiness tells when synced)."""
        if self._started:
            return
        self._started = True
        tune_gc()
        loop = asyncio.get_running_loop()
        if self.sync is not None:
            logger.info(
                "cluster: %s (%s) as %s",
                self.target.source,
                self.sync.connection.host,
                self.identity.describe(),
            )
            self.sync.start(loop)
            self._spawn(self._freeze_when_synced(), "gc-freeze")
        if self.podgroup_watch is not None:
            self._spawn(self._watch_podgroups(loop), "podgroups")
        if self.ledger_watch is not None:
            self.ledger_watch.start(loop)
        elif self.connection is None:
            logger.warning(
                "running OFFLINE: %s (no --kubeconfig, KUBECONFIG or in-cluster service "
                "account); the ledger counts admissions only and releases them after "
                "reservationTTLSeconds",
                self.target.source,
                extra={"mode": "offline"},
            )
        else:
            logger.info(
                "ledger: in memory, rebuilt from the cluster's pods; one replica "
                "(ledger.backend: kubernetes shares it between replicas)",
                extra={"mode": "memory"},
            )
        if self.elector is not None and self.duties is not None:
            # Sweep, recount and the pod watch run on the lease holder only.
            self._spawn(self.elector.run(self.duties.run), "leader-election")
        else:
            self._spawn(self._sweep_loop(), "sweep")
            if self.sync is not None:
                self._spawn(self._recount_loop(), "recount")
            if self.releaser is not None:
                self._spawn(self.releaser.run(), "releaser")
        if self._watch_config:
            self._spawn(self._config_loop(), "config")

    async def shutdown(self) -> None:
        """Stop the background work and the watches."""
        tasks, self._tasks = self._tasks, []
        if self._recompile_task is not None:
            tasks.append(self._recompile_task)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if isinstance(self.ledger, KubeLedgerStore):
            await self.ledger.close()
        if self.releaser is not None:
            self.releaser.close()
        if self.sizes is not None:
            self.sizes.close()
        if self.namespaces is not None:
            self.namespaces.close()
        if self.ledger_watch is not None:
            await self.ledger_watch.stop()
        if self.podgroup_watch is not None:
            await self.podgroup_watch.stop()
        if self.sync is not None:
            await self.sync.stop()
        elif self.connection is not None:
            self.connection.close()

    async def _watch_podgroups(self, loop: asyncio.AbstractEventLoop) -> None:
        # Where the PodGroup CRD is installed; otherwise the first PodGroup asked for looks
        # again (tenants/kube/podgroupwatch.py).
        if self.podgroup_watch is not None:
            await self.podgroup_watch.start(loop)

    def _spawn(self, coroutine: Coroutine[Any, Any, None], name: str) -> None:
        self._tasks.append(asyncio.create_task(coroutine, name=f"tenantgate-{name}"))

    # -- periodic work -------------------------------------------------------------------

    async def _freeze_when_synced(self) -> None:
        # The ledger of every pod the first sync counted lives as long as the process: keep it
        # out of the cyclic collector too (no collection first: that would walk all of it).
        # ClusterSync offers a flag to read, not an event to await.
        while not self.synced():  # noqa: ASYNC110
            await asyncio.sleep(_SYNC_POLL_SECONDS)
        gc.freeze()
        logger.debug("gc: %d objects frozen after the first sync", gc.get_freeze_count())

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self.timings.sweep_seconds)
            try:
                self.controller.sweep(now=self._clock(), listed=self.synced())
            except Exception:
                logger.exception("reservation sweep failed")

    def _leader_duties(self) -> tuple[Duty, ...]:
        """What the lease holder runs besides the controller: releases, cohort repairs."""
        duties: list[Duty] = []
        if self.releaser is not None:
            duties.append(self.releaser.run)
        if isinstance(self.ledger, CohortLedgerStore):
            duties.append(self._cohort_repair_loop)
        return tuple(duties)

    async def _cohort_repair_loop(self) -> None:
        """Lease holder only: after each recount period, the cohort objects follow the
        members' ledgers (tenants.kube.cohortstore.CohortLedgerStore.repair)."""
        store = self.ledger
        while isinstance(store, CohortLedgerStore):
            await asyncio.sleep(self.timings.recount_seconds)
            cohorts = self.controller.policy.cohorts
            if cohorts:
                await store.repair(cohorts)

    async def _recount_loop(self) -> None:
        while True:
            await asyncio.sleep(self.timings.recount_seconds)
            if self.synced():
                await recount(self.controller, clock=self._clock)

    async def _config_loop(self) -> None:
        path = self._config_path
        while True:
            await asyncio.sleep(self.timings.config_poll_seconds)
            fingerprint = await asyncio.to_thread(_fingerprint, path)
            if fingerprint == self._fingerprint:
                continue
            self._fingerprint = fingerprint
            try:
                # Loaded in a child process; only unpickled here, in slices that let
                # reviews run in between (see admission.configreload).
                policy = await read_policy(
                    path,
                    max_bytes=self.settings.max_config_bytes,
                    max_problems=self.settings.max_config_problems,
                )
            except ConfigRejected as exc:
                self._reject_config(exc)
                continue
            except Exception:
                logger.exception("config reload of %s failed", path)
                continue
            previous = self._base.ledger_backend
            self._base = policy
            self.config_error = None
            if policy.ledger_backend != previous:
                logger.warning(
                    "ledger.backend %s takes effect at the next restart (running with %s)",
                    policy.ledger_backend,
                    previous,
                )
            await self._recompile(reason="config reloaded")
            self.readiness.mark_ok("config", self._config_detail())
            # The old policy is freed now: give its memory back to the OS (off the loop).
            await asyncio.to_thread(release_free_memory)

    def _reject_config(self, exc: ConfigRejected) -> None:
        self.config_reload_failures += 1
        for problem in exc.problems:
            logger.error("config rejected: %s", problem)
        if exc.omitted:
            logger.error("config rejected: ... and %d more problems", exc.omitted)
        self.config_error = f"{_count(exc.count)}: {exc}"
        logger.error(
            "config %s rejected (%s); keeping the last good config",
            self._config_path,
            _count(exc.count),
            extra={"problems": exc.count},
        )
        # Still ready: the last good config keeps serving; the detail says what is wrong.
        self.readiness.mark_ok(
            "config", f"{self._config_detail()} (last good); reload rejected: {self.config_error}"
        )

    # -- policy --------------------------------------------------------------------------

    def _priority_classes_changed(self, table: PriorityClassTable) -> None:
        # On the event loop (the watch sink): recompile off the loop, swap on it.
        self._live_classes = table
        if self._recompile_task is None or self._recompile_task.done():
            self._recompile_task = asyncio.get_running_loop().create_task(
                self._recompile(reason="priority classes changed")
            )

    async def _recompile(self, *, reason: str) -> None:
        """Install the current config with the cluster's priority classes, atomically."""
        async with self._recompile_lock:
            while True:
                base, live = self._base, self._live_classes
                policy, missing = await asyncio.to_thread(self._compile, base, live)
                if base is self._base and live is self._live_classes:
                    break  # nothing changed while compiling
            self.admitter.replace_policy(policy)
            self.controller.set_policy(policy, now=self._clock())
            self.guard.missing_classes = missing
            if live is not None:
                if missing:
                    self.readiness.mark_ok("priorityClasses", missing_classes_detail(missing))
                    logger.warning(missing_classes_detail(missing))
                else:
                    self.readiness.mark_ok(
                        "priorityClasses",
                        f"all {len(base.priority_classes)} priority classes of the "
                        "config exist in the cluster",
                    )
            logger.info("policy installed (%s): %d tenants", reason, len(policy.tenants))

    @staticmethod
    def _compile(base: Policy, live: PriorityClassTable | None) -> tuple[Policy, frozenset[str]]:
        """``base`` (the file's policy) with the cluster's priority class values."""
        if live is None:
            return base, frozenset()
        classes, missing = effective_classes(base.priority_classes, live)
        # The Priority plugin writes the cluster's default class, whatever the config says.
        default = global_default_class(live)
        try:
            return base.with_priority_classes(classes).with_global_default(default), missing
        except PolicyError as exc:
            logger.error("the cluster's priority classes do not compile with the config: %s", exc)
            return base.with_global_default(default), missing


@dataclass(frozen=True, slots=True)
class Identity:
    """The user tenantgate acts as, and how that is known."""

    user: str
    # "SelfSubjectReview": the API server said so; "settings": assumed (offline, or unasked).
    source: str
    problem: str | None = None

    def describe(self) -> str:
        if self.source == "SelfSubjectReview":
            return self.user
        why = f": {self.problem}" if self.problem else ""
        return f"{self.user} (assumed, not confirmed by the API server{why})"

    def as_json(self) -> dict[str, Any]:
        return {"user": self.user, "source": self.source, "problem": self.problem}


def resolve_identity(settings: Settings, connection: Connection) -> Identity:
    """Ask the API server who tenantgate is; that user, and only it, removes the gate.

    An explicit ``--gate-owner`` that differs is refused: tenantgate's own webhook would deny
    every release it makes. When the server cannot be asked now (unreachable at startup), the
    configured owner is assumed and the log and ``/readyz`` say so.
    """
    try:
        user = connection.whoami()
    except KubeError as exc:
        assumed = settings.gate_owner_identity
        logger.warning(
            "cannot ask the API server who tenantgate is (%s): assuming %s removes the "
            "scheduling gate",
            exc,
            assumed,
        )
        return Identity(assumed, source="settings", problem=str(exc))
    if settings.gate_owner is not None and settings.gate_owner != user:
        raise ServeError(
            f"--gate-owner {settings.gate_owner} is not who tenantgate is: the API server "
            f"authenticates it as {user}, so its webhook would deny its own releases; drop "
            "--gate-owner (it defaults to that identity) or run with its credentials"
        )
    return Identity(user, source="SelfSubjectReview")


def build_runtime(
    settings: Settings,
    *,
    timings: Timings | None = None,
    clock: Callable[[], float] = time.time,
    environ: Mapping[str, str] | None = None,
) -> Runtime:
    """Load the config, decide where the cluster is, ask it who tenantgate is, and wire
    everything (no other network call yet).

    Raises :class:`~admission.server.ServeError` when the config or the cluster
    configuration cannot be used: a server must not start on a config it cannot read.
    """
    path = settings.config if settings.config is not None else DEFAULT_CONFIG
    try:
        loaded = load(
            path, max_bytes=settings.max_config_bytes, max_problems=settings.max_config_problems
        )
    except ConfigError as exc:
        for problem in exc.problems:
            logger.error("config: %s", problem)
        if exc.omitted:
            logger.error("config: ... and %d more problems", exc.omitted)
        count = len(exc.problems) + exc.omitted
        raise ServeError(f"config {path} is invalid ({_count(count)})") from None
    target = resolve_target(
        kubeconfig=settings.kubeconfig, offline=settings.offline, environ=environ
    )
    connection: Connection | None = None
    identity: Identity | None = None
    if not target.offline:
        try:
            connection = Connection.open(target)
        except KubeError as exc:
            raise ServeError(f"cannot use {target.source}: {exc}") from exc
        identity = resolve_identity(settings, connection)
    runtime = Runtime(
        settings,
        config_file=loaded.file,
        policy=loaded.policy,
        config_path=Path(path),
        target=target,
        connection=connection,
        timings=timings if timings is not None else Timings.from_settings(settings),
        clock=clock,
        identity=identity,
    )
    del loaded  # the validated config: the runtime keeps the compiled policy only
    release_free_memory()
    return runtime


__all__ = [
    "DEFAULT_CONFIG",
    "GC_YOUNG_THRESHOLD",
    "ClusterGuard",
    "Identity",
    "Runtime",
    "Timings",
    "build_runtime",
    "effective_classes",
    "missing_classes_detail",
    "recount",
    "resolve_identity",
    "tune_gc",
]
