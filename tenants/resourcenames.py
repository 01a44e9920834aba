"""Quota resource names as ResourceQuota writes them, and the ledger key each one counts.

A tenant quota may name a resource the way a ResourceQuota's ``spec.hard`` does:

* ``requests.cpu`` or ``cpu``, ``requests.memory`` or ``memory``,
  ``requests.ephemeral-storage`` or ``ephemeral-storage``, ``requests.hugepages-<size>`` or
  ``hugepages-<size>``, ``requests.<extended>`` or the bare extended name (``nvidia.com/gpu``):
  the pod's request, counted under the plain name, as the ledger always has;
* ``limits.cpu``, ``limits.memory``, ``limits.ephemeral-storage``: the pod's limits
  (``PodLimits``), counted under that name;
* ``pods``: one per pod.

Kubernetes charges no ``limits.`` usage for extended resources or hugepages
(``podComputeUsageHelper`` and ``isExtendedResourceNameForQuota`` in
``pkg/quota/v1/evaluator/core/pods.go``: they cannot be overcommitted, so their limit is their
request); a quota on such a name would never bind there, so tenantgate refuses it and says
which name to write instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, TypeVar

from classifier.config import is_qualified_name
from classifier.limits import LIMITED_RESOURCES, LIMITS_PREFIX

__all__ = ["REQUESTS_PREFIX", "ledger_key", "ledger_keys", "limit_keys"]

V = TypeVar("V")

REQUESTS_PREFIX: Final = "requests."


def ledger_key(name: str) -> str:
    """The ledger key a quota resource name counts; ``ValueError`` saying why it cannot be one."""
    head, dot, rest = name.partition(".")
    if dot and head == "requests":
        if rest.startswith((REQUESTS_PREFIX, LIMITS_PREFIX)) or not is_qualified_name(rest):
            raise ValueError(f'resource name "{name}" is not a valid resource name')
        if rest == "pods":
            raise ValueError('resource "requests.pods": write "pods" (it counts pods)')
        return rest
    if dot and head == "limits":
        if rest in LIMITED_RESOURCES:
            return name
        if rest == "pods" or not is_qualified_name(rest):
            raise ValueError(f'resource name "{name}" is not a valid resource name')
        raise ValueError(
            f'resource "{name}": only cpu, memory and ephemeral-storage have limits quotas; '
            f"a {rest} limit always equals its request, write "
            f'"{REQUESTS_PREFIX}{rest}"'
        )
    if not is_qualified_name(name):
        raise ValueError(f'resource name "{name}" is not a valid resource name')
    return name


def ledger_keys(amounts: Mapping[str, V]) -> dict[str, V]:
    """``amounts`` keyed by ledger key; ``ValueError`` for a bad name or two names of one key."""
    result: dict[str, V] = {}
    first: dict[str, str] = {}
    for name, amount in amounts.items():
        key = ledger_key(name)
        if key in first:
            raise ValueError(f'resources "{first[key]}" and "{name}" name the same quota; keep one')
        first[key] = name
        result[key] = amount
    return result


def limit_keys(names: Mapping[str, object]) -> tuple[str, ...]:
    """The plain names of the ``limits.*`` ledger keys in ``names`` (``limits.cpu`` -> cpu)."""
    return tuple(
        key.removeprefix(LIMITS_PREFIX) for key in sorted(names) if key.startswith(LIMITS_PREFIX)
    )
