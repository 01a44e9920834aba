"""Rules: compiling the condition tree once, and classifying a pod (first match wins).

A compiled condition is a small object whose ``test(facts)`` returns the plain-words reason it
holds (``requests nvidia.com/gpu=1 > 0``) or None. ``PodFacts`` reads each fact of the pod at
most once, and only when a condition asks for it (the effective request is the costly one).
Each condition also states a cheap necessary condition (a :class:`Guard`), from which
:class:`RuleIndex` picks, per pod, the few rules worth testing, so classifying does not grow
with the number of rules. This module also holds the static analysis ``tenantgate lint`` uses
to find rules that can never match.
"""

from __future__ import annotations

import bisect
import fnmatch
import logging
import re
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from classifier import podview
from classifier.config import (
    PROFILE_LABEL,
    RESERVED_PREFIX,
    ClassifierConfig,
    ClassifierProblem,
    ConditionSpec,
    KeyMatchSpec,
    parse_resource_expression,
)
from classifier.quantities import Quantity, QuantityError
from classifier.resources import pod_requests

logger = logging.getLogger(__name__)

_GLOB_CHARS = frozenset("*?[")
_DOCKER_HUB = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})
# CronJob controller names a Job "<cronjob>-<scheduled time in minutes>" (8+ digits today);
# the older controller used seconds (10 digits).
_CRONJOB_JOB_NAME = re.compile(r"^(?P<cronjob>.+)-[0-9]{8,10}$")
_ZERO = Quantity.parse(0)


def is_glob(text: str) -> bool:
    return not _GLOB_CHARS.isdisjoint(text)


def compile_globs(patterns: Iterable[str], *, fold_case: bool = False) -> re.Pattern[str]:
    """One regex matching the whole text against any of ``patterns`` (shell globs)."""
    parts = [fnmatch.translate(p.lower() if fold_case else p) for p in patterns]
    return re.compile("|".join(f"(?:{part})" for part in parts) or "(?!)")


# --------------------------------------------------------------------------- pod facts


def image_repository(image: str) -> str:
    """The repository path of an image reference, without registry, tag or digest.

    ``docker.io/library/postgres:16@sha256:...`` and ``postgres`` both give
    ``library/postgres``; ``ghcr.io/org/app:v1`` gives ``org/app``. Lower-cased.
    """
    ref = image.partition("@")[0]
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > slash:
        ref = ref[:colon]
    parts = ref.lower().split("/")
    registry = ""
    # Same rule as the Docker reference parser: the first component is a registry if it
    # looks like a host (has a dot or a port) or is "localhost".
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        registry = parts.pop(0)
    if len(parts) == 1 and (not registry or registry in _DOCKER_HUB):
        parts.insert(0, "library")
    return "/".join(parts)


@dataclass(frozen=True, slots=True)
class Owner:
    """A kind the pod is (indirectly) owned by, and through what."""

    kind: str
    name: str
    via: str = ""  # "ReplicaSet web-5d4f" when derived from a direct owner


