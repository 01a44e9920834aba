"""Reading a changed config file while serving: checked in a child process, bounded in size and
in the problems reported, then loaded.

Parsing and validating a config is CPU-bound and, for a large file, mostly done in C and Rust
calls that hold the GIL for seconds: in a thread of the serving process it stalls the event loop
(a broken 5 MiB config, 10,000 tenants: 34 s of work, the loop stalled up to 2.6 s). A child
process checks the file first, so a broken or oversized file never costs the serving process
anything: it only receives the first ``max_problems`` problems and a count of the others. A
file that checks out is then loaded in a thread (the compiled policy does not survive pickling:
it keys rendered templates by object identity), as before. A file over ``max_bytes`` is refused
unread.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from tenants.config import Policy
from tenants.configfile import ConfigError, load
from tenants.kube.informer import release_free_memory

# A fresh interpreter: forking a process that runs watch threads is unsafe.
_CONTEXT = multiprocessing.get_context("spawn")


class ConfigRejected(Exception):
    """The file is not usable: its first problems (``FILE:LINE: FIELD: MESSAGE``) and how many
    more were found."""

    def __init__(self, problems: tuple[str, ...], omitted: int = 0) -> None:
        super().__init__(problems, omitted)  # the arguments: it is pickled back from the child
        self.problems = problems
        self.omitted = omitted

    def __str__(self) -> str:
        more = f" (and {self.omitted} more)" if self.omitted else ""
        return f"{self.problems[0] if self.problems else 'invalid config'}{more}"

    @property
    def count(self) -> int:
        return len(self.problems) + self.omitted


def check_config(path: str, max_bytes: int, max_problems: int) -> ConfigRejected | None:
    """Why the file at ``path`` is not usable, or None when it is (run in the child process)."""
    try:
        load(path, max_bytes=max_bytes, max_problems=max_problems)
    except ConfigError as exc:
        return ConfigRejected(tuple(str(problem) for problem in exc.problems), exc.omitted)
    return None


def load_policy_limited(path: str, max_bytes: int, max_problems: int) -> Policy | ConfigRejected:
    """The compiled policy of ``path``, or why not."""
    try:
        return load(path, max_bytes=max_bytes, max_problems=max_problems).policy
    except ConfigError as exc:
        return ConfigRejected(tuple(str(problem) for problem in exc.problems), exc.omitted)
    finally:
        # Validating allocates many times what the policy keeps: give it back to the OS.
        release_free_memory()


async def read_policy(path: Path, *, max_bytes: int, max_problems: int) -> Policy:
    """The compiled policy of ``path``, checked in a child process first; raises
    :class:`ConfigRejected`."""
    loop = asyncio.get_running_loop()
    pool = ProcessPoolExecutor(max_workers=1, mp_context=_CONTEXT)
    try:
        rejected = await loop.run_in_executor(
            pool, check_config, str(path), max_bytes, max_problems
        )
    finally:
        # Not waiting: the child exits by itself once it has answered.
        pool.shutdown(wait=False)
    if rejected is not None:
        raise rejected
    # The file may have changed since: this load checks it again.
    outcome = await asyncio.to_thread(load_policy_limited, str(path), max_bytes, max_problems)
    if isinstance(outcome, ConfigRejected):
        raise outcome
    return outcome
