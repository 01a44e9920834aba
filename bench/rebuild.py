"""Ledger rebuild from N stored pods, in its own process (``python -m bench.rebuild``).

The path is the server's first pod list: pages of 500 pods as the API server sends them (JSON),
parsed as the product parses them (:func:`tenants.kube.connection.decode_list`: msgspec against
the slim pod schema), each pod read by :func:`tenants.controller.pod_facts` (with the amount
interner the cluster sync uses), then :meth:`LedgerController.replace_pods` with
``initial=True`` and the memory it freed given back to the OS, as the sync does. Building the
page bytes is not timed; parsing, reading and rebuilding are.
Peak memory is the process's ``VmHWM``; it includes what parsing a page takes, as in the server.
The pods are spread evenly over every namespace of every tenant.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import orjson

from bench import procstat
from bench.configgen import GeneratedPolicy, generated_policy
from bench.stack import settle
from bench.workload import Workload, build_workload, pair_ids
from tenants.controller import AmountInterner, LedgerController, PodFacts, pod_facts
from tenants.kube.connection import decode_list
from tenants.kube.informer import gc_paused, release_free_memory
from tenants.ledger import MemoryLedger

PAGE_SIZE = 500


def pod_pages(
    workload: Workload, generated: GeneratedPolicy, *, pods: int, run: int
) -> Iterator[bytes]:
    """``pods`` stored pods as PodList pages of :data:`PAGE_SIZE`, over every namespace."""
    namespaces = generated.namespaces()
    pairs = workload.pairs
    items: list[bytes] = []
    for index in range(pods):
        tenant, namespace = namespaces[index % len(namespaces)]
        items.append(
            pairs[index % len(pairs)].stored_pod(
                pair_ids(run, index),
                resource_version=100_000 + index,
                namespace=namespace,
                tenant=tenant,
            )
        )
        if len(items) == PAGE_SIZE or index == pods - 1:
            yield (
                b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"'
                + str(100_000 + pods).encode()
                + b'"},"items":['
                + b",".join(items)
                + b"]}"
            )
            items = []


class Timer:
    """Wall and CPU seconds per step, and the time the cyclic garbage collector took."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.gc_seconds = 0.0
        self._gc_started = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        now = time.perf_counter()
        if phase == "start":
            self._gc_started = now
        else:
            self.gc_seconds += now - self._gc_started

    def add(self, step: str, wall: float, cpu: float) -> None:
        self.wall[step] = self.wall.get(step, 0.0) + wall
        self.cpu[step] = self.cpu.get(step, 0.0) + cpu

    def close(self) -> None:
        gc.callbacks.remove(self._on_gc)


def read_pods(pages: Iterator[bytes], *, timer: Timer) -> list[PodFacts]:
    """Parse each page and read its pods' facts, as the informer does (timed into ``timer``)."""
    interner = AmountInterner()
    facts: list[PodFacts] = []
    wall, cpu = time.perf_counter, time.thread_time
    for page in pages:
        # As Informer._list: each page is parsed, read and freed with the collector paused.
        with gc_paused():
            started, started_cpu = wall(), cpu()
            document = decode_list("pods", page)
            parsed, parsed_cpu = wall(), cpu()
            for item in document["items"]:
                found = pod_facts(item, intern=interner)
                if found is not None:
                    facts.append(found)
            del document
            timer.add("parse", parsed - started, parsed_cpu - started_cpu)
            timer.add("facts", wall() - parsed, cpu() - parsed_cpu)
    started, started_cpu = wall(), cpu()
    release_free_memory()  # as Informer._list does after the last page
    timer.add("facts", wall() - started, cpu() - started_cpu)
    return facts


def rebuild(*, tenants: int, pods: int, pairs: int, seed: int) -> dict[str, Any]:
    generated = generated_policy(tenants=tenants)
    workload = build_workload(generated, pairs=pairs, seed=seed)
    gc.collect()
    rss_before = procstat.memory_kib(os.getpid(), "VmRSS")
    timer = Timer()
    facts = read_pods(pod_pages(workload, generated, pods=pods, run=seed), timer=timer)
    store = MemoryLedger()
    controller = LedgerController(store, policy=generated.policy)
    started, started_cpu = time.perf_counter(), time.thread_time()
    settle(controller.replace_pods(facts, now=time.time(), initial=True))
    release_free_memory()  # as the cluster sync does after handing over a pod list
    timer.add("rebuild", time.perf_counter() - started, time.thread_time() - started_cpu)
    timer.close()
    del facts
    gc.collect()
    charged = sum(len(ledger.charges) for ledger in store.snapshot().values())
    return {
        "pods": pods,
        "tenants": tenants,
        "charged": charged,
        "seconds": round(sum(timer.wall.values()), 3),
        "cpu_seconds": round(sum(timer.cpu.values()), 3),
        "gc_seconds": round(timer.gc_seconds, 3),
        **{f"{step}_seconds": round(value, 3) for step, value in timer.wall.items()},
        **{f"{step}_cpu_seconds": round(value, 3) for step, value in timer.cpu.items()},
        "rss_before_mib": round(rss_before / 1024, 1),
        "peak_rss_mib": round(procstat.memory_kib(os.getpid(), "VmHWM") / 1024, 1),
        "rss_after_mib": round(procstat.memory_kib(os.getpid(), "VmRSS") / 1024, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rebuild", description=__doc__)
    parser.add_argument("--tenants", type=int, default=10_000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--pairs", type=int, default=200, help="distinct pods to copy from")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    result = rebuild(tenants=args.tenants, pods=args.pods, pairs=args.pairs, seed=args.seed)
    sys.stdout.write(orjson.dumps(result).decode() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