class PodFacts:
    """The facts rules test, each computed on first use."""

    __slots__ = (
        "_annotations",
        "_images",
        "_labels",
        "_owners",
        "_ports",
        "_requests",
        "namespace",
        "pod",
    )

    def __init__(self, pod: Mapping[str, Any], *, namespace: str) -> None:
        self.pod = pod
        self.namespace = namespace
        self._labels: Mapping[str, str] | None = None
        self._annotations: Mapping[str, str] | None = None
        self._owners: tuple[Owner, ...] | None = None
        self._images: tuple[tuple[str, str], ...] | None = None
        self._ports: tuple[tuple[int | None, str | None, str], ...] | None = None
        self._requests: Mapping[str, Quantity] | None = None

    @property
    def labels(self) -> Mapping[str, str]:
        if self._labels is None:
            self._labels = podview.labels(self.pod)
        return self._labels

    @property
    def annotations(self) -> Mapping[str, str]:
        if self._annotations is None:
            self._annotations = podview.annotations(self.pod)
        return self._annotations

    @property
    def owners(self) -> tuple[Owner, ...]:
        """Direct owners plus the kinds they imply (ReplicaSet -> Deployment, Job -> CronJob)."""
        if self._owners is None:
            owners: list[Owner] = []
            for ref in podview.owner_references(self.pod):
                kind = podview.string(ref.get("kind")) or ""
                name = podview.string(ref.get("name")) or ""
                if not kind:
                    continue
                owners.append(Owner(kind, name))
                via = f"{kind} {name}".rstrip()
                if kind == "ReplicaSet" and "pod-template-hash" in self.labels:
                    suffix = "-" + self.labels["pod-template-hash"]
                    deployment = name.removesuffix(suffix) if name.endswith(suffix) else ""
                    owners.append(Owner("Deployment", deployment, via))
                elif kind == "Job":
                    found = _CRONJOB_JOB_NAME.match(name)
                    if found is not None:
                        owners.append(Owner("CronJob", found.group("cronjob"), via))
            self._owners = tuple(owners)
        return self._owners

    @property
    def images(self) -> tuple[tuple[str, str], ...]:
        """(image as written, repository path) of every app container."""
        if self._images is None:
            found: list[tuple[str, str]] = []
            for container in podview.containers(self.pod):
                image = podview.string(container.get("image"))
                if image:
                    found.append((image, image_repository(image)))
            self._images = tuple(found)
        return self._images

    @property
    def ports(self) -> tuple[tuple[int | None, str | None, str], ...]:
        """(containerPort, name, container name) of every app container port."""
        if self._ports is None:
            found: list[tuple[int | None, str | None, str]] = []
            for container in podview.containers(self.pod):
                cname = podview.string(container.get("name")) or ""
                for port in podview.objects(container.get("ports")):
                    number = port.get("containerPort")
                    found.append(
                        (
                            number if isinstance(number, int) else None,
                            podview.string(port.get("name")),
                            cname,
                        )
                    )
            self._ports = tuple(found)
        return self._ports

    @property
    def requests(self) -> Mapping[str, Quantity]:
        """The effective pod request; raises ``PodResourceError`` on an invalid quantity."""
        if self._requests is None:
            self._requests = pod_requests(self.pod)
        return self._requests

    @property
    def known_requests(self) -> Mapping[str, Quantity] | None:
        """The effective pod request if a rule has needed it, else None (not computed)."""
        return self._requests

    @property
    def restart_policy(self) -> str:
        return podview.string(podview.spec(self.pod).get("restartPolicy")) or "Always"

    @property
    def host_network(self) -> bool:
        return podview.spec(self.pod).get("hostNetwork") is True

    def privileged_container(self) -> str | None:
        for group in ("initContainers", "containers", "ephemeralContainers"):
            for container in podview.objects(podview.spec(self.pod).get(group)):
                context = podview.obj(container.get("securityContext"))
                if context.get("privileged") is True:
                    return podview.string(container.get("name")) or "?"
        return None


# --------------------------------------------------------------------------- guards

# An exact fact a pod may have, e.g. ("label", "app", "web"), ("namespace", "dev"), ("port", 80).
Atom = tuple[Hashable, ...]
# A fact whose value must start with a literal text, e.g. ("namespace", "team-"), or for images
# (("image", 2), "org/"); the first item names the field, the second is the literal start.
PrefixAtom = tuple[Hashable, str]

_REQUESTS = "resource"  # the field whose values are only known once the requests are
_COARSE = frozenset({"owner", "restartPolicy", "hostNetwork", "has-port"})


@dataclass(frozen=True, slots=True)
class Guard:
    """A necessary condition: a condition can hold, or raise, only if the pod has one of these.

    A condition without one (``not``, ``absent``, a ``*`` glob...) has the guard None: it is a
    candidate for every pod.
    """

    exact: frozenset[Atom] = frozenset()
    prefixes: frozenset[PrefixAtom] = frozenset()

    def __or__(self, other: Guard) -> Guard:
        return Guard(self.exact | other.exact, self.prefixes | other.prefixes)

    @property
    def reads_requests(self) -> bool:
        return any(a[0] == _REQUESTS for a in self.exact) or any(
            p[0] == _REQUESTS for p in self.prefixes
        )

    @property
    def rank(self) -> tuple[bool, bool, int]:
        """Lower is more selective: cheap facts first, rare values first, fewer atoms first."""
        coarse = any(a[0] in _COARSE for a in self.exact) or any(
            p[0] in _COARSE for p in self.prefixes
        )
        return (self.reads_requests, coarse, len(self.exact) + len(self.prefixes))


def literal_prefix(pattern: str) -> str:
    """The text every match of the glob ``pattern`` starts with."""
    for position, char in enumerate(pattern):
        if char in _GLOB_CHARS:
            return pattern[:position]
    return pattern


