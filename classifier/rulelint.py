"""Static analysis of rules for ``tenantgate lint``: rules that can never match.

A rule can never match when an earlier rule matches every pod or has the same condition, when
its own condition is unsatisfiable (an empty ``any``, a condition and its negation, a label both
absent and set...), or - a warning of another kind - when it reads a label or annotation a
profile adds, since a re-invoked webhook would then see a different pod.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from classifier.config import ClassifierConfig, ClassifierProblem, ConditionSpec, KeyMatchSpec
from classifier.patterns import is_glob


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
    "container",
    "volumeClaim",
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
            elif key_spec.exists or key_spec.glob is not None or key_spec.contains is not None:
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
