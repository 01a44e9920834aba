"""Queue mode: release latency, controller CPU per re-evaluation, admission CPU, memory.

* **Release latency**: tenantgate (in this process, real TLS) on the real control plane
  (testcluster: etcd, kube-apiserver, the scheduler, simulated nodes); one tenant with room for
  ``room`` pods and 1,000 more queued. Each sample deletes one running
  pod and times until a watch shows its successor without the gate. p50 and p99.
* **Re-evaluation CPU**: the release planner on one tenant's queue of 100 to 10,000 pods (three
  priorities, four request sizes), each evaluation releasing the one pod that fits after a
  deletion, then putting it back. Target: flat within 1.5x (no scan of the queue).
* **Admission CPU**: /mutate + /validate of a pod that is admitted against one that is queued
  (behind 100 queued pods), in process.
* **Memory per queued pod**: what the controller's queue and the ledger's entry add per pod
  (tracemalloc, 10,000 pods).
"""

from __future__ import annotations

import asyncio
import copy
import gc
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from classifier.quantities import Quantity
from tenants.config import QueuePolicy
from tenants.configfile import load_text
from tenants.decisions import PolicyAdmitter
from tenants.ledger import MemoryLedger, TenantLedger, book, enqueue
from tenants.queue.line import QueuedPod, TenantQueue
from tenants.queue.release import plan_release
from tenants.quota import build_quota

QUEUE_CONFIG = """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst: {{value: 10, preemptionPolicy: Never}}
  tenant-guaranteed: {{value: 1000}}
profiles: {{general: {{}}}}
reservationTTLSeconds: 600
tenants:
  team-q:
    namespaces: [team-q]
    quota: {{guaranteed: {{cpu: "{room}"}}}}
    overQuota: queue
    queue: {{maxPending: {pending}, aging: {{intervalSeconds: 60, step: 10, maxBoost: 500}}}}
"""

SIZES = ("1", "2", "500m", "250m")
PRIORITIES = (100, 500, 1000)


def _cpu(amount: str) -> dict[str, Quantity]:
    return {"cpu": Quantity.parse(amount), "pods": Quantity.from_int(1)}


def _queue(count: int) -> TenantQueue:
    queue = TenantQueue("t")
    for index in range(count):
        queue.add(
            QueuedPod(
                f"uid-{index}",
                "ns",
                f"p-{index:06d}",
                PRIORITIES[index % len(PRIORITIES)],
                float(index),
                _cpu(SIZES[index % len(SIZES)]),
                f"e-{index}",
            )
        )
    return queue


def reevaluation_curve(points: tuple[int, ...], *, rounds: int = 2000) -> dict[str, Any]:
    """µs of CPU per re-evaluation (plan + the queue updates of one release) per queue size."""
    policy = QueuePolicy(aging_interval=60, aging_step=10, max_boost=500)
    quota = build_quota({"cpu": Quantity.parse("100")})
    result: dict[str, Any] = {}
    for count in points:
        queue = _queue(count)
        # Room for exactly one more 2-cpu pod: a deletion freed it.
        ledger = book(
            TenantLedger("t"),
            reservation_id="running",
            tier="guaranteed",
            amount={"cpu": Quantity.parse("98")},
            now=0,
            ttl=1e9,
        )
        now = float(count + 30)
        gc.collect()
        started = time.process_time()
        released = 0
        for _ in range(rounds):
            plan = plan_release(queue, quota=quota, ledger=ledger, policy=policy, now=now, limit=10)
            for pod in plan.pods:
                queue.remove(pod.uid)
                released += 1
            for pod in plan.pods:
                queue.add(pod)
        elapsed = time.process_time() - started
        result[str(count)] = round(elapsed / rounds * 1e6, 2)
        if not released:
            raise RuntimeError("the re-evaluation benchmark released nothing")
    first, last = result[str(points[0])], result[str(points[-1])]
    result["ratio"] = round(last / first, 2) if first else None
    return result


