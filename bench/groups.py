"""Pod groups: admission CPU of a member against a plain pod, and booking + releasing a group.

In process with the memory ledger, as the queue's admission figures are measured:

* **Admission CPU**: /mutate + /validate of a group's member (``tenantgate.io/pod-group``
  labels, a group that never completes) against the same pod without the labels. Target:
  within 1.5x.
* **Group release**: 64 gated members of one complete group in the controller; the time from
  asking the releaser to evaluate the tenant to every member's gate removal returned: the
  plan, the one ledger change that books all 64, and 64 gate removals through a
  :class:`PodClient` that records them (no API server: the cluster tests cover the PATCH).
  Target: p99 under 1 s.
"""

from __future__ import annotations

import asyncio
import copy
import statistics
import time
from typing import Any

from tenants.config import TenantPolicy
from tenants.configfile import load_text
from tenants.controller import LedgerController, pod_facts
from tenants.decisions import PolicyAdmitter
from tenants.kube.releaser import PodEvent, Releaser
from tenants.ledger import MemoryLedger, Tier
from tenants.queue.line import QueuedPod, TenantQueue
from tenants.verdicts import AdmissionInput

CONFIG = """\
apiVersion: tenantgate.io/v1alpha1
kind: TenantgateConfig
priorityClasses:
  tenant-burst: {value: 10, preemptionPolicy: Never}
  tenant-guaranteed: {value: 1000}
profiles: {general: {}}
reservationTTLSeconds: 600
tenants:
  team-q:
    namespaces: [team-q]
    quota: {guaranteed: {cpu: "1000000"}}
    overQuota: queue
    queue: {maxPending: 1000000}
"""


def _pod(name: str, *, group: str | None = None, size: int = 100_000) -> dict[str, Any]:
    labels = {"app": "q"}
    if group is not None:
        labels["tenantgate.io/pod-group"] = group
        labels["tenantgate.io/pod-group-size"] = str(size)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-q", "labels": labels},
        "spec": {
            "containers": [
                {"name": "a", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
            ]
        },
    }


def admission_cpu(*, pairs: int = 400, rounds: int = 5) -> dict[str, float]:
    """µs per mutate+validate pair: a plain pod, against a member of a group.

    Rounds alternate between the two, each on a fresh admitter and ledger; each figure is the
    median of its rounds, so that a neighbour's burst on a shared machine moves both alike.
    """
    policy = load_text(CONFIG).policy

    def run(group: str | None) -> float:
        admitter = PolicyAdmitter(policy, MemoryLedger())

        async def pair(index: int) -> None:
            pod = _pod(f"p-{index}", group=group)
            mutated = await admitter.mutate(
                AdmissionInput(f"u-{index}", "CREATE", "team-q", "", copy.deepcopy(pod)),
                now=1000.0,
            )
            final = mutated.patched or pod
            final["metadata"]["uid"] = f"pod-{index}"
            verdict = await admitter.validate(
                AdmissionInput(f"u-{index}", "CREATE", "team-q", final["metadata"]["name"], final),
                now=1000.0,
            )
            if not verdict.allowed:
                raise AssertionError(verdict.message)

        async def all_pairs() -> float:
            for index in range(50):
                await pair(-index - 1)
            started = time.process_time()
            for index in range(pairs):
                await pair(index)
            return time.process_time() - started

        return asyncio.run(all_pairs()) / pairs * 1e6

    plain_rounds: list[float] = []
    member_rounds: list[float] = []
    for _ in range(rounds):
        plain_rounds.append(run(None))
        member_rounds.append(run("train"))
    plain = statistics.median(plain_rounds)
    member = statistics.median(member_rounds)
    return {
        "plain_us": round(plain, 1),
        "member_us": round(member, 1),
        "ratio": round(member / plain, 2) if plain else 0.0,
        "rounds": rounds,
        "pairs": pairs,
    }


class RecordingPods:
    """A :class:`tenants.kube.releaser.PodClient` that records gate removals (no API server)."""

    def __init__(self) -> None:
        self.ungated: list[str] = []

    def ungate(self, pod: QueuedPod, *, tier: Tier, borrowed_from: str | None = None) -> None:
        self.ungated.append(pod.uid)

    def gated(self, pod: QueuedPod) -> bool | None:
        return pod.uid not in self.ungated

    def record(self, event: PodEvent, *, now: float) -> None:
        return None


def _member_json(group: str, index: int, size: int) -> dict[str, Any]:
    body = _pod(f"{group}-{index}", group=group, size=size)
    meta = body["metadata"]
    meta.update(
        uid=f"{group}-uid-{index}",
        resourceVersion=str(index + 1),
        creationTimestamp="2026-01-01T00:00:00Z",
        annotations={
            "tenantgate.io/group": f"labels/{group}",
            "tenantgate.io/group-size": str(size),
        },
    )
    body["spec"]["schedulingGates"] = [{"name": "tenantgate.io/quota"}]
    body["spec"]["priority"] = 1000
    return body


async def _timed(releaser: Releaser, queue: TenantQueue, known: TenantPolicy) -> float:
    started = time.perf_counter()
    await releaser.groups.evaluate("team-q", queue, known)
    return time.perf_counter() - started


def group_release(*, members: int = 64, samples: int = 50) -> dict[str, Any]:
    """ms from asking for a release to every member's gate removal returned (p50, p99)."""
    policy = load_text(CONFIG).policy
    known = policy.tenants["team-q"]
    times: list[float] = []
    for sample in range(samples):
        store = MemoryLedger()
        controller = LedgerController(store, policy=policy)
        for index in range(members):
            facts = pod_facts(_member_json(f"g{sample}", index, members))
            assert facts is not None
            controller.apply_pod(facts, now=1000.0)
        pods = RecordingPods()
        releaser = Releaser(controller, store, pods, clock=lambda: 1000.0)
        queue = controller.queues.queues["team-q"]

        elapsed = asyncio.run(_timed(releaser, queue, known))
        releaser.close()
        if len(pods.ungated) != members:
            raise AssertionError(f"{len(pods.ungated)} of {members} members released")
        booked = store.get("team-q").guaranteed["cpu"]
        if str(booked) != str(members):
            raise AssertionError(f"booked cpu={booked}, not {members}")
        times.append(elapsed * 1000)
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {
        "members": members,
        "samples": samples,
        "p50_ms": round(statistics.median(ordered), 2),
        "p99_ms": round(p99, 2),
    }


def measure(*, quick: bool) -> dict[str, Any]:
    """The admission figures and the release figures; ``quick`` takes fewer samples."""
    return {
        "admission": admission_cpu(pairs=150 if quick else 400, rounds=3 if quick else 5),
        "release": group_release(samples=20 if quick else 100),
    }


if __name__ == "__main__":
    import json

    print(json.dumps(measure(quick=False), indent=2))
