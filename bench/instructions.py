"""``python -m bench.instructions``: instructions per mutate+validate pair, counted by callgrind.

The core figure is CPU time, and on a shared host the speed of the same code moves by a third
within minutes, which hides a change of a few percent. The number of instructions the
interpreter executes for the same code and pods does not move: this counts it under
``valgrind --tool=callgrind`` for the core phase's pairs (the same config, workload and seed),
so two commits can be compared exactly (the hash seed is fixed, so a count repeats to the
instruction). It is a comparison tool, not a target: instructions are
not time (a cache miss costs more than an addition).

The child process builds the runtime and the workload, sends every pod of the workload once to
warm the caches, renders the measured pairs' bodies, then sends them through
:class:`bench.stack.Pipeline` inside one ``functools.reduce`` call. Callgrind collects only
while that C function runs (``--toggle-collect``), so the count is the pairs' alone: the setup,
the interpreter's start and the rendering are left out. It needs an interpreter whose symbols
are not stripped (a build from source, such as pyenv's, keeps them).
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from typing import Final

from bench.cohorts import with_cohorts
from bench.configgen import compile_generated, generate_config
from bench.core import Point, next_run
from bench.stack import Pipeline, memory_ledger, offline_runtime
from bench.workload import NOW, build_workload, pair_ids, policy_sources

# The C function the measured loop runs in (Modules/_functoolsmodule.c).
TOGGLE: Final = "functools_reduce"
_COLLECTED = re.compile(r"^==\d+== Collected : (\d+)$", re.MULTILINE)


class CountError(RuntimeError):
    """The count could not be taken (no valgrind, a failed child, a stripped interpreter)."""


def collected(valgrind_output: str) -> int:
    """The instruction count callgrind printed at exit."""
    found = _COLLECTED.search(valgrind_output)
    if found is None:
        raise CountError("callgrind printed no count: " + valgrind_output.strip()[-300:])
    return int(found.group(1))


def child(
    *, pairs: int, tenants: int, workload_pairs: int, seed: int, cohorts: bool = False
) -> None:
    """Send ``pairs`` pairs inside one ``functools.reduce`` call, after a warm-up pass.

    ``cohorts``: every tenant in the cohorts phase's trees (:func:`bench.cohorts.with_cohorts`).
    """
    document = generate_config(tenants=tenants)
    generated = compile_generated(with_cohorts(document) if cohorts else document)
    sources = policy_sources(generated)
    workload = build_workload(generated, pairs=workload_pairs, seed=seed, sources=sources)
    runtime = offline_runtime(generated)
    point = Point("instructions", Pipeline(runtime.guard), workload, memory_ledger(runtime), 30.0)
    point.run_pairs(len(workload), now=NOW, record=False)
    point.expire(now=NOW)
    pipeline, templates, run = point.pipeline, workload.pairs, next_run()
    bodies = [
        templates[index % len(templates)].bodies(pair_ids(run, index)) for index in range(pairs)
    ]

    def send(failures: int, body: tuple[bytes, bytes]) -> int:
        _, mutated = pipeline.mutate(body[0], now=NOW)
        _, validated = pipeline.validate(body[1], now=NOW)
        return failures + (not mutated.allowed) + (not validated.allowed)

    failures = functools.reduce(send, bodies, 0)
    if failures:
        raise CountError(f"{failures} of {2 * pairs} reviews were denied")


def count(
    *,
    pairs: int,
    tenants: int,
    workload_pairs: int,
    seed: int,
    cohorts: bool = False,
    python: str = sys.executable,
) -> int:
    """Instructions per pair, from a child process run under callgrind."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise CountError("valgrind is not installed (Debian: apt-get install valgrind)")
    command = [
        valgrind,
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        "--collect-atstart=no",
        f"--toggle-collect={TOGGLE}",
        python,
        "-m",
        "bench.instructions",
        "--child",
        f"--pairs={pairs}",
        f"--tenants={tenants}",
        f"--workload-pairs={workload_pairs}",
        f"--seed={seed}",
        *(["--cohorts"] if cohorts else []),
    ]
    # A fixed hash seed: string hashes, and so dictionary and set layouts, repeat between runs.
    environment = {**os.environ, "PYTHONHASHSEED": "0"}
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=environment)
    if done.returncode != 0:
        raise CountError(f"the counted child failed ({done.returncode}): {done.stderr[-2000:]}")
    total = collected(done.stderr)
    if total == 0:
        raise CountError(f"nothing was counted: {python} has no symbol {TOGGLE} (stripped?)")
    return round(total / pairs)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__)
    parser.add_argument("--pairs", type=int, default=400, help="pairs counted (400)")
    parser.add_argument("--tenants", type=int, default=100, help="tenants of the config (100)")
    parser.add_argument("--workload-pairs", type=int, default=400, help="distinct pods (400)")
    parser.add_argument("--seed", type=int, default=20251121)
    parser.add_argument(
        "--cohorts",
        action="store_true",
        help="every tenant in a cohort, as in the cohorts phase (with --tenants 1000)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = {
        "pairs": args.pairs,
        "tenants": args.tenants,
        "workload_pairs": args.workload_pairs,
        "seed": args.seed,
        "cohorts": args.cohorts,
    }
    try:
        if args.child:
            child(**sizes)
            return 0
        print(
            f"counting {args.pairs} pairs under callgrind (a few minutes)...",
            file=sys.stderr,
            flush=True,
        )
        print(f"instructions per mutate+validate pair: {count(**sizes):,}")
    except CountError as exc:
        print(f"bench.instructions: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