def any_of_guards(guards: Iterable[Guard | None]) -> Guard | None:
    """The guard of "one of these holds": None as soon as one is None."""
    combined = Guard()
    for guard in guards:
        if guard is None:
            return None
        combined = combined | guard
    return combined


def _values_guard(field_name: Hashable, values: Iterable[str]) -> Guard | None:
    """Exact values as atoms, globs as prefix atoms; None if a glob starts with a wildcard."""
    exact: set[Atom] = set()
    prefixes: set[PrefixAtom] = set()
    for value in values:
        if not is_glob(value):
            exact.add((field_name, value))
            continue
        prefix = literal_prefix(value)
        if not prefix:
            return None
        prefixes.add((field_name, prefix))
    return Guard(frozenset(exact), frozenset(prefixes))


# --------------------------------------------------------------------------- conditions


class Condition:
    """A compiled condition. ``description`` is static text, used for ``not`` and lint."""

    __slots__ = ("description",)

    def __init__(self, description: str) -> None:
        self.description = description

    def test(self, facts: PodFacts) -> str | None:  # pragma: no cover - abstract
        raise NotImplementedError

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
        reasons = []
        for child in self.children:
            reason = child.test(facts)
            if reason is None:
                return None
            reasons.append(reason)
        return " and ".join(reasons) if reasons else "every pod"

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

    def may_raise(self) -> bool:
        return self.child.may_raise()


class KeyTest(Condition):
    """A test on labels or annotations (``what`` says which)."""

    __slots__ = ("key", "key_pattern", "mode", "value_pattern", "values", "what")

    def __init__(self, spec: KeyMatchSpec, *, what: Literal["label", "annotation"]) -> None:
        self.what = what
        self.key = spec.key
        self.key_pattern = compile_globs([spec.key]) if is_glob(spec.key) else None
        self.values: frozenset[str] = frozenset()
        self.value_pattern: re.Pattern[str] | None = None
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
        return None

    def guard(self) -> Guard | None:
        if self.mode == "absent":
            return None
        if self.key_pattern is not None:
            prefix = literal_prefix(self.key)
            return Guard(prefixes=frozenset({(f"{self.what}-key", prefix)})) if prefix else None
        if self.mode == "values":
            return Guard(exact=frozenset((self.what, self.key, v) for v in self.values))
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
        return _values_guard("namespace", self.patterns)


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
        return _values_guard("owner", self.kinds)


class ImageTest(Condition):
    """Globs on the repository path; a pattern with N components matches the last N."""

    __slots__ = ("by_depth",)

    def __init__(self, patterns: Sequence[str]) -> None:
        super().__init__(f"image is {_quoted(patterns)}")
        by_depth: dict[int, list[str]] = {}
        for pattern in patterns:
            by_depth.setdefault(pattern.count("/") + 1, []).append(pattern)
        self.by_depth = tuple(
            (depth, compile_globs(group, fold_case=True), tuple(group))
            for depth, group in sorted(by_depth.items())
        )

    def test(self, facts: PodFacts) -> str | None:
        for image, repository in facts.images:
            parts = repository.split("/")
            for depth, pattern, group in self.by_depth:
                tail = "/".join(parts[-depth:])
                if pattern.match(tail):
                    matched = next(p for p in group if fnmatch.fnmatchcase(tail, p.lower()))
                    return f'image {image} matches "{matched}"'
        return None

    def guard(self) -> Guard | None:
        # Per depth, the pod's fact is the last ``depth`` components of a repository path.
        return any_of_guards(
            _values_guard(("image", depth), [p.lower() for p in group])
            for depth, _, group in self.by_depth
        )


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
            _values_guard(_REQUESTS, [c.name for c in self.comparisons])
            if self.comparisons
            else None
        )

    def may_raise(self) -> bool:
        return True


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


# --------------------------------------------------------------------------- compiling


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
        parts.append(ImageTest(spec.image))
    if spec.port is not None:
        parts.append(PortTest(spec.port))
    if spec.resource is not None:
        comparisons = []
        for i, text in enumerate(spec.resource):
            name, op, quantity = parse_resource_expression(text)
            try:
                bound = Quantity.parse(quantity)
            except QuantityError as error:
                problems.append(ClassifierProblem(f"{path}.resource[{i}]", str(error)))
                continue
            pattern = compile_globs([name]) if is_glob(name) else None
            comparisons.append(ResourceComparison(name, op, bound, pattern))
        parts.append(ResourceTest(comparisons))
    if spec.restartPolicy is not None:
        parts.append(RestartPolicyTest(spec.restartPolicy))
    if spec.hostNetwork is not None:
        parts.append(HostNetworkTest(spec.hostNetwork))
    if spec.privileged is not None:
        parts.append(PrivilegedTest(spec.privileged))
    return parts[0] if len(parts) == 1 else AllOf(parts)


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


