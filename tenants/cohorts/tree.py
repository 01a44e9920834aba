"""The compiled cohort tree: cohorts, their parents and quotas, and each member's terms.

Built by :func:`build_cohorts` from plain values (the config models live in
:mod:`tenants.config`, which calls it), so this module knows nothing of pydantic. Every
cross-reference problem (an unknown cohort, a parent cycle, a lending limit above the
guarantee) is returned with the field path it concerns.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from classifier.quantities import Quantity

_ZERO = Quantity(0)


@dataclass(frozen=True, slots=True)
class Membership:
    """One tenant's terms in its cohort.

    ``lending_limit``: per resource, the most of its unused guarantee others may borrow (a
    resource not named lends all of it). ``borrowing_limit``: per resource, how far past its
    guarantee it may go (a resource not named: unlimited within the cohort). ``ceiling``: the
    tenant's burst ceiling when it configures ``burst``, else None (no bound of its own).
    """

    tenant: str
    cohort: str
    guaranteed: Mapping[str, Quantity]
    lending_limit: Mapping[str, Quantity] = field(default_factory=dict)
    borrowing_limit: Mapping[str, Quantity] = field(default_factory=dict)
    ceiling: Mapping[str, Quantity] | None = None
    weight: Fraction = Fraction(1)

    def limits(self, resource: str) -> bool:
        """Whether the tenant's quota names ``resource``; usage of a resource it does not
        limit is neither borrowed nor lent (as without cohorts, it never blocks)."""
        return (
            resource in self.guaranteed
            or resource in self.borrowing_limit
            or (self.ceiling is not None and resource in self.ceiling)
        )

    def lendable(self, resource: str) -> Quantity:
        """The most of this tenant's guarantee of ``resource`` that others may ever borrow."""
        guaranteed = self.guaranteed.get(resource, _ZERO)
        limit = self.lending_limit.get(resource)
        return guaranteed if limit is None or limit > guaranteed else limit


@dataclass(frozen=True, slots=True)
class Cohort:
    """A cohort: its parent (None at a root), its own quota, its member tenants, its children."""

    name: str
    parent: str | None = None
    quota: Mapping[str, Quantity] = field(default_factory=dict)
    members: tuple[str, ...] = ()
    children: tuple[str, ...] = ()
    description: str = ""


