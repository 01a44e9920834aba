"""Compiled conditions: what each kind of rule condition tests, says, and guards.

A compiled condition's ``test(facts)`` returns the plain-words reason it holds
(``requests nvidia.com/gpu=1 > 0``) or None; ``signals(facts)`` returns every reason that
holds, for explanations (an ``any`` names each alternative that matched, not only the first).
Each condition also states a cheap necessary condition (a :class:`~classifier.guards.Guard`)
from which the rule index picks the few rules worth testing on a pod.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from classifier.config import RESERVED_PREFIX, KeyMatchSpec
from classifier.facts import PodFacts
from classifier.guards import REQUESTS, VOLUME_CLAIM, Guard, any_of_guards, values_guard
from classifier.patterns import compile_globs, is_glob, literal_prefix
from classifier.quantities import Quantity

_ZERO = Quantity.parse(0)


class Condition:
    """A compiled condition. ``description`` is static text, used for ``not`` and lint."""

    __slots__ = ("description",)

    def __init__(self, description: str) -> None:
        self.description = description

    def test(self, facts: PodFacts) -> str | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def signals(self, facts: PodFacts) -> tuple[str, ...] | None:
        """Every piece of evidence for this condition, for explanations; None if it does not
        hold. An exclusion (``not``) holds without being evidence: ``()``."""
        reason = self.test(facts)
        return None if reason is None else (reason,)

    def guard(self) -> Guard | None:
        """What a pod must have for ``test`` to hold or raise; None: nothing cheap to say."""
        return None

    def may_raise(self) -> bool:
        """Whether ``test`` can raise (it reads the requests, which may be invalid)."""
        return False


class AllOf(Condition):
    __slots__ = ("children",)

    def __init__(self, children: Sequence[Condition]) -> None:
        super().__init__(" and ".join(c.description for c in children) or "every pod")
        self.children = tuple(children)

    def test(self, facts: PodFacts) -> str | None:
        reasons: list[str] = []
        exclusions: list[str] = []
        for child in self.children:
            reason = child.test(facts)
            if reason is None:
                return None
            # What the pod has says why; what it lacks (a `not`) only when nothing else does.
            (exclusions if isinstance(child, Not) else reasons).append(reason)
        return " and ".join(reasons or exclusions) if self.children else "every pod"

    def signals(self, facts: PodFacts) -> tuple[str, ...] | None:
        found: list[str] = []
        for child in self.children:
            signals = child.signals(facts)
            if signals is None:
                return None
            found.extend(signals)
        return tuple(found) if found or self.children else ("every pod",)

    def guard(self) -> Guard | None:
        # Every child must hold, so any child's guard will do, but children after one that may
        # raise are not reached when it raises: only the children up to that one qualify.
        guards = []
        for child in self.children:
            guard = child.guard()
            if guard is not None:
                guards.append(guard)
            if child.may_raise():
                break
        return min(guards, key=lambda g: g.rank, default=None)

    def may_raise(self) -> bool:
        return any(child.may_raise() for child in self.children)


class AnyOf(Condition):
    __slots__ = ("children",)

    def __init__(self, children: Sequence[Condition]) -> None:
        super().__init__(
            "(" + " or ".join(c.description for c in children) + ")" if children else "nothing"
        )
        self.children = tuple(children)

    def test(self, facts: PodFacts) -> str | None:
        for child in self.children:
            reason = child.test(facts)
            if reason is not None:
                return reason
        return None

    def signals(self, facts: PodFacts) -> tuple[str, ...] | None:
        held = False
        found: list[str] = []
        for child in self.children:
            signals = child.signals(facts)
            if signals is not None:
                held = True
                found.extend(s for s in signals if s not in found)
        return tuple(found) if held else None

    def guard(self) -> Guard | None:
        return any_of_guards(child.guard() for child in self.children)

    def may_raise(self) -> bool:
        return any(child.may_raise() for child in self.children)


class Not(Condition):
    __slots__ = ("child",)

    def __init__(self, child: Condition) -> None:
        super().__init__(f"not ({child.description})")
        self.child = child

    def test(self, facts: PodFacts) -> str | None:
        return self.description if self.child.test(facts) is None else None

    def signals(self, facts: PodFacts) -> tuple[str, ...] | None:
        return () if self.child.test(facts) is None else None

    def may_raise(self) -> bool:
        return self.child.may_raise()


class KeyTest(Condition):
    """A test on labels or annotations (``what`` says which)."""

    __slots__ = ("key", "key_pattern", "mode", "texts", "value_pattern", "values", "what")

    def __init__(self, spec: KeyMatchSpec, *, what: Literal["label", "annotation"]) -> None:
        self.what = what
        self.key = spec.key
        self.key_pattern = compile_globs([spec.key]) if is_glob(spec.key) else None
        self.values: frozenset[str] = frozenset()
        self.value_pattern: re.Pattern[str] | None = None
        self.texts: tuple[str, ...] = ()
        if spec.exists:
            self.mode = "exists"
            text = f"{what} {spec.key} is set"
        elif spec.absent:
            self.mode = "absent"
            text = f"{what} {spec.key} is absent"
        elif spec.glob is not None:
            self.mode = "glob"
            self.value_pattern = compile_globs(spec.glob)
            text = f"{what} {spec.key} matches {_quoted(spec.glob)}"
        elif spec.contains is not None:
            self.mode = "contains"
            self.texts = tuple(t.lower() for t in spec.contains)
            text = f"{what} {spec.key} contains {_quoted(spec.contains)}"
        else:
            self.mode = "values"
            self.values = frozenset([spec.value] if spec.value is not None else spec.values or [])
            text = f"{what} {spec.key} is {_quoted(sorted(self.values))}"
        super().__init__(text)

    def _pairs(self, facts: PodFacts) -> Iterable[tuple[str, str]]:
        source = facts.labels if self.what == "label" else facts.annotations
        if self.key_pattern is None:
            value = source.get(self.key)
            return () if value is None else ((self.key, value),)
        # tenantgate's own keys never count: classifying must not depend on its own output.
        return (
            (k, v)
            for k, v in source.items()
            if self.key_pattern.match(k) and not k.startswith(RESERVED_PREFIX)
        )

    def test(self, facts: PodFacts) -> str | None:
        pairs = self._pairs(facts)
        if self.mode == "absent":
            return None if any(True for _ in pairs) else self.description
        for key, value in pairs:
            if self.mode == "exists":
                return f"{self.what} {key} is set"
            if self.mode == "values" and value in self.values:
                return f"{self.what} {key}={value}"
            if (
                self.mode == "glob"
                and self.value_pattern is not None
                and self.value_pattern.match(value)
            ):
                return f"{self.what} {key}={value}"
            if self.mode == "contains":
                found = _contained(value, self.texts)
                if found is not None:
                    return f'{self.what} {key}={value} contains "{found}"'
        return None

    def guard(self) -> Guard | None:
        if self.mode == "absent":
            return None
        if self.key_pattern is not None:
            prefix = literal_prefix(self.key)
            return Guard(prefixes=frozenset({(f"{self.what}-key", prefix)})) if prefix else None
        if self.mode == "values":
            return Guard(exact=frozenset((self.what, self.key, v) for v in self.values))
        # exists, glob, contains: the key must be present.
        return Guard(exact=frozenset({(f"{self.what}-key", self.key)}))


class NamespaceTest(Condition):
    __slots__ = ("exact", "pattern", "patterns")

    def __init__(self, patterns: Sequence[str]) -> None:
        super().__init__(f"namespace is {_quoted(patterns)}")
        self.patterns = tuple(patterns)
        self.exact = frozenset(p for p in patterns if not is_glob(p))
        globs = [p for p in patterns if is_glob(p)]
        self.pattern = compile_globs(globs) if globs else None

    def test(self, facts: PodFacts) -> str | None:
        ns = facts.namespace
        if ns in self.exact or (self.pattern is not None and self.pattern.match(ns)):
            return f"namespace {ns}"
        return None

    def guard(self) -> Guard | None:
        return values_guard("namespace", self.patterns)


class OwnerKindTest(Condition):
    __slots__ = ("exact", "kinds", "pattern")

    def __init__(self, kinds: Sequence[str]) -> None:
        super().__init__(f"owner kind is {_quoted(kinds)}")
        self.kinds = tuple(kinds)
        self.exact = frozenset(k for k in kinds if not is_glob(k))
        globs = [k for k in kinds if is_glob(k)]
        self.pattern = compile_globs(globs) if globs else None

    def test(self, facts: PodFacts) -> str | None:
        for owner in facts.owners:
            if owner.kind in self.exact or (
                self.pattern is not None and self.pattern.match(owner.kind)
            ):
                via = f" (via {owner.via})" if owner.via else ""
                return f"owner {owner.kind} {owner.name}".rstrip() + via
        return None

    def guard(self) -> Guard | None:
        return values_guard("owner", self.kinds)


class ImageTest(Condition):
    """Globs on the repository path (a pattern with N components matches the last N), or
    texts anywhere in it, ignoring case."""

    __slots__ = ("by_depth", "texts")

    def __init__(self, patterns: Sequence[str], contains: Sequence[str] = ()) -> None:
        described = []
        if patterns:
            described.append(f"image is {_quoted(patterns)}")
        if contains:
            described.append(f"image contains {_quoted(contains)}")
        super().__init__(" or ".join(described))
        by_depth: dict[int, list[str]] = {}
        for pattern in patterns:
            by_depth.setdefault(pattern.count("/") + 1, []).append(pattern)
        self.by_depth = tuple(
            (depth, compile_globs(group, fold_case=True), tuple(group))
            for depth, group in sorted(by_depth.items())
        )
        self.texts = tuple(text.lower() for text in contains)

    def test(self, facts: PodFacts) -> str | None:
        for image, repository in facts.images:
            parts = repository.split("/")
            for depth, pattern, group in self.by_depth:
                tail = "/".join(parts[-depth:])
                if pattern.match(tail):
                    matched = next(p for p in group if fnmatch.fnmatchcase(tail, p.lower()))
                    return f'image {image} matches "{matched}"'
            found = _contained(repository, self.texts)
            if found is not None:
                return f'image {image} contains "{found}"'
        return None

    def guard(self) -> Guard | None:
        if self.texts:  # a text may sit anywhere: nothing cheap to index on
            return None
        # Per depth, the pod's fact is the last ``depth`` components of a repository path.
        return any_of_guards(
            values_guard(("image", depth), [p.lower() for p in group])
            for depth, _, group in self.by_depth
        )


def _contained(value: str, texts: Sequence[str]) -> str | None:
    """The first of ``texts`` (lower-case) found in ``value``, ignoring case."""
    folded = value.lower()
    return next((text for text in texts if text in folded), None)


class PortTest(Condition):
    __slots__ = ("any_port", "name_pattern", "names", "numbers")

    def __init__(self, ports: Sequence[int | str]) -> None:
        super().__init__(f"container port is {_quoted([str(p) for p in ports])}")
        self.numbers = frozenset(p for p in ports if isinstance(p, int))
        names = [p for p in ports if isinstance(p, str)]
        self.names = tuple(names)
        self.any_port = "*" in names
        self.name_pattern = compile_globs(names) if names else None

    def test(self, facts: PodFacts) -> str | None:
        for number, name, container in facts.ports:
            if self.any_port or number in self.numbers:
                label = f" ({name})" if name else ""
                return f"container {container} exposes port {number}{label}"
            if name and self.name_pattern is not None and self.name_pattern.match(name):
                return f'container {container} exposes port {number} named "{name}"'
        return None

    def guard(self) -> Guard | None:
        if self.any_port or any(is_glob(name) for name in self.names):
            return Guard(exact=frozenset({("has-port",)}))
        return Guard(
            exact=frozenset(
                [("port", n) for n in self.numbers] + [("port-name", n) for n in self.names]
            )
        )


_COMPARATORS: Mapping[str, Callable[[Quantity, Quantity], bool]] = {
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


@dataclass(frozen=True, slots=True)
class ResourceComparison:
    name: str
    op: str
    bound: Quantity
    pattern: re.Pattern[str] | None

    def holds(self, requests: Mapping[str, Quantity]) -> str | None:
        compare = _COMPARATORS[self.op]
        if self.pattern is None:
            names: Iterable[str] = (self.name,)
        else:
            names = sorted(n for n in requests if self.pattern.match(n)) or (self.name,)
        for name in names:
            have = requests.get(name, _ZERO)
            if compare(have, self.bound):
                shown = name if name in requests or self.pattern is None else self.name
                return f"requests {shown}={have} {self.op} {self.bound}"
        return None


class ResourceTest(Condition):
    __slots__ = ("comparisons",)

    def __init__(self, comparisons: Sequence[ResourceComparison]) -> None:
        super().__init__(
            "requests " + " or ".join(f"{c.name} {c.op} {c.bound}" for c in comparisons)
        )
        self.comparisons = tuple(comparisons)

    def test(self, facts: PodFacts) -> str | None:
        requests = facts.requests
        for comparison in self.comparisons:
            reason = comparison.holds(requests)
            if reason is not None:
                return reason
        return None

    def guard(self) -> Guard | None:
        # A request the pod lacks counts as zero, so unless zero passes, the pod must request
        # the resource (or one matching the glob, whose literal start it then has).
        if any(_COMPARATORS[c.op](_ZERO, c.bound) for c in self.comparisons):
            return None
        return (
            values_guard(REQUESTS, [c.name for c in self.comparisons]) if self.comparisons else None
        )

    def may_raise(self) -> bool:
        return True


class ContainerResourceTest(Condition):
    """Resource comparisons on each container's own requests: one container passing is enough.

    A container's requests are as the API server stores them (a limit stands in for a missing
    request); a resource it does not request counts as zero.
    """

    __slots__ = ("comparisons",)

    def __init__(self, comparisons: Sequence[ResourceComparison]) -> None:
        super().__init__(
            "a container requests " + " or ".join(f"{c.name} {c.op} {c.bound}" for c in comparisons)
        )
        self.comparisons = tuple(comparisons)

    def test(self, facts: PodFacts) -> str | None:
        for name, requests in facts.container_requests:
            for comparison in self.comparisons:
                reason = comparison.holds(requests)
                if reason is not None:
                    return f"container {name} {reason}"
        return None

    def may_raise(self) -> bool:
        return True


class VolumeClaimTest(Condition):
    """The pod mounts a persistent volume claim: ``any`` claim, or one its StatefulSet's
    ``volumeClaimTemplates`` made (``template``)."""

    __slots__ = ("mode",)

    def __init__(self, mode: Literal["any", "template"]) -> None:
        super().__init__(
            "the pod mounts a persistent volume claim"
            if mode == "any"
            else "the pod mounts a claim from its StatefulSet's volumeClaimTemplates"
        )
        self.mode = mode

    def test(self, facts: PodFacts) -> str | None:
        if self.mode == "template":
            found = facts.template_claim()
            if found is None:
                return None
            volume, claim, owner = found
            return f"volume {volume} claims {claim} from StatefulSet {owner}'s volumeClaimTemplates"
        for volume, claim in facts.claims:
            return f"volume {volume} claims {claim}"
        return None

    def guard(self) -> Guard | None:
        return Guard(exact=frozenset({(VOLUME_CLAIM,)}))


class RestartPolicyTest(Condition):
    __slots__ = ("policies",)

    def __init__(self, policies: Sequence[str]) -> None:
        super().__init__(f"restartPolicy is {_quoted(policies)}")
        self.policies = frozenset(policies)

    def test(self, facts: PodFacts) -> str | None:
        policy = facts.restart_policy
        return f"restartPolicy {policy}" if policy in self.policies else None

    def guard(self) -> Guard | None:
        return Guard(exact=frozenset(("restartPolicy", p) for p in self.policies))


class HostNetworkTest(Condition):
    __slots__ = ("wanted",)

    def __init__(self, wanted: bool) -> None:
        super().__init__(f"hostNetwork is {str(wanted).lower()}")
        self.wanted = wanted

    def test(self, facts: PodFacts) -> str | None:
        return (
            f"hostNetwork {str(self.wanted).lower()}" if facts.host_network is self.wanted else None
        )

    def guard(self) -> Guard | None:
        return Guard(exact=frozenset({("hostNetwork", self.wanted)}))


class PrivilegedTest(Condition):
    __slots__ = ("wanted",)

    def __init__(self, wanted: bool) -> None:
        super().__init__("a container is privileged" if wanted else "no container is privileged")
        self.wanted = wanted

    def test(self, facts: PodFacts) -> str | None:
        container = facts.privileged_container()
        if self.wanted:
            return None if container is None else f'container "{container}" is privileged'
        return self.description if container is None else None


def _quoted(items: str | Iterable[str]) -> str:
    if isinstance(items, str):
        return f'"{items}"'
    listed = [f'"{item}"' for item in items]
    return listed[0] if len(listed) == 1 else "one of " + ", ".join(listed)