# --------------------------------------------------------------------------- indexing


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
        if "hostNetwork" in fields:
            found.append(get(("hostNetwork", facts.host_network)))
        for positions in found:
            if positions is not None:
                hits.update(positions)
        for field_name, (lengths, table) in self._prefixes.items():
            if field_name != _REQUESTS:
                _prefix_hits(hits, self._values(facts, field_name), lengths, table)
        return hits

    def _request_hits(self, facts: PodFacts) -> set[int] | frozenset[int]:
        try:
            requests = facts.requests
        except Exception:  # any failure is the rule's to raise, when it is tested
            return self._deferred
        hits: set[int] = set()
        for name in requests:
            found = self._exact.get((_REQUESTS, name))
            if found is not None:
                hits.update(found)
        if _REQUESTS in self._prefixes:
            lengths, table = self._prefixes[_REQUESTS]
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


# --------------------------------------------------------------------------- classifying


ClassificationSource = Literal["rule", "opt-in", "default"]


@dataclass(frozen=True, slots=True)
class Classification:
    """Which profile a pod gets, and why, in plain words.

    ``problem`` is set when the pod asked for a profile (opt-in label) that is unknown or not
    allowed: the pod is then classified by the rules, and the caller may deny with ``problem``.
    ``skipped`` lists rules that matched but name a profile that is not allowed.
    """

    profile: str
    source: ClassificationSource
    rule: str | None
    reason: str
    problem: str | None = None
    skipped: tuple[str, ...] = field(default=())
    # The pod's effective request when a rule computed it, so that it is not computed twice.
    requests: Mapping[str, Quantity] | None = field(default=None, compare=False, repr=False)

    @property
    def classified_by(self) -> str:
        """Value of the ``tenantgate.io/classified-by`` annotation."""
        return f"rule/{self.rule}" if self.source == "rule" else self.source


def classify(
    pod: Mapping[str, Any],
    *,
    namespace: str,
    rules: Sequence[CompiledRule],
    profiles: Collection[str],
    default_profile: str,
    allowed_profiles: frozenset[str] | None = None,
) -> Classification:
    """First matching rule whose profile is allowed; an allowed opt-in label wins over rules.

    The default profile is always allowed: it is the fallback when nothing else may apply.
    """
    facts = PodFacts(pod, namespace=namespace)

    def allowed(profile: str) -> bool:
        return allowed_profiles is None or profile in allowed_profiles or profile == default_profile

    problem = None
    requested = facts.labels.get(PROFILE_LABEL)
    if requested:
        if requested not in profiles:
            problem = (
                f'label {PROFILE_LABEL} asks for unknown profile "{requested}" '
                f"(known: {', '.join(sorted(profiles))})"
            )
        elif not allowed(requested):
            choices = sorted((allowed_profiles or frozenset()) | {default_profile})
            problem = (
                f'label {PROFILE_LABEL} asks for profile "{requested}", which is not allowed '
                f"here (allowed: {', '.join(choices)})"
            )
        else:
            return Classification(
                requested, "opt-in", None, f"opt-in label {PROFILE_LABEL}={requested}"
            )
    skipped: list[str] = []
    index = rules.rule_index if isinstance(rules, RuleSet) else None
    candidates = rules if index is None else index.candidates(facts)
    for rule in candidates:
        reason = rule.condition.test(facts)
        if reason is None:
            continue
        if not allowed(rule.profile):
            skipped.append(
                f'rule "{rule.name}" matched but profile "{rule.profile}" is not allowed'
            )
            continue
        return Classification(
            rule.profile,
            "rule",
            rule.name,
            f'rule "{rule.name}": {reason}',
            problem,
            tuple(skipped),
            facts.known_requests,
        )
    return Classification(
        default_profile,
        "default",
        None,
        "no rule matched",
        problem,
        tuple(skipped),
        facts.known_requests,
    )


# --------------------------------------------------------------------------- lint


