"""Reading a changed config file while serving: read, validated and compiled in a child process,
bounded in size and in the problems reported; the compiled policy comes back in slices.

Parsing, validating and compiling a config is CPU-bound and, for a large file, mostly done in C
and Rust calls that hold the GIL for a second or more at a time: in a thread of the serving
process it stalls the event loop (a 10,000-tenant config: about 5 s of work, the loop stalled
for about 1 s at a time). So all of it runs in a child process, a fresh interpreter running
this module:

* a file over ``max_bytes`` is refused unread; a broken file comes back as its first
  ``max_problems`` problems and a count of the others (one JSON line);
* a good file comes back as a JSON line, then its compiled :class:`~tenants.config.Policy`
  as a stream of pickles sharing one memo (:func:`write_policy`): the policy without its
  tenants, then one pickle per tenant, then the namespace index in batches. Objects the
  tenants share (classifiers, quotas, class sets) are written once and stay shared.

The serving process only unpickles the stream (:func:`read_policy_stream`), a few milliseconds
of work at a time, yielding to the event loop between slices, so reviews keep being answered
however large the config. The stream comes from this module's own child over a pipe, never
from a file: unpickling it trusts nothing an outsider wrote (the config's strings are
pickled as data). A child that dies (out of memory, say) or writes a broken stream refuses the
file; the caller keeps serving its last good policy.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import pickle
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import IO, Any, Final

from tenants.config import Policy, TenantPolicy
from tenants.configfile import ConfigError, load

# The longest the serving process unpickles before it lets the event loop run.
SLICE_SECONDS: Final = 0.005
# How much lower than the serving process's the child's CPU priority is (nice(2) increment).
CHILD_NICENESS: Final = 10
# Namespace index entries per pickle (each is a name and a reference to a tenant).
_NAMESPACE_BATCH: Final = 1000


class ConfigRejected(Exception):
    """The file is not usable: its first problems (``FILE:LINE: FIELD: MESSAGE``) and how many
    more were found."""

    def __init__(self, problems: tuple[str, ...], omitted: int = 0) -> None:
        super().__init__(problems, omitted)
        self.problems = problems
        self.omitted = omitted

    def __str__(self) -> str:
        more = f" (and {self.omitted} more)" if self.omitted else ""
        return f"{self.problems[0] if self.problems else 'invalid config'}{more}"

    @property
    def count(self) -> int:
        return len(self.problems) + self.omitted


def load_policy_limited(path: str, max_bytes: int, max_problems: int) -> Policy | ConfigRejected:
    """The compiled policy of ``path``, or why not (what the child runs)."""
    try:
        return load(path, max_bytes=max_bytes, max_problems=max_problems).policy
    except ConfigError as exc:
        return ConfigRejected(tuple(str(problem) for problem in exc.problems), exc.omitted)


# --------------------------------------------------------------------------- the policy stream


def write_policy(policy: Policy, stream: IO[bytes]) -> None:
    """Write ``policy`` to ``stream`` as pickles :func:`read_policy_stream` reads back in slices.

    One pickler writes them all, so its memo makes an object shared by tenants (a classifier,
    a quota) one object again on the other side, as :meth:`Policy.with_priority_classes`
    needs (it finds each tenant's classifier among the policy's by identity).
    """
    pickler = pickle.Pickler(stream, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dump(replace(policy, tenants={}, by_namespace={}, selector_tenants=()))
    pickler.dump(len(policy.tenants))
    for name, tenant in policy.tenants.items():
        pickler.dump((name, tenant))
    namespaces = [(namespace, tenant.name) for namespace, tenant in policy.by_namespace.items()]
    pickler.dump(len(namespaces))
    for start in range(0, len(namespaces), _NAMESPACE_BATCH):
        pickler.dump(namespaces[start : start + _NAMESPACE_BATCH])
    pickler.dump([tenant.name for tenant in policy.selector_tenants])


class _Slicer:
    """Lets the event loop run whenever ``SLICE_SECONDS`` of work have passed since it last did."""

    def __init__(self) -> None:
        self._since = time.perf_counter()

    async def __call__(self) -> None:
        if time.perf_counter() - self._since >= SLICE_SECONDS:
            await asyncio.sleep(0)
            self._since = time.perf_counter()


def _expect(value: object, kind: type[Any], what: str) -> Any:
    if not isinstance(value, kind):
        raise pickle.UnpicklingError(f"expected {what}, got {type(value).__name__}")
    return value


async def read_policy_stream(stream: IO[bytes]) -> Policy:
    """The policy :func:`write_policy` wrote, unpickled a slice at a time on the event loop.

    Raises :class:`pickle.UnpicklingError` (or ``EOFError``) on a broken or truncated stream.
    """
    # Only ever this module's own child's output (see the module docstring).
    unpickler = pickle.Unpickler(stream)  # noqa: S301
    slicer = _Slicer()
    skeleton: Policy = _expect(unpickler.load(), Policy, "a policy")
    tenants: dict[str, TenantPolicy] = {}
    for _ in range(_expect(unpickler.load(), int, "a tenant count")):
        name, tenant = _expect(unpickler.load(), tuple, "a tenant")
        tenants[name] = _expect(tenant, TenantPolicy, "a tenant")
        await slicer()
    by_namespace: dict[str, TenantPolicy] = {}
    remaining = _expect(unpickler.load(), int, "a namespace count")
    while remaining > 0:
        batch: list[tuple[str, str]] = _expect(unpickler.load(), list, "namespaces")
        by_namespace.update((namespace, tenants[name]) for namespace, name in batch)
        remaining -= len(batch)
        await slicer()
    selector_names: list[str] = _expect(unpickler.load(), list, "selector tenants")
    return replace(
        skeleton,
        tenants=tenants,
        by_namespace=by_namespace,
        selector_tenants=tuple(tenants[name] for name in selector_names),
    )


# --------------------------------------------------------------------------- the child


async def read_policy(path: Path, *, max_bytes: int, max_problems: int) -> Policy:
    """The compiled policy of ``path``, read, validated and compiled in a child process; raises
    :class:`ConfigRejected`."""
    # A fresh interpreter running this module: forking a process that runs watch threads is
    # unsafe, and multiprocessing's spawn would import the parent's main script again.
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        __name__,
        str(path),
        str(max_bytes),
        str(max_problems),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await child.communicate()
    head, _, body = out.partition(b"\n")
    try:
        answer = json.loads(head)
        if not answer["ok"]:
            problems = tuple(str(problem) for problem in answer["problems"])
            raise ConfigRejected(problems, int(answer["omitted"]))
        if child.returncode != 0:
            raise ValueError(f"exit code {child.returncode}")
        return await read_policy_stream(io.BytesIO(body))
    except (ValueError, KeyError, TypeError, EOFError, pickle.UnpicklingError) as exc:
        # Killed (out of memory, say) or broken: the file is not taken.
        last = err.decode(errors="replace").strip().splitlines()[-1:] or [str(exc)]
        reason = f"the process checking it exited with code {child.returncode} {last[0]}"
        raise ConfigRejected((f"{path}: could not be checked: {reason.strip()}",)) from None


def main(argv: list[str]) -> int:
    """``python -m admission.configreload FILE MAX_BYTES MAX_PROBLEMS``: load FILE and write
    one JSON line (``{"ok": false, "problems": [...], "omitted": N}``, or ``{"ok": true}``
    followed by the compiled policy as :func:`write_policy` writes it) to standard output."""
    path, max_bytes, max_problems = argv[0], int(argv[1]), int(argv[2])
    # Below the serving process when they compete for a CPU: reviews come first.
    os.nice(CHILD_NICENESS)
    outcome = load_policy_limited(path, max_bytes, max_problems)
    out = sys.stdout.buffer
    if isinstance(outcome, ConfigRejected):
        answer = {"ok": False, "problems": list(outcome.problems), "omitted": outcome.omitted}
        out.write(json.dumps(answer).encode() + b"\n")
    else:
        out.write(json.dumps({"ok": True}).encode() + b"\n")
        write_policy(outcome, out)
    out.flush()
    return 0


__all__ = [
    "SLICE_SECONDS",
    "ConfigRejected",
    "load_policy_limited",
    "read_policy",
    "read_policy_stream",
    "write_policy",
]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