def memory_per_queued_pod(count: int = 10_000) -> float:
    """Bytes the controller's queue and the ledger's entries hold per queued pod."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    queue = _queue(count)
    ledger = TenantLedger("t")
    for index in range(count):
        ledger = enqueue(ledger, entry_id=f"r-{index:020d}", priority=1000, now=0.0, ttl=None)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    del queue, ledger
    return round(grown / count, 1)


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-q", "labels": {"app": "q"}},
        "spec": {
            "containers": [
                {"name": "a", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
            ]
        },
    }


def admission_cpu(*, pairs: int = 400, waiting: int = 100) -> dict[str, float]:
    """µs per mutate+validate pair: a pod admitted, against one queued behind ``waiting``."""
    from tenants.verdicts import AdmissionInput

    policy = load_text(QUEUE_CONFIG.format(room=1_000_000, pending=1_000_000)).policy
    full = load_text(QUEUE_CONFIG.format(room=1, pending=1_000_000)).policy

    def run(admitter: PolicyAdmitter, start: TenantLedger) -> float:
        store = admitter.ledger
        assert isinstance(store, MemoryLedger)

        async def pair(index: int) -> None:
            pod = _pod(f"p-{index}")
            mutated = await admitter.mutate(
                AdmissionInput(f"u-{index}", "CREATE", "team-q", "", copy.deepcopy(pod)),
                now=1000.0,
            )
            final = mutated.patched or pod
            final["metadata"]["uid"] = f"pod-{index}"
            await admitter.validate(
                AdmissionInput(f"u-{index}", "CREATE", "team-q", final["metadata"]["name"], final),
                now=1000.0,
            )
            # Back to the starting ledger: every pair is measured against the same queue.
            store.update("team-q", lambda _ledger: (start, None))

        async def all_pairs() -> float:
            for index in range(50):
                await pair(-index - 1)
            started = time.process_time()
            for index in range(pairs):
                await pair(index)
            return time.process_time() - started

        return asyncio.run(all_pairs()) / pairs * 1e6

    empty = TenantLedger("team-q")
    admitted = run(PolicyAdmitter(policy, MemoryLedger([empty])), empty)
    ledger = TenantLedger("team-q", guaranteed={"cpu": Quantity.parse("1")})  # the room is full
    for index in range(waiting):
        ledger = enqueue(ledger, entry_id=f"w-{index}", priority=1000, now=0.0, ttl=None)
    queued = run(PolicyAdmitter(full, MemoryLedger([ledger])), ledger)
    return {
        "admitted_us": round(admitted, 1),
        "queued_us": round(queued, 1),
        "ratio": round(queued / admitted, 2) if admitted else 0.0,
    }


def release_latency(*, room: int = 20, waiting: int = 1000, samples: int = 50) -> dict[str, Any]:
    """Deletion of a running pod -> its successor ungated, on the real control plane.

    tenantgate runs in this process with the shipped ServiceAccount's token, straight to
    kube-apiserver (no fault proxy: nothing is injected here, and the proxy would add its own
    hop to every watch event); kube-apiserver calls it through the cluster's balancer.
    """
    from admission.runtime import Timings
    from admission.settings import Settings
    from tests.integration.harness import Tenantgate, installed_cluster, wait_webhooks_active

    with (
        tempfile.TemporaryDirectory(prefix="tenantgate-queue-") as scratch,
        installed_cluster(Path(scratch) / "kube") as (cluster, cert_dir),
    ):
        directory = Path(scratch)
        config_file = directory / "tenantgate.yaml"
        config_file.write_text(QUEUE_CONFIG.format(room=room, pending=waiting + room))
        settings = Settings(
            config=config_file,
            cert_dir=cert_dir,
            host="127.0.0.1",
            port=0,
            metrics_host="127.0.0.1",
            metrics_port=0,
            kubeconfig=cluster.tenantgate_kubeconfig(
                directory / "tenantgate.kubeconfig", through_proxy=False
            ),
            shutdown_grace_seconds=1,
            log_level="warning",
        )
        timings = Timings(sweep_seconds=1, recount_seconds=3600, watch_timeout_seconds=60)
        with Tenantgate(settings, timings=timings) as tenantgate:
            cluster.serve([tenantgate.port])
            tenantgate.wait_ready()
            kubeconfig = cluster.plane.admin_kubeconfig
            wait_webhooks_active(kubeconfig, [tenantgate.metrics_url])
            try:
                return _measure_release(kubeconfig, room=room, waiting=waiting, samples=samples)
            finally:
                cluster.unregister_webhooks()


def _measure_release(kubeconfig: Path, *, room: int, waiting: int, samples: int) -> dict[str, Any]:
    from kubernetes import client

    from tests.integration.harness import api_client, create_namespace

    api = api_client(kubeconfig)
    core: Any = client.CoreV1Api(api)
    create_namespace(core, {"metadata": {"name": "team-q"}})
    for index in range(room + waiting):
        core.create_namespaced_pod("team-q", _pod(f"p-{index:05d}"))

    def gated(name: str) -> bool:
        pod = core.read_namespaced_pod(name, "team-q")
        return bool(pod.spec.scheduling_gates)

    latencies: list[float] = []
    running = [f"p-{index:05d}" for index in range(room)]
    for sample in range(samples):
        successor = f"p-{room + sample:05d}"
        victim = running.pop(0)
        began = time.perf_counter()
        core.delete_namespaced_pod(victim, "team-q", grace_period_seconds=0)
        while gated(successor):
            if time.perf_counter() - began > 30:
                raise RuntimeError(f"{successor} was not released within 30 s")
            time.sleep(0.002)
        latencies.append((time.perf_counter() - began) * 1000)
        running.append(successor)
    api.close()
    ordered = sorted(latencies)
    return {
        "queued": waiting,
        "samples": samples,
        "p50_ms": round(statistics.median(ordered), 1),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 1),
        "max_ms": round(ordered[-1], 1),
    }


def measure(*, quick: bool) -> dict[str, Any]:
    return {
        "reevaluation_us": reevaluation_curve((100, 1_000, 10_000), rounds=500 if quick else 2000),
        "admission": admission_cpu(pairs=150 if quick else 400),
        "memory_bytes_per_queued_pod": memory_per_queued_pod(2_000 if quick else 10_000),
        "release": release_latency(waiting=1000, samples=20 if quick else 100),
    }


__all__ = [
    "admission_cpu",
    "measure",
    "memory_per_queued_pod",
    "reevaluation_curve",
    "release_latency",
]
