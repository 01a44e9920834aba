"""Compiling rules once, and indexing them so that classifying does not grow with their number.

``compile_rules`` turns the validated rules into :class:`CompiledRule` objects (each a tree of
compiled conditions, :mod:`classifier.conditions`), reporting every problem with its field
path. :class:`RuleIndex` picks, per pod, the few rules whose guards the pod meets, in rule
order; a :class:`RuleSet` carries one when there are enough rules for it to pay.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from classifier.conditions import (
    AllOf,
    AnyOf,
    Condition,
    ContainerResourceTest,
    HostNetworkTest,
    ImageTest,
    KeyTest,
    NamespaceTest,
    Not,
    OwnerKindTest,
    PortTest,
    PrivilegedTest,
    ResourceComparison,
    ResourceTest,
    RestartPolicyTest,
    VolumeClaimTest,
)
from classifier.config import (
    PROFILE_LABEL,
    RESERVED_PREFIX,
    ClassifierConfig,
    ClassifierProblem,
    ConditionSpec,
    ImageMatchSpec,
    parse_resource_expression,
)
from classifier.facts import PodFacts
from classifier.guards import REQUESTS, VOLUME_CLAIM, Atom
from classifier.patterns import compile_globs, is_glob
from classifier.quantities import Quantity, QuantityError


def compile_condition(
    spec: ConditionSpec | None, *, path: str, problems: list[ClassifierProblem]
) -> Condition:
    """Compile one condition tree, appending a problem (with its field path) per error."""
    if spec is None:
        return AllOf(())
    parts: list[Condition] = []
    if spec.all_ is not None:
        parts.append(
            AllOf(
                [
                    compile_condition(child, path=f"{path}.all[{i}]", problems=problems)
                    for i, child in enumerate(spec.all_)
                ]
            )
        )
    if spec.any_ is not None:
        parts.append(
            AnyOf(
                [
                    compile_condition(child, path=f"{path}.any[{i}]", problems=problems)
                    for i, child in enumerate(spec.any_)
                ]
            )
        )
    if spec.not_ is not None:
        parts.append(Not(compile_condition(spec.not_, path=f"{path}.not", problems=problems)))
    for what, key_spec in (("label", spec.label), ("annotation", spec.annotation)):
        if key_spec is None:
            continue
        if key_spec.key.startswith(RESERVED_PREFIX) and key_spec.key != PROFILE_LABEL:
            problems.append(
                ClassifierProblem(
                    f"{path}.{what}.key",
                    f"keys under {RESERVED_PREFIX} are written by tenantgate and cannot be "
                    "matched (classification must not depend on its own output)",
                )
            )
        elif key_spec.key == PROFILE_LABEL:
            problems.append(
                ClassifierProblem(
                    f"{path}.{what}.key",
                    f"{PROFILE_LABEL} is the opt-in label and is handled before the rules",
                )
            )
        parts.append(KeyTest(key_spec, what="label" if what == "label" else "annotation"))
    if spec.namespace is not None:
        parts.append(NamespaceTest(spec.namespace))
    if spec.ownerKind is not None:
        parts.append(OwnerKindTest(spec.ownerKind))
    if spec.image is not None:
        if isinstance(spec.image, ImageMatchSpec):
            parts.append(ImageTest(spec.image.glob or (), spec.image.contains or ()))
        else:
            parts.append(ImageTest(spec.image))
    if spec.port is not None:
        parts.append(PortTest(spec.port))
    if spec.resource is not None:
        parts.append(
            ResourceTest(_comparisons(spec.resource, path=f"{path}.resource", problems=problems))
        )
    if spec.container is not None:
        parts.append(
            ContainerResourceTest(
                _comparisons(
                    spec.container.resource, path=f"{path}.container.resource", problems=problems
                )
            )
        )
    if spec.volumeClaim is not None:
        parts.append(VolumeClaimTest(spec.volumeClaim))
    if spec.restartPolicy is not None:
        parts.append(RestartPolicyTest(spec.restartPolicy))
    if spec.hostNetwork is not None:
        parts.append(HostNetworkTest(spec.hostNetwork))
    if spec.privileged is not None:
        parts.append(PrivilegedTest(spec.privileged))
    return parts[0] if len(parts) == 1 else AllOf(parts)


def _comparisons(
    texts: Sequence[str], *, path: str, problems: list[ClassifierProblem]
) -> list[ResourceComparison]:
    comparisons = []
    for i, text in enumerate(texts):
        name, op, quantity = parse_resource_expression(text)
        try:
            bound = Quantity.parse(quantity)
        except QuantityError as error:
            problems.append(ClassifierProblem(f"{path}[{i}]", str(error)))
            continue
        pattern = compile_globs([name]) if is_glob(name) else None
        comparisons.append(ResourceComparison(name, op, bound, pattern))
    return comparisons


@dataclass(frozen=True, slots=True)
class CompiledRule:
    index: int
    name: str
    profile: str
    condition: Condition


def compile_rules(
    cfg: ClassifierConfig, problems: list[ClassifierProblem]
) -> tuple[CompiledRule, ...]:
    """Compile every rule, checking names are unique and profiles exist."""
    compiled: list[CompiledRule] = []
    seen: dict[str, int] = {}
    for index, rule in enumerate(cfg.rules):
        path = f"rules[{index}]"
        if rule.name in seen:
            problems.append(
                ClassifierProblem(
                    f"{path}.name",
                    f'duplicate rule name "{rule.name}" (also rules[{seen[rule.name]}])',
                )
            )
        seen.setdefault(rule.name, index)
        if rule.profile not in cfg.profiles:
            problems.append(
                ClassifierProblem(
                    f"{path}.profile",
                    f'unknown profile "{rule.profile}" (known: {", ".join(sorted(cfg.profiles))})',
                )
            )
        condition = compile_condition(rule.match, path=f"{path}.match", problems=problems)
        compiled.append(CompiledRule(index, rule.name, rule.profile, condition))
    return RuleSet(compiled)


def _image_tail(repository: str, depth: int) -> str:
    return "/".join(repository.split("/")[-depth:])


class RuleIndex:
    """Which rules a pod can match, from their guards, in rule order.

    A rule is a candidate when the pod has one of its guard's atoms, or when it has no guard.
    Guards on requests are resolved only when the scan reaches such a rule, since computing the
    requests is costly (and may fail: then each of those rules is a candidate, so testing it
    raises just where a plain scan would).
    """

    __slots__ = ("_always", "_deferred", "_exact", "_fields", "_images", "_prefixes", "_rules")

    def __init__(self, rules: Sequence[CompiledRule]) -> None:
        self._rules = tuple(rules)
        always: set[int] = set()
        deferred: set[int] = set()
        exact: dict[Atom, list[int]] = {}
        prefixes: dict[Hashable, dict[str, list[int]]] = {}
        for position, rule in enumerate(self._rules):
            guard = rule.condition.guard()
            if guard is None:
                always.add(position)
                continue
            if guard.reads_requests:
                deferred.add(position)
            for atom in guard.exact:
                exact.setdefault(atom, []).append(position)
            for field_name, prefix in guard.prefixes:
                prefixes.setdefault(field_name, {}).setdefault(prefix, []).append(position)
        self._always = frozenset(always)
        self._deferred = frozenset(deferred)
        self._exact = {atom: tuple(positions) for atom, positions in exact.items()}
        # Per field: the prefix lengths to try, and what each prefix leads to.
        self._prefixes = {
            field_name: (
                tuple(sorted({len(prefix) for prefix in table})),
                {prefix: tuple(positions) for prefix, positions in table.items()},
            )
            for field_name, table in prefixes.items()
        }
        self._fields = frozenset(atom[0] for atom in exact) | frozenset(prefixes)
        self._images = tuple(
            (f, f[1]) for f in self._fields if isinstance(f, tuple) and f[0] == "image"
        )

    def candidates(self, facts: PodFacts) -> Iterator[CompiledRule]:
        """The rules worth testing on the pod, in order."""
        hits = self._hits(facts)
        ordered = sorted(hits)
        pending = self._deferred - hits
        if not pending:
            yield from map(self._rules.__getitem__, ordered)
            return
        # Rules before the first one that only the pod's requests can make a candidate are
        # tested without computing the requests (a match there makes them unnecessary).
        first = min(pending)
        yield from map(self._rules.__getitem__, ordered[: bisect.bisect(ordered, first)])
        hits.update(self._request_hits(facts))
        yield from map(self._rules.__getitem__, sorted(p for p in hits if p >= first))

    def _hits(self, facts: PodFacts) -> set[int]:
        """Rules without a guard, and rules whose guard the pod's facts (but requests) meet."""
        hits = set(self._always)
        found: list[tuple[int, ...] | None] = []
        get = self._exact.get
        fields = self._fields
        # One loop per fact, only for the facts some guard reads: this runs for every pod.
        if "namespace" in fields:
            found.append(get(("namespace", facts.namespace)))
        if "label" in fields:
            found.extend(get(("label", k, v)) for k, v in facts.labels.items())
        if "label-key" in fields:
            found.extend(get(("label-key", k)) for k in facts.labels)
        if "annotation" in fields:
            found.extend(get(("annotation", k, v)) for k, v in facts.annotations.items())
        if "annotation-key" in fields:
            found.extend(get(("annotation-key", k)) for k in facts.annotations)
        if "owner" in fields:
            found.extend(get(("owner", owner.kind)) for owner in facts.owners)
        for image_field, depth in self._images:
            found.extend(get((image_field, _image_tail(r, depth))) for _, r in facts.images)
        if "has-port" in fields or "port" in fields or "port-name" in fields:
            ports = facts.ports
            if ports:
                found.append(get(("has-port",)))
            found.extend(get(("port", number)) for number, _, _ in ports)
            found.extend(get(("port-name", name)) for _, name, _ in ports if name)
        if "restartPolicy" in fields:
            found.append(get(("restartPolicy", facts.restart_policy)))
        if VOLUME_CLAIM in fields and facts.claims:
            found.append(get((VOLUME_CLAIM,)))
        if "hostNetwork" in fields:
            found.append(get(("hostNetwork", facts.host_network)))
        for positions in found:
            if positions is not None:
                hits.update(positions)
        for field_name, (lengths, table) in self._prefixes.items():
            if field_name != REQUESTS:
                _prefix_hits(hits, self._values(facts, field_name), lengths, table)
        return hits

    def _request_hits(self, facts: PodFacts) -> set[int] | frozenset[int]:
        try:
            requests = facts.requests
        except Exception:  # any failure is the rule's to raise, when it is tested
            return self._deferred
        hits: set[int] = set()
        for name in requests:
            found = self._exact.get((REQUESTS, name))
            if found is not None:
                hits.update(found)
        if REQUESTS in self._prefixes:
            lengths, table = self._prefixes[REQUESTS]
            _prefix_hits(hits, requests, lengths, table)
        return hits

    @staticmethod
    def _values(facts: PodFacts, field_name: Hashable) -> Iterable[str]:
        """The pod's values of a field some prefix guard reads."""
        if field_name == "namespace":
            return (facts.namespace,)
        if field_name == "label-key":
            return facts.labels
        if field_name == "annotation-key":
            return facts.annotations
        if field_name == "owner":
            return [owner.kind for owner in facts.owners]
        if field_name == "port-name":
            return [name for _, name, _ in facts.ports if name]
        if isinstance(field_name, tuple) and field_name[0] == "image":
            return [_image_tail(repository, field_name[1]) for _, repository in facts.images]
        raise ValueError(f"no prefix guard reads {field_name!r}")  # pragma: no cover


def _prefix_hits(
    hits: set[int],
    values: Iterable[str],
    lengths: tuple[int, ...],
    table: Mapping[str, tuple[int, ...]],
) -> None:
    for value in values:
        for length in lengths:
            if length > len(value):
                break
            found = table.get(value[:length])
            if found is not None:
                hits.update(found)


# Below this many rules, testing each costs less than gathering the facts the index reads.
INDEX_FROM = 16


class RuleSet(tuple[CompiledRule, ...]):
    """Compiled rules in order, with their :class:`RuleIndex` when there are enough of them."""

    rule_index: RuleIndex | None

    def __new__(cls, rules: Iterable[CompiledRule], *, index_from: int = INDEX_FROM) -> RuleSet:
        self = super().__new__(cls, rules)
        self.rule_index = RuleIndex(self) if len(self) >= index_from else None
        return self
