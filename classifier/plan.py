"""The compiled classifier and its mutation plan: classify -> apply the profile -> annotate.

``compile_classifier`` turns a validated config into a :class:`Classifier` once per config load;
``Classifier.plan`` returns the mutated pod (never touching the input) with the
``tenantgate.io/profile`` and ``tenantgate.io/classified-by`` annotations. Planning a pod that
is already the result of a plan changes nothing, so a re-invoked webhook returns no patch.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from classifier import podview
from classifier.config import (
    CLASSIFIED_BY_ANNOTATION,
    PROFILE_LABEL,
    ClassifierConfig,
    ClassifierConfigError,
    ClassifierProblem,
    PriorityClassSpec,
    ProfileOverrideSpec,
)
from classifier.evidence import Evidence, compile_evidence
from classifier.grouprules import LabelGroupRule, compile_group_rules, lint_group_rules
from classifier.profiles import CompiledProfile, apply_profile, compile_profile
from classifier.records import record
from classifier.rulelint import find_unreachable_rules
from classifier.rules import Classification, classify
from classifier.ruleset import CompiledRule, compile_rules
from classifier.types import JSONObject

logger = logging.getLogger(__name__)

__all__ = ["Classification", "Classifier", "Plan", "compile_classifier"]


@record
class Plan:
    """The outcome of planning one pod.

    ``mutated`` is a new object; its top level, ``metadata``, ``metadata.labels``,
    ``metadata.annotations`` and ``spec`` are its own, but other subtrees may be shared with
    the input pod: copy one before modifying it.
    """

    classification: Classification
    mutated: JSONObject
    notes: tuple[str, ...]
    changed: bool


class Classifier:
    """Rules and profiles compiled once; ``classify`` and ``plan`` do no parsing."""

    __slots__ = (
        "_default",
        "_evidence",
        "_group_rules",
        "_names",
        "_profiles",
        "_rules",
        "config",
    )

    def __init__(
        self,
        *,
        config: ClassifierConfig,
        rules: tuple[CompiledRule, ...],
        profiles: Mapping[str, CompiledProfile],
        evidence: Evidence | None = None,
        group_rules: tuple[LabelGroupRule, ...] = (),
    ) -> None:
        self.config = config
        self._rules = rules
        self._evidence = evidence
        self._group_rules = group_rules
        self._profiles = dict(profiles)
        self._names = frozenset(profiles)
        self._default = config.defaultProfile

    @property
    def profile_names(self) -> frozenset[str]:
        return self._names

    @property
    def priority_classes(self) -> Mapping[str, PriorityClassSpec]:
        return self.config.priorityClasses

    def profile(self, name: str) -> CompiledProfile:
        return self._profiles[name]

    @property
    def group_rules(self) -> tuple[LabelGroupRule, ...]:
        """Every profile's ``podGroup`` rules in order, for ``classifier.podgroups.claim_group``
        (read for every pod, whatever its profile: classifier/grouprules.py)."""
        return self._group_rules

    def classify(
        self,
        pod: Mapping[str, Any],
        *,
        namespace: str,
        allowed_profiles: frozenset[str] | None = None,
        explain: bool = False,
    ) -> Classification:
        """Which profile ``pod`` gets in ``namespace``, and why (every signal, if ``explain``).

        Raises ``PodResourceError`` if a resource rule is evaluated on an invalid quantity.
        """
        return classify(
            pod,
            namespace=namespace,
            rules=self._rules,
            profiles=self._names,
            default_profile=self._default,
            allowed_profiles=allowed_profiles,
            explain=explain,
            evidence=self._evidence,
        )

    def plan(
        self,
        pod: Mapping[str, Any],
        *,
        namespace: str,
        allowed_profiles: frozenset[str] | None = None,
        explain: bool = False,
        notes: bool = True,
    ) -> Plan:
        """Classify ``pod`` and return it with its profile applied; ``pod`` is not modified.

        ``notes=False`` leaves :attr:`Plan.notes` empty: the admission path answers without
        them (only ``tenantgate review`` shows them), so their text is not written.
        """
        classification = self.classify(
            pod, namespace=namespace, allowed_profiles=allowed_profiles, explain=explain
        )
        mutated: JSONObject = dict(pod)
        meta: JSONObject = dict(podview.metadata(pod))
        for key in ("labels", "annotations"):
            if isinstance(meta.get(key), dict):
                meta[key] = dict(meta[key])
        had_metadata = isinstance(pod.get("metadata"), dict)
        had_spec = isinstance(pod.get("spec"), dict)
        mutated["metadata"] = meta
        mutated["spec"] = dict(podview.spec(pod))
        written: list[str] | None = list(classification.skipped) if notes else None
        changed = apply_profile(mutated, self._profiles[classification.profile], notes=written)
        changed |= _annotate(mutated["metadata"], classification)
        if not had_spec and not mutated["spec"]:
            del mutated["spec"]
        if not had_metadata and not mutated["metadata"]:
            del mutated["metadata"]
        return Plan(classification, mutated, tuple(written or ()), changed)

    def with_profile_overrides(
        self, overrides: Mapping[str, ProfileOverrideSpec], *, path: str = "profileOverrides"
    ) -> Classifier:
        """A classifier sharing these compiled rules, with some profiles partly replaced.

        Cheap (only the overridden profiles are compiled), so one per tenant is fine.
        Raises :class:`ClassifierConfigError` naming ``path.<profile>...`` on problems.
        """
        if not overrides:
            return self
        problems: list[ClassifierProblem] = []
        profiles = dict(self._profiles)
        profiles.update(_compile_overrides(self.config, overrides, path=path, problems=problems))
        if problems:
            raise ClassifierConfigError(problems)
        return Classifier(
            config=self.config,
            rules=self._rules,
            profiles=profiles,
            evidence=self._evidence,
            group_rules=self._group_rules,
        )

    def lint(self) -> list[ClassifierProblem]:
        """Rules that can never match, rules that depend on what a profile adds, and pod
        group rules an earlier one always claims first."""
        return [*find_unreachable_rules(self.config), *lint_group_rules(self.config)]


def _annotate(meta: JSONObject, classification: Classification) -> bool:
    wanted = {
        PROFILE_LABEL: classification.profile,
        CLASSIFIED_BY_ANNOTATION: classification.classified_by,
    }
    current = meta.get("annotations")
    have: Mapping[str, Any] = current if isinstance(current, dict) else {}
    if all(have.get(k) == v for k, v in wanted.items()):
        return False
    # plan() gave metadata its own annotations dict, so it can be updated in place.
    if isinstance(current, dict):
        current.update(wanted)
    else:
        meta["annotations"] = wanted
    return True


def _compile_overrides(
    cfg: ClassifierConfig,
    overrides: Mapping[str, ProfileOverrideSpec],
    *,
    path: str,
    problems: list[ClassifierProblem],
) -> dict[str, CompiledProfile]:
    compiled: dict[str, CompiledProfile] = {}
    for name, override in overrides.items():
        where = f"{path}.{name}"
        base = cfg.profiles.get(name)
        if base is None:
            problems.append(
                ClassifierProblem(
                    where, f'unknown profile "{name}" (known: {", ".join(sorted(cfg.profiles))})'
                )
            )
            continue
        try:
            merged = override.apply_to(base)
        except ValidationError as error:
            for item in error.errors():
                loc = ".".join(str(part) for part in item["loc"])
                problems.append(ClassifierProblem(f"{where}.{loc}", item["msg"]))
            continue
        compiled[name] = compile_profile(
            name,
            merged,
            priority_classes=cfg.priorityClasses,
            path=where,
            problems=problems,
        )
    return compiled


def compile_classifier(
    cfg: ClassifierConfig,
    *,
    profile_overrides: Mapping[str, ProfileOverrideSpec] | None = None,
    overrides_path: str = "profileOverrides",
) -> Classifier:
    """Compile rules and profiles once; raise :class:`ClassifierConfigError` listing problems."""
    problems: list[ClassifierProblem] = []
    rules = compile_rules(cfg, problems)
    evidence = compile_evidence(cfg, problems)
    group_rules = compile_group_rules(cfg, problems)
    if cfg.defaultProfile not in cfg.profiles:
        known = ", ".join(sorted(cfg.profiles)) or "none defined"
        problems.append(
            ClassifierProblem(
                "defaultProfile", f'unknown profile "{cfg.defaultProfile}" (known: {known})'
            )
        )
    profiles = {
        name: compile_profile(
            name,
            spec,
            priority_classes=cfg.priorityClasses,
            path=f"profiles.{name}",
            problems=problems,
        )
        for name, spec in cfg.profiles.items()
    }
    if profile_overrides:
        profiles.update(
            _compile_overrides(cfg, profile_overrides, path=overrides_path, problems=problems)
        )
    if problems:
        raise ClassifierConfigError(problems)
    logger.debug("compiled %d rules and %d profiles", len(rules), len(profiles))
    return Classifier(
        config=cfg, rules=rules, profiles=profiles, evidence=evidence, group_rules=group_rules
    )
