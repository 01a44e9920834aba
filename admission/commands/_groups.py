"""``tenantgate review`` for pod groups: the members of a group reviewed as one.

Each member pod goes through the webhook's own decision path like any pod (it is admitted
behind tenantgate's gate, waiting for its group). This module then gathers the members of each
group found in the manifests (:func:`classifier.podgroups.claim_group` with the config's
rules), counts the pods each template gives (a PyTorchJob's replicas, a JobSet's replicas x
parallelism), reads the group's size from the manifests themselves when it is written in an
object there (the PyTorchJob, the JobSet, an Indexed Job), adds up the group's request and
says what would become of the whole group: released together (on the tier its tenant's
groups wait for), waiting for room, waiting for members the manifests do not hold, or denied
because it can never fit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from classifier import podview
from classifier.podgroups import GroupClaim, GroupClaimError, SizeRef, claim_group
from classifier.quantities import Quantity, format_list
from classifier.resources import pod_requests
from tenants.config import Policy
from tenants.groups.admission import free_room, never_fits_group, sum_amounts
from tenants.groups.sizes import SizeAnswer
from tenants.ledger import LedgerStore

GroupId = tuple[str, str]  # (namespace, key)


class ManifestSizes:
    """A :class:`~tenants.groups.sizes.SizeReader` over the reviewed manifests: the object a
    member's size is written in, when the manifests hold it (by apiVersion, kind, namespace
    and name; an object without a namespace is in the namespace it is reviewed in)."""

    def __init__(
        self, documents: Sequence[Any], *, namespace: str | None, default_namespace: str
    ) -> None:
        self._objects: dict[tuple[str, str, str, str], Mapping[str, Any]] = {}
        for body in documents:
            for item in _objects(body):
                ns = namespace or podview.namespace(item) or default_namespace
                key = (
                    podview.string(item.get("apiVersion")) or "",
                    podview.string(item.get("kind")) or "",
                    ns,
                    podview.string(podview.metadata(item).get("name")) or "",
                )
                self._objects[key] = item

    def find(self, ref: SizeRef) -> SizeAnswer:
        found = self._objects.get((ref.api_version, ref.kind, ref.namespace, ref.name))
        if found is None:
            return SizeAnswer(None, f"{ref.describe()} is not in the manifests")
        size = ref.size_of(found)
        if size is None:
            return SizeAnswer(None, f"{ref.describe()} holds no count")
        return SizeAnswer(size)

    async def read(self, ref: SizeRef) -> SizeAnswer:
        return self.find(ref)


def _objects(body: Any) -> Sequence[Mapping[str, Any]]:
    if not isinstance(body, dict):
        return []
    items = body.get("items")
    kind = podview.string(body.get("kind")) or ""
    if kind.endswith("List") and isinstance(items, list):
        return [found for item in items for found in _objects(item)]
    return [body]


@dataclass
class _Group:
    claim: GroupClaim
    namespace: str
    tenant: str | None
    rows: list[Mapping[str, Any]] = field(default_factory=list)
    pods: list[Mapping[str, Any]] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)


def claim_of(policy: Policy, pod: Mapping[str, Any], tenant: str | None) -> GroupClaim | None:
    """The group the webhook would find for ``pod`` (None: no group, or no tenant's pod)."""
    tenant_policy = policy.tenants.get(tenant) if tenant is not None else None
    if tenant_policy is None:
        return None
    try:
        return claim_group(pod, policy.group_rules(tenant_policy, None))
    except GroupClaimError:
        return None  # the member's own row carries the denial


def review_groups(
    policy: Policy,
    ledger: LedgerStore,
    members: Sequence[tuple[Mapping[str, Any], Mapping[str, Any], int]],
    sizes: ManifestSizes,
) -> list[dict[str, Any]]:
    """One summary per group: ``members`` are (result row, pod as built, pod count)."""
    groups: dict[GroupId, _Group] = {}
    for row, pod, count in members:
        claim = claim_of(policy, pod, row.get("tenant"))
        if claim is None:
            continue
        group = groups.setdefault(
            (str(row["namespace"]), claim.key),
            _Group(claim, str(row["namespace"]), row.get("tenant")),
        )
        group.rows.append(row)
        group.pods.append(pod)
        group.counts.append(count)
    return [_summary(policy, ledger, group, sizes) for group in groups.values()]


def _summary(
    policy: Policy, ledger: LedgerStore, group: _Group, sizes: ManifestSizes
) -> dict[str, Any]:
    claim = group.claim
    size, missing = claim.size, ""
    if size is None and claim.size_from is not None:
        answer = sizes.find(claim.size_from)
        size, missing = answer.size, answer.missing
    pods = sum(group.counts)
    amounts: list[Mapping[str, Quantity]] = []
    for row, pod, count in zip(group.rows, group.pods, group.counts, strict=True):
        # The pod as the webhook leaves it (container defaults filled in), else as built.
        mutated = row.get("mutated")
        amounts.extend([pod_requests(mutated if isinstance(mutated, dict) else pod)] * count)
    total = sum_amounts(amounts)
    summary: dict[str, Any] = {
        "name": claim.name,
        "key": claim.key,
        "source": claim.source,
        "namespace": group.namespace,
        "tenant": group.tenant,
        "size": size,
        "pods": pods,
        "members": [
            {"object": f"{row['kind']}/{row['name']}", "path": row["path"], "pods": count}
            for row, count in zip(group.rows, group.counts, strict=True)
        ],
        "total": {name: str(amount) for name, amount in sorted(total.items())},
    }
    verdict, message = _verdict(policy, ledger, group, size, missing, pods, total)
    summary.update(verdict=verdict, message=message)
    return summary


def _verdict(
    policy: Policy,
    ledger: LedgerStore,
    group: _Group,
    size: int | None,
    missing: str,
    pods: int,
    total: Mapping[str, Quantity],
) -> tuple[str, str]:
    name = group.claim.name
    tenant = policy.tenants[str(group.tenant)]
    tier = policy.group_policy(tenant, None).tier
    if size is not None:
        reason = never_fits_group(tenant, tier=tier, name=name, size=size, total=total)
        if reason is not None:
            return "denied", reason
    denied = [row for row in group.rows if not row.get("allowed")]
    if denied:
        first = denied[0]
        return "denied", f"{first['kind']}/{first['name']} {first['path']}: {first['message']}"
    if size is None:
        return "incomplete", f"the size of pod group {name} is unknown: {missing}"
    if pods < size:
        return "incomplete", (
            f"pod group {name} has {size} members and the manifests make {pods}: its members "
            "wait behind tenantgate's gate until the others are created"
        )
    if pods > size:
        return "incomplete", (
            f"the manifests make {pods} pods for pod group {name} of {size} members"
        )
    free = free_room(tenant, ledger.get(tenant.name), tier, sorted(total))
    short = {n: q for n, q in total.items() if n in free and q.nanos > free[n].nanos}
    if short:
        return "queued", (
            f"pod group {name} needs {format_list(short)}, tenant {tenant.name} has "
            f"{format_list({n: free[n] for n in short})} free on {tier}: the group waits, "
            "all its members gated, until there is room"
        )
    return "allowed", f"all {size} members released together on {tier}"


def render_groups(groups: Sequence[Mapping[str, Any]]) -> list[str]:
    """The lines the table prints after its rows, one block per group."""
    lines: list[str] = []
    for group in groups:
        size = group["size"] if group["size"] is not None else "unknown"
        lines.append("")
        lines.append(
            f"pod group {group['name']} ({group['source']}) in namespace {group['namespace']}, "
            f"tenant {group['tenant']}: {group['pods']} pods, size {size}: {group['verdict']}"
        )
        for member in group["members"]:
            pods = "1 pod" if member["pods"] == 1 else f"{member['pods']} pods"
            lines.append(f"  {member['object']} {member['path']}: {pods}")
        total = ",".join(f"{n}={q}" for n, q in group["total"].items()) or "nothing"
        lines.append(f"  total: {total}")
        lines.append(f"  {group['message']}")
    return lines
