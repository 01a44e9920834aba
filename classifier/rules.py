"""Classifying a pod: the first matching rule whose profile is allowed, and why.

The explicit opt-in label wins over rules when its profile is allowed. The reason names what
made the rule match; asked to explain, it names every signal of the rule that holds, so a
reader sees all the evidence, not only the first alternative tested.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from classifier.config import PROFILE_LABEL
from classifier.facts import PodFacts
from classifier.quantities import Quantity
from classifier.ruleset import CompiledRule, RuleSet

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
    explain: bool = False,
) -> Classification:
    """First matching rule whose profile is allowed; an allowed opt-in label wins over rules.

    The default profile is always allowed: it is the fallback when nothing else may apply.
    With ``explain``, the reason names every signal of the matching rule that holds (each
    alternative of an ``any``), not only the first one found.
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
    return Classification(
        default_profile,
        "default",
        None,
        "no rule matched",
        problem,
        tuple(skipped),
        facts.known_requests,
    )
