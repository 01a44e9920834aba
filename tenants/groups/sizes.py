"""The port that reads a pod group's size from the cluster (``tenants/kube/groupsizes.py``).

A member that does not carry its group's size names where it is written
(:class:`classifier.podgroups.SizeRef`: an owner Job's ``spec.parallelism``, a coscheduling
PodGroup's ``spec.minMember``). Reading it is I/O, so the admission path asks this port.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from classifier.podgroups import SizeRef


@dataclass(frozen=True, slots=True)
class SizeAnswer:
    """The size read, or (``size`` None) what is missing, in words a user can act on."""

    size: int | None
    missing: str = ""


class SizeReader(Protocol):
    async def read(self, ref: SizeRef) -> SizeAnswer: ...


class NoCluster:
    """The reader of a process without a cluster (``review``, offline ``serve``)."""

    async def read(self, ref: SizeRef) -> SizeAnswer:
        return SizeAnswer(None, f"{ref.describe()} cannot be read without a cluster")


__all__ = ["NoCluster", "SizeAnswer", "SizeReader"]