@dataclass(frozen=True, slots=True)
class CohortTree:
    """Every cohort and every member tenant's terms; empty when the config has no cohorts."""

    cohorts: Mapping[str, Cohort] = field(default_factory=dict)
    members: Mapping[str, Membership] = field(default_factory=dict)
    # tenant -> (root, tree members, the same as a set), filled on first use: every booking
    # of a member asks.
    _trees: dict[str, tuple[str, tuple[str, ...], frozenset[str]]] = field(
        default_factory=dict, compare=False, repr=False
    )
    # Every member's weight times the least common denominator of all weights: a fair share
    # sums integers, not fractions. Filled on first use.
    _scaled: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    # (root, resource) -> lendable capacity, filled on first use (tenants.cohorts.fairshare).
    capacities: dict[tuple[str, str], Quantity] = field(
        default_factory=dict, compare=False, repr=False
    )
    # (root, resource) -> who lends what while nobody uses anything, and its sum in nanos
    # (tenants.cohorts.borrowing).
    idle_lenders: dict[tuple[str, str], tuple[dict[str, Quantity], int]] = field(
        default_factory=dict, compare=False, repr=False
    )
    # member -> (the last ledger read of it, that ledger's total usage): a borrowed booking
    # reads every busy member of its tree, and most have not changed since the last one.
    totals: dict[str, tuple[object, Mapping[str, Quantity]]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def __bool__(self) -> bool:
        return bool(self.cohorts)

    def root_of(self, cohort: str) -> Cohort:
        """The root of ``cohort``'s tree (the tree is acyclic: :func:`build_cohorts` checks)."""
        current = self.cohorts[cohort]
        while current.parent is not None:
            current = self.cohorts[current.parent]
        return current

    def subtree(self, cohort: str) -> Iterator[Cohort]:
        """``cohort`` and every cohort below it, parents before children."""
        stack = [self.cohorts[cohort]]
        while stack:
            current = stack.pop()
            yield current
            stack.extend(self.cohorts[child] for child in reversed(current.children))

    def _tree(self, tenant: str) -> tuple[str, tuple[str, ...], frozenset[str]]:
        found = self._trees.get(tenant)
        if found is None:
            root = self.root_of(self.members[tenant].cohort).name
            names = tuple(sorted(m for c in self.subtree(root) for m in c.members))
            found = self._trees[tenant] = (root, names, frozenset(names))
        return found

    def root_name(self, tenant: str) -> str | None:
        """The root cohort of ``tenant``'s tree; None when it is in no cohort."""
        return self._tree(tenant)[0] if tenant in self.members else None

    def tree_members(self, tenant: str) -> tuple[str, ...]:
        """Every tenant in the same tree as ``tenant`` (the pool it borrows from), sorted."""
        return self._tree(tenant)[1]

    def tree_member_set(self, tenant: str) -> frozenset[str]:
        """:meth:`tree_members` as a set; empty when ``tenant`` is in no cohort."""
        return self._tree(tenant)[2] if tenant in self.members else frozenset()

    def scaled_weights(self) -> Mapping[str, int]:
        """member -> its weight times the least common denominator of every member's weight.

        Weights are exact fractions; scaled to integers over one denominator, the weights of a
        set of members add up as integers, and a ratio of weights is a ratio of integers.
        """
        if not self._scaled:
            denominator = math.lcm(*(m.weight.denominator for m in self.members.values()))
            self._scaled.update(
                (name, m.weight.numerator * (denominator // m.weight.denominator))
                for name, m in self.members.items()
            )
        return self._scaled


@dataclass(frozen=True, slots=True)
class CohortProblem:
    """A config problem: the field path it concerns and what is wrong."""

    path: str
    message: str


def _parent_cycle(cohorts: Mapping[str, Cohort], start: str) -> list[str] | None:
    seen: list[str] = []
    current: str | None = start
    while current is not None and current in cohorts:
        if current in seen:
            return [*seen[seen.index(current) :], current]
        seen.append(current)
        current = cohorts[current].parent
    return None


def build_cohorts(
    cohorts: Mapping[str, Cohort],
    members: Mapping[str, Membership],
) -> tuple[CohortTree, list[CohortProblem]]:
    """Link members and children into ``cohorts`` and check every cross-reference.

    ``cohorts`` come without members or children (they are filled in here); problems name
    ``cohorts.NAME.parent`` or ``tenants.NAME.cohort`` / ``...lendingLimit[RESOURCE]``.
    """
    problems: list[CohortProblem] = []
    by_cohort: dict[str, list[str]] = {name: [] for name in cohorts}
    children: dict[str, list[str]] = {name: [] for name in cohorts}
    for name, cohort in cohorts.items():
        if cohort.parent is None:
            continue
        if cohort.parent not in cohorts:
            problems.append(
                CohortProblem(f"cohorts.{name}.parent", f'unknown cohort "{cohort.parent}"')
            )
        else:
            children[cohort.parent].append(name)
    reported: set[str] = set()
    for name in cohorts:
        cycle = _parent_cycle(cohorts, name)
        if cycle is not None and not reported.intersection(cycle):
            reported.update(cycle)
            problems.append(
                CohortProblem(f"cohorts.{cycle[0]}.parent", "parent cycle: " + " -> ".join(cycle))
            )
    for tenant, membership in members.items():
        if membership.cohort not in cohorts:
            problems.append(
                CohortProblem(f"tenants.{tenant}.cohort", f'unknown cohort "{membership.cohort}"')
            )
            continue
        by_cohort[membership.cohort].append(tenant)
        for resource in sorted(membership.lending_limit):
            limit = membership.lending_limit[resource]
            guaranteed = membership.guaranteed.get(resource, _ZERO)
            if limit > guaranteed:
                problems.append(
                    CohortProblem(
                        f"tenants.{tenant}.lendingLimit[{resource}]",
                        f"lendingLimit {resource}={limit} is above the guarantee "
                        f"{resource}={guaranteed}: a tenant lends only what it is guaranteed",
                    )
                )
    linked = {
        name: Cohort(
            name=name,
            parent=cohort.parent if cohort.parent in cohorts else None,
            quota=cohort.quota,
            members=tuple(by_cohort[name]),
            children=tuple(children[name]),
            description=cohort.description,
        )
        for name, cohort in cohorts.items()
    }
    known = {tenant: m for tenant, m in members.items() if m.cohort in cohorts}
    return CohortTree(linked, known), problems
