"""A ``tenantgate serve`` process holding N tracked pods, for its memory at rest.

``python -m bench.rest --config FILE --pods N`` builds the runtime exactly as ``tenantgate
serve`` does (:func:`admission.runtime.build_runtime`, config file included), hands it N stored
pods the way the cluster sync does on its first list (pages parsed, :func:`pod_facts`, then
:meth:`LedgerController.replace_pods` and the memory freed given back to the OS), and serves
until SIGTERM. Offline, ``tenantgate serve`` cannot learn pods from a cluster; this is the only
difference. Settings come from ``TENANTGATE_*`` (ports, cert dir), as for the real command.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
from pathlib import Path

from admission.commands.serve import serve_runtime
from admission.logs import configure_logging
from admission.runtime import build_runtime
from admission.settings import Settings
from bench.configgen import GeneratedPolicy
from bench.rebuild import Timer, pod_pages, read_pods
from bench.stack import settle
from bench.workload import build_workload
from tenants.kube.informer import release_free_memory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.rest", description=__doc__)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--pods", type=int, required=True)
    parser.add_argument("--pairs", type=int, default=200, help="distinct pods to copy from")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    settings = Settings(config=args.config, offline=True)
    configure_logging(settings.log_format, settings.log_level)
    runtime = build_runtime(settings)
    policy = runtime.policy
    rules = len(policy.classifier.config.rules)
    generated = GeneratedPolicy(policy, {}, len(policy.tenants), rules)
    workload = build_workload(generated, pairs=args.pairs, seed=args.seed)
    timer = Timer()
    facts = read_pods(pod_pages(workload, generated, pods=args.pods, run=args.seed), timer=timer)
    timer.close()
    settle(runtime.controller.replace_pods(facts, now=time.time(), initial=True))
    del facts, workload
    gc.collect()
    release_free_memory()  # as the cluster sync does after handing over a pod list
    asyncio.run(serve_runtime(settings, runtime))
    return 0


if __name__ == "__main__":
    sys.exit(main())