def find_unreachable_rules(cfg: ClassifierConfig) -> list[ClassifierProblem]:
    """Rules that can never match: shadowed by an earlier rule, or unsatisfiable themselves.

    Also flags rules reading a label or annotation a profile adds, since a re-invoked webhook
    would then see a different pod and could change its mind.
    """
    problems: list[ClassifierProblem] = []
    catch_all: tuple[int, str] | None = None
    # Models holding lists are not hashable: compare with == against each earlier rule.
    earlier: list[tuple[ConditionSpec | None, int, str]] = []
    for index, rule in enumerate(cfg.rules):
        path = f"rules[{index}]"
        if catch_all is not None:
            problems.append(
                ClassifierProblem(
                    path,
                    f'rule "{rule.name}" can never match: rule "{catch_all[1]}" '
                    f"(rules[{catch_all[0]}]) before it matches every pod",
                )
            )
            continue
        same = next((e for e in earlier if e[0] == rule.match), None)
        if same is not None:
            problems.append(
                ClassifierProblem(
                    path,
                    f'rule "{rule.name}" can never match: rule "{same[2]}" (rules[{same[1]}]) '
                    "before it has the same condition",
                )
            )
            continue
        earlier.append((rule.match, index, rule.name))
        verdict = _analyse(rule.match, f"{path}.match")
        if verdict.never is not None:
            problems.append(
                ClassifierProblem(
                    verdict.never[0], f'rule "{rule.name}" can never match: {verdict.never[1]}'
                )
            )
        elif verdict.always:
            catch_all = (index, rule.name)
    problems.extend(_self_dependent_rules(cfg))
    return problems


@dataclass(frozen=True, slots=True)
class _Analysis:
    always: bool = False
    never: tuple[str, str] | None = None  # (field path, why)


_ALWAYS = _Analysis(always=True)
_UNKNOWN = _Analysis()


def _analyse(spec: ConditionSpec | None, path: str) -> _Analysis:
    """Three-valued static analysis: matches every pod, no pod, or it depends on the pod."""
    if spec is None:
        return _ALWAYS
    parts: list[tuple[str, _Analysis]] = []
    if spec.all_ is not None:
        parts.append((f"{path}.all", _analyse_all(spec.all_, f"{path}.all")))
    if spec.any_ is not None:
        parts.append((f"{path}.any", _analyse_any(spec.any_, f"{path}.any")))
    if spec.not_ is not None:
        inner = _analyse(spec.not_, f"{path}.not")
        if inner.always:
            parts.append(
                (
                    f"{path}.not",
                    _Analysis(
                        never=(f"{path}.not", "it negates a condition that matches every pod")
                    ),
                )
            )
        elif inner.never is not None:
            parts.append((f"{path}.not", _ALWAYS))
        else:
            parts.append((f"{path}.not", _UNKNOWN))
    leaves = _leaf_specs(spec)
    if leaves:
        parts.append((path, _UNKNOWN))
    for _, analysis in parts:
        if analysis.never is not None:
            return analysis
    # Several keys in one condition are an implicit "all": check them against each other too.
    contradiction = _contradiction([*leaves, *(spec.all_ or [])])
    if contradiction is not None:
        return _Analysis(never=(path, contradiction))
    return _ALWAYS if parts and all(a.always for _, a in parts) else _UNKNOWN


def _analyse_all(children: Sequence[ConditionSpec], path: str) -> _Analysis:
    analyses = [_analyse(child, f"{path}[{i}]") for i, child in enumerate(children)]
    for analysis in analyses:
        if analysis.never is not None:
            return analysis
    contradiction = _contradiction(children)
    if contradiction is not None:
        return _Analysis(never=(path, contradiction))
    return _ALWAYS if all(a.always for a in analyses) else _UNKNOWN


def _analyse_any(children: Sequence[ConditionSpec], path: str) -> _Analysis:
    if not children:
        return _Analysis(never=(path, "an empty any: [] matches nothing"))
    analyses = [_analyse(child, f"{path}[{i}]") for i, child in enumerate(children)]
    if any(a.always for a in analyses):
        return _ALWAYS
    if all(a.never is not None for a in analyses):
        return _Analysis(never=(path, "none of its any: alternatives can match"))
    return _UNKNOWN


_LEAF_FIELDS = (
    "label",
    "annotation",
    "namespace",
    "ownerKind",
    "image",
    "port",
    "resource",
    "restartPolicy",
    "hostNetwork",
    "privileged",
)


