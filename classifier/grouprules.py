"""A profile's ``podGroup`` rules, compiled into :class:`classifier.podgroups.GroupRule` objects.

A rule reads one pod: pods with the same value of its identity label (and every label of
``matchLabels``, and a controlling owner of one of ``owners`` when given) form one group,
whose size is written in a label or annotation of the pod, or in integer fields of its
controlling owner or of the object of a given kind named by the identity value (an MPIJob's
launcher pod is owned by a Job, but its ``training.kubeflow.org/job-name`` names the MPIJob).

Rules are read for every pod, in the order of the profiles and of each profile's list,
whatever profile the pod is classified into: the members of one group may be classified
apart (an MPIJob's CPU launcher and its GPU workers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from classifier import podview
from classifier.config import ClassifierConfig, ClassifierProblem, PodGroupSpec
from classifier.podgroups import GroupClaim, GroupClaimError, SizeRef, parse_size


@dataclass(frozen=True, slots=True)
class KeySize:
    """The size is a whole number in this label (or annotation) of the pod."""

    key: str
    annotation: bool = False


@dataclass(frozen=True, slots=True)
class FieldsSize:
    """Integer fields (times factors) of an object; ``api_version``/``kind`` None: the owner."""

    fields: tuple[str, ...]
    factors: tuple[str, ...]
    default: int | None = None
    api_version: str | None = None
    kind: str | None = None


@dataclass(frozen=True, slots=True)
class LabelGroupRule:
    """A compiled ``podGroup`` rule (see the module docstring)."""

    name: str
    label: str
    size: KeySize | FieldsSize
    match_labels: tuple[tuple[str, str], ...] = ()
    owners: frozenset[tuple[str, str]] = frozenset()  # (API group, kind)

    def claim(self, pod: Mapping[str, Any], labels: Mapping[str, str]) -> GroupClaim | None:
        value = labels.get(self.label)
        if not value or any(labels.get(k) != v for k, v in self.match_labels):
            return None
        owner = _controlling_owner(pod)
        if self.owners and (owner is None or _group_kind(owner) not in self.owners):
            return None
        key, source = f"{self.name}/{value}", f"rule:{self.name}"
        if isinstance(self.size, KeySize):
            marks = podview.annotations(pod) if self.size.annotation else labels
            return GroupClaim(key, value, source, size=self._size_on(marks, value, self.size))
        ref = self._size_ref(pod, value, owner, self.size)
        return GroupClaim(key, value, source, size_from=ref)

    def _size_on(self, marks: Mapping[str, str], value: str, size: KeySize) -> int:
        raw = marks.get(size.key)
        if not raw:
            raise GroupClaimError(
                f"pod group rule {self.name}: the pod has {self.label}={value} but no "
                f"{size.key} with the group's size"
            )
        return parse_size(raw, size.key)

    def _size_ref(
        self,
        pod: Mapping[str, Any],
        value: str,
        owner: Mapping[str, Any] | None,
        size: FieldsSize,
    ) -> SizeRef:
        namespace = podview.namespace(pod) or ""
        if size.kind is not None and size.api_version is not None:
            return SizeRef(
                size.api_version,
                size.kind,
                namespace,
                value,
                size.fields,
                size.factors,
                size.default,
            )
        if owner is None:
            raise GroupClaimError(
                f"pod group rule {self.name}: the pod has no controlling owner to read the "
                "group's size from"
            )
        return SizeRef(
            podview.string(owner.get("apiVersion")) or "",
            podview.string(owner.get("kind")) or "",
            namespace,
            podview.string(owner.get("name")) or "",
            size.fields,
            size.factors,
            size.default,
        )


def _controlling_owner(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return next(
        (ref for ref in podview.owner_references(pod) if ref.get("controller") is True), None
    )


def _group_kind(owner: Mapping[str, Any]) -> tuple[str, str]:
    api_version = podview.string(owner.get("apiVersion")) or ""
    return (api_version.rpartition("/")[0], podview.string(owner.get("kind")) or "")


def compile_group_rule(spec: PodGroupSpec) -> LabelGroupRule:
    size_spec = spec.size
    size: KeySize | FieldsSize
    if size_spec.label is not None:
        size = KeySize(size_spec.label)
    elif size_spec.annotation is not None:
        size = KeySize(size_spec.annotation, annotation=True)
    elif size_spec.owner is not None:
        owner = size_spec.owner
        size = FieldsSize(tuple(owner.fields), tuple(owner.factors), owner.default)
    else:
        # The model holds exactly one source: this is ``object``.
        named = size_spec.object_
        if named is None:
            raise ValueError(f"pod group rule {spec.name}: no size source")
        size = FieldsSize(
            tuple(named.fields), tuple(named.factors), named.default, named.apiVersion, named.kind
        )
    return LabelGroupRule(
        name=spec.name,
        label=spec.label,
        size=size,
        match_labels=tuple(sorted(spec.matchLabels.items())),
        owners=frozenset((owner.apiGroup, owner.kind) for owner in spec.owners),
    )


def compile_group_rules(
    cfg: ClassifierConfig, problems: list[ClassifierProblem]
) -> tuple[LabelGroupRule, ...]:
    """Every profile's ``podGroup`` rules, in order; a name used twice is a problem."""
    rules: list[LabelGroupRule] = []
    seen: dict[str, str] = {}
    for profile, spec in cfg.profiles.items():
        for index, rule_spec in enumerate(spec.podGroup):
            path = f"profiles.{profile}.podGroup[{index}]"
            earlier = seen.get(rule_spec.name)
            if earlier is not None:
                problems.append(
                    ClassifierProblem(
                        f"{path}.name",
                        f'pod group rule "{rule_spec.name}" is already defined at {earlier}',
                    )
                )
                continue
            seen[rule_spec.name] = path
            rules.append(compile_group_rule(rule_spec))
    return tuple(rules)


def lint_group_rules(cfg: ClassifierConfig) -> list[ClassifierProblem]:
    """Rules an earlier rule always claims first: same label, no narrower match."""
    compiled: list[tuple[str, LabelGroupRule]] = [
        (f"profiles.{profile}.podGroup[{index}]", compile_group_rule(rule_spec))
        for profile, spec in cfg.profiles.items()
        for index, rule_spec in enumerate(spec.podGroup)
    ]
    problems = []
    for index, (path, rule) in enumerate(compiled):
        for earlier_path, earlier in compiled[:index]:
            if (
                earlier.label == rule.label
                and set(earlier.match_labels) <= set(rule.match_labels)
                and (not earlier.owners or bool(rule.owners and rule.owners <= earlier.owners))
            ):
                problems.append(
                    ClassifierProblem(
                        path,
                        f"pod group rule {rule.name} never applies: {earlier.name} "
                        f"({earlier_path}) claims every pod it would; narrow {earlier.name} with "
                        "matchLabels or owners, or move it after this one",
                    )
                )
                break
    return problems
