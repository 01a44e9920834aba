"""Classifying a pod: an allowed opt-in label, else the first matching rule whose profile is
allowed, else the profile with the most weighed evidence, else the default profile; and why.

A rule is decisive: among rules the first match wins, and a matched rule beats any evidence.
The reason names what made the rule match, or the evidence with its weights; asked to explain,
it names every signal of the rule that holds, or every profile's evidence.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import field
from typing import Any, Literal

from classifier.config import PROFILE_LABEL
from classifier.evidence import Evidence, Weighing
from classifier.facts import PodFacts
from classifier.quantities import Quantity
from classifier.records import record
from classifier.ruleset import CompiledRule, RuleSet

ClassificationSource = Literal["rule", "opt-in", "evidence", "default"]


@record
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
    # The weighed evidence, when no rule matched and evidence was weighed.
    weighing: Weighing | None = field(default=None, compare=False, repr=False)

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
    explain: bool = False,
    evidence: Evidence | None = None,
) -> Classification:
    """An allowed opt-in label; else the first matching rule whose profile is allowed; else
    the allowed profile with the most evidence when it clears the threshold; else the default.

    The default profile is always allowed: it is the fallback when nothing else may apply.
    With ``explain``, the reason names every signal of the matching rule that holds (each
    alternative of an ``any``), not only the first one found, or every profile's evidence.
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
        if explain:
            reason = "; ".join(rule.condition.signals(facts) or ()) or reason
        return Classification(
            rule.profile,
            "rule",
            rule.name,
            f'rule "{rule.name}": {reason}',
            problem,
            tuple(skipped),
            facts.known_requests,
        )
    weighing = None
    reason = "no rule matched"
    if evidence is not None:
        permitted = None if allowed_profiles is None else allowed_profiles | {default_profile}
        weighing = evidence.weigh(facts, allowed=permitted)
        described = weighing.describe(explain=explain)
        if weighing.profile is not None:
            return Classification(
                weighing.profile,
                "evidence",
                None,
                f"evidence: {described}",
                problem,
                tuple(skipped),
                facts.known_requests,
                weighing,
            )
        reason = (
            f"no rule matched; evidence below the threshold {weighing.threshold}: {described}"
            if described
            else "no rule matched; no evidence"
        )
    return Classification(
        default_profile,
        "default",
        None,
        reason,
        problem,
        tuple(skipped),
        facts.known_requests,
        weighing,
    )
