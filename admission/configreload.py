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
import json
import sys
from pathlib import Path

from tenants.config import Policy
from tenants.configfile import ConfigError, load
from tenants.kube.informer import release_free_memory


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


def check_config(path: str, max_bytes: int, max_problems: int) -> ConfigRejected | None:
    """Why the file at ``path`` is not usable, or None when it is (what the child runs)."""
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
    rejected = await _check_in_child(path, max_bytes=max_bytes, max_problems=max_problems)
    if rejected is not None:
        raise rejected
    # The file may have changed since: this load checks it again.
    outcome = await asyncio.to_thread(load_policy_limited, str(path), max_bytes, max_problems)
    if isinstance(outcome, ConfigRejected):
        raise outcome
    return outcome


async def _check_in_child(
    path: Path, *, max_bytes: int, max_problems: int
) -> ConfigRejected | None:
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
    try:
        answer = json.loads(out)
        return (
            None
            if answer["ok"]
            else ConfigRejected(tuple(str(p) for p in answer["problems"]), int(answer["omitted"]))
        )
    except (ValueError, KeyError, TypeError):
        # Killed (out of memory, say) or broken: the file is not taken.
        last = err.decode(errors="replace").strip().splitlines()[-1:] or [""]
        reason = f"the process checking it exited with code {child.returncode} {last[0]}"
        return ConfigRejected((f"{path}: could not be checked: {reason.strip()}",))


def main(argv: list[str]) -> int:
    """``python -m admission.configreload FILE MAX_BYTES MAX_PROBLEMS``: check FILE, print the
    outcome as JSON (``{"ok": true}`` or ``{"ok": false, "problems": [...], "omitted": N}``)."""
    path, max_bytes, max_problems = argv[0], int(argv[1]), int(argv[2])
    rejected = check_config(path, max_bytes, max_problems)
    if rejected is None:
        answer: dict[str, object] = {"ok": True}
    else:
        answer = {"ok": False, "problems": list(rejected.problems), "omitted": rejected.omitted}
    sys.stdout.write(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