def _leaf_specs(spec: ConditionSpec) -> list[ConditionSpec]:
    """The leaf tests of one condition object, each as its own single-key condition."""
    return [
        ConditionSpec.model_validate({name: getattr(spec, name)})
        for name in _LEAF_FIELDS
        if getattr(spec, name) is not None
    ]


def _contradiction(children: Sequence[ConditionSpec]) -> str | None:
    """Two conjuncts that cannot both hold (``exists`` + ``absent`` of one label, ...)."""
    # What each exactly-keyed label/annotation must be: None = absent, a set = one of values,
    # "set" = present with any value.
    keys: dict[tuple[str, str], tuple[frozenset[str] | str | None, str]] = {}
    scalars: dict[str, tuple[Any, str]] = {}
    for i, child in enumerate(children):
        for other in children[:i]:
            if (child.not_ is not None and child.not_ == other) or (
                other.not_ is not None and other.not_ == child
            ):
                return "it requires a condition and its negation"
        for what in ("label", "annotation"):
            key_spec: KeyMatchSpec | None = getattr(child, what)
            if key_spec is None or is_glob(key_spec.key):
                continue
            want: frozenset[str] | str | None
            if key_spec.absent:
                want = None
            elif key_spec.exists or key_spec.glob is not None:
                want = "set"
            else:
                want = frozenset(
                    [key_spec.value] if key_spec.value is not None else key_spec.values or []
                )
            slot = (what, key_spec.key)
            if slot in keys:
                have, first = keys[slot]
                clash = (have is None) != (want is None) or (
                    isinstance(have, frozenset) and isinstance(want, frozenset) and not have & want
                )
                if clash:
                    return f"{what} {key_spec.key} cannot satisfy both {first} and {_wanted(want)}"
                if isinstance(want, frozenset) and isinstance(have, frozenset):
                    keys[slot] = (have & want, first)
                elif isinstance(want, frozenset):
                    keys[slot] = (want, first)
            else:
                keys[slot] = (want, _wanted(want))
        for name in ("namespace", "restartPolicy", "hostNetwork", "privileged"):
            value = getattr(child, name)
            if value is None:
                continue
            if name == "namespace" and any(is_glob(v) for v in value):
                continue
            wanted = frozenset(value) if isinstance(value, list) else frozenset([value])
            if name in scalars:
                have_set, first = scalars[name]
                if not have_set & wanted:
                    return f"{name} cannot be both {first} and {_wanted(wanted)}"
                scalars[name] = (have_set & wanted, first)
            else:
                scalars[name] = (wanted, _wanted(wanted))
    return None


def _wanted(want: frozenset[Any] | str | None) -> str:
    if want is None:
        return "absent"
    if isinstance(want, str):
        return "set"
    values = sorted(str(v).lower() if isinstance(v, bool) else str(v) for v in want)
    return values[0] if len(values) == 1 else "one of " + ", ".join(values)


def _self_dependent_rules(cfg: ClassifierConfig) -> list[ClassifierProblem]:
    added: dict[tuple[str, str], str] = {}
    for name, spec in cfg.profiles.items():
        for key in spec.labels:
            added.setdefault(("label", key), name)
        for key in spec.annotations:
            added.setdefault(("annotation", key), name)
    problems = []
    for index, rule in enumerate(cfg.rules):
        for where, key_spec, what in _key_tests(rule.match, f"rules[{index}].match"):
            for (kind, key), profile in added.items():
                if kind == what and fnmatch.fnmatchcase(key, key_spec.key):
                    problems.append(
                        ClassifierProblem(
                            f"{where}.{what}.key",
                            f'profile "{profile}" adds {what} {key}, so a pod this webhook has '
                            "already mutated could be classified differently when re-invoked",
                        )
                    )
    return problems


def _key_tests(spec: ConditionSpec | None, path: str) -> Iterable[tuple[str, KeyMatchSpec, str]]:
    if spec is None:
        return
    if spec.label is not None:
        yield path, spec.label, "label"
    if spec.annotation is not None:
        yield path, spec.annotation, "annotation"
    for i, child in enumerate(spec.all_ or []):
        yield from _key_tests(child, f"{path}.all[{i}]")
    for i, child in enumerate(spec.any_ or []):
        yield from _key_tests(child, f"{path}.any[{i}]")
    yield from _key_tests(spec.not_, f"{path}.not")
