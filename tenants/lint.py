"""``tenantgate lint``: every schema and semantic problem of a config file, with file and line.

Beyond what loading refuses (schema errors, unknown profiles or priority classes, a namespace
claimed twice, unsupported settings) lint also reports what loads but is surely a mistake: burst
capacity below the guarantee, rules that can never match, pod group rules an earlier one
always claims first, tenants that claim no namespace,
namespaces that two tenants' selectors both claim, burst classes that would not be the
first preemption victims, and queue settings that cannot work as written (aging that never
boosts, a burst-tier queue without burst capacity), cohorts with a single member and an
over-share class that would not be preempted before the burst class; and bounds or container
defaults that contradict the quota (``tenants.boundslint``), with warnings for limits quotas
pods would hit without defaults. Given what is known of the cluster
(:mod:`tenants.clustercheck`), it also warns about schedulers that do not run there and tenant
namespaces the webhooks are not sent.
Warnings do not make a file fail.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from classifier.grouprules import lint_group_rules
from classifier.rulelint import find_unreachable_rules
from tenants.boundslint import bounds_problems, limits_warnings
from tenants.clustercheck import ClusterFacts, cluster_warnings, profile_schedulers
from tenants.config import (
    NamespaceSelector,
    PolicyError,
    PolicyProblem,
    TenantgateConfig,
    compile_policy,
    field_path,
)
from tenants.configfile import (
    ConfigError,
    ConfigProblem,
    SourceMap,
    locate,
    parse_yaml,
    read_text,
    validate,
)
from tenants.schedulers import named_schedulers

logger = logging.getLogger(__name__)

_NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True, slots=True)
class LintReport:
    """The outcome of linting one file: its problems (empty when clean), a summary, and
    warnings (what is legal but likely to surprise; they do not fail the lint)."""

    file: str
    problems: tuple[ConfigProblem, ...]
    summary: str
    warnings: tuple[ConfigProblem, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems


def scheduler_warnings(config: TenantgateConfig) -> list[PolicyProblem]:
    """Profiles routing to a scheduler the ``schedulers:`` block does not define (offline: the
    cluster is not asked; ``--kubeconfig`` asks it instead)."""
    unknown = named_schedulers(profile_schedulers(config), config.schedulers)
    return [
        PolicyProblem(
            path,
            f"scheduler {scheduler} of profile {profile} is not in the schedulers: block, so "
            "`tenantgate scheduler-config` does not run it; add it there (external: true when "
            "another scheduler serves it), or run lint with --kubeconfig to check the cluster",
        )
        for path, profile, scheduler in unknown
    ]


def lint_file(path: str | Path, *, facts: ClusterFacts | None = None) -> LintReport:
    try:
        text = read_text(path)
    except ConfigError as exc:
        return LintReport(str(path), exc.problems, "")
    return lint_text(text, filename=str(path), facts=facts)


def lint_text(
    text: str, *, filename: str = "<config>", facts: ClusterFacts | None = None
) -> LintReport:
    """Lint config text: every problem found, each with file, line and field.

    With ``facts`` about the cluster, the warnings of :func:`cluster_warnings` too.
    """
    try:
        data, source = parse_yaml(text, filename=filename)
        config = validate(data, source, filename=filename)
    except ConfigError as exc:
        return LintReport(filename, exc.problems, "")
    problems: list[PolicyProblem] = []
    try:
        compile_policy(config)
    except PolicyError as exc:
        problems.extend(exc.problems)
    problems.extend(semantic_problems(config))
    located = ConfigError(locate(problems, source, filename=filename)).problems
    warned = limits_warnings(config)
    if facts is not None:
        warned.extend(cluster_warnings(config, facts))
    else:
        warned.extend(scheduler_warnings(config))
    warnings = ConfigError(locate(warned, source, filename=filename)).problems
    return LintReport(filename, located, "" if located else summarize(config), warnings)


def semantic_problems(config: TenantgateConfig) -> list[PolicyProblem]:
    """What loads but is surely wrong; see the module docstring."""
    problems = list(find_unreachable_rules(config))
    problems.extend(lint_group_rules(config))
    problems.extend(_burst_problems(config))
    problems.extend(_claim_problems(config))
    problems.extend(_class_problems(config))
    problems.extend(_queue_problems(config))
    problems.extend(_cohort_problems(config))
    problems.extend(bounds_problems(config))
    return problems


def _burst_problems(config: TenantgateConfig) -> Iterable[PolicyProblem]:
    for name, tenant in config.tenants.items():
        quota = tenant.quota
        burst = quota.burst
        if burst is None:
            continue
        if burst.ratio is not None and burst.ratio < 1:
            yield PolicyProblem(
                field_path("tenants", name, "quota", "burst", "ratio"),
                f"burst ratio {burst.ratio} is below 1: burst below guaranteed "
                "(the ceiling stays at the guarantee)",
            )
        for resource, maximum in burst.max.items():
            guaranteed = quota.guaranteed.get(resource)
            if guaranteed is not None and maximum < guaranteed:
                yield PolicyProblem(
                    field_path("tenants", name, "quota", "burst", "max", resource),
                    f"burst max {resource}={maximum} is below guaranteed "
                    f"{resource}={guaranteed} (the ceiling stays at the guarantee)",
                )


def _monotone(selector: NamespaceSelector) -> bool:
    # Selectors without NotIn/DoesNotExist that match a subset of a namespace's labels match
    # every superset too, so matching the name label alone is proof they claim the namespace.
    return all(op in ("In", "Exists") for _, op, _ in selector.expressions)


def _claim_problems(config: TenantgateConfig) -> Iterable[PolicyProblem]:
    selectors: dict[str, tuple[str, NamespaceSelector]] = {}
    for name, tenant in config.tenants.items():
        where = ("tenants", name)
        if not tenant.namespaces and tenant.namespaceSelector is None:
            yield PolicyProblem(
                field_path(*where),
                f"tenant {name} claims no namespace: set namespaces or namespaceSelector",
            )
        if tenant.namespaceSelector is None:
            continue
        selector = NamespaceSelector.from_spec(tenant.namespaceSelector)
        key = repr(
            (
                sorted(selector.match_labels),
                sorted((k, op, sorted(values)) for k, op, values in selector.expressions),
            )
        )
        twin = selectors.get(key)
        if twin is not None:
            yield PolicyProblem(
                field_path(*where, "namespaceSelector"),
                f"the same namespaceSelector as tenant {twin[0]}: every namespace it selects "
                "would be claimed by two tenants",
            )
        else:
            selectors[key] = (name, selector)
    for name, tenant in config.tenants.items():
        for index, namespace in enumerate(tenant.namespaces):
            labels = {_NAMESPACE_NAME_LABEL: namespace}
            for other, selector in selectors.values():
                if other != name and _monotone(selector) and selector.matches(labels):
                    yield PolicyProblem(
                        field_path("tenants", name, "namespaces", index),
                        f'namespace "{namespace}" is also claimed by the namespaceSelector of '
                        f"tenant {other}",
                    )


def _class_problems(config: TenantgateConfig) -> Iterable[PolicyProblem]:
    classes = config.priorityClasses
    burst = classes.get(config.burstPriorityClass)
    if burst is None:
        return
    for name, tenant in config.tenants.items():
        guaranteed_name = tenant.priorityClasses.guaranteed
        guaranteed = classes.get(guaranteed_name)
        if guaranteed is None:
            continue
        if guaranteed_name == config.burstPriorityClass or guaranteed.value <= burst.value:
            yield PolicyProblem(
                field_path("tenants", name, "priorityClasses", "guaranteed"),
                f"burst pods must be the first preemption victims: burst class "
                f"{config.burstPriorityClass} (value {burst.value}) must be below "
                f"{guaranteed_name} (value {guaranteed.value})",
            )


def _queue_problems(config: TenantgateConfig) -> Iterable[PolicyProblem]:
    for name, tenant in config.tenants.items():
        queue = tenant.queue
        if queue is None:
            continue
        where = ("tenants", name, "queue")
        if queue.tier == "burst" and tenant.quota.burst is None:
            yield PolicyProblem(
                field_path(*where, "tier"),
                f"tenant {name} has no burst capacity (quota.burst): burst-tier queued pods "
                "would wait for room above a ceiling equal to the guarantee; use tier: "
                "guaranteed or add quota.burst",
            )
        aging = queue.aging
        if aging is None:
            continue
        if aging.step == 0 or aging.maxBoost < aging.step:
            yield PolicyProblem(
                field_path(*where, "aging"),
                f"aging never changes a priority (step {aging.step}, maxBoost "
                f"{aging.maxBoost}): set step > 0 and maxBoost >= step, or remove aging",
            )
        elif aging.maxBoost % aging.step:
            yield PolicyProblem(
                field_path(*where, "aging", "maxBoost"),
                f"maxBoost {aging.maxBoost} is not a multiple of step {aging.step}: the "
                f"boost stops at {aging.maxBoost} after {aging.maxBoost // aging.step + 1} "
                "intervals",
            )


def _cohort_problems(config: TenantgateConfig) -> Iterable[PolicyProblem]:
    members: dict[str, list[str]] = {name: [] for name in config.cohorts}
    for name, tenant in config.tenants.items():
        if tenant.cohort in members:
            members[tenant.cohort].append(name)
    parents = {spec.parent for spec in config.cohorts.values()}
    for cohort, names in members.items():
        if len(names) == 1 and cohort not in parents:
            yield PolicyProblem(
                field_path("cohorts", cohort),
                f"cohort {cohort} has one member ({names[0]}) and no cohort below it: nobody "
                "lends to it or borrows from it; add members or give the tenant quota.burst",
            )
    if not config.cohorts:
        return
    classes = config.priorityClasses
    over = classes.get(config.overShareBurstPriorityClass)
    burst = classes.get(config.burstPriorityClass)
    if over is None or burst is None:
        return
    if config.overShareBurstPriorityClass == config.burstPriorityClass or over.value >= burst.value:
        yield PolicyProblem(
            "overShareBurstPriorityClass",
            f"pods borrowing above their fair share must be preempted first: "
            f"{config.overShareBurstPriorityClass} (value {over.value}) must be below the burst "
            f"class {config.burstPriorityClass} (value {burst.value})",
        )
    if over.preemptionPolicy != "Never":
        yield PolicyProblem(
            "overShareBurstPriorityClass",
            f"{config.overShareBurstPriorityClass} must have preemptionPolicy: Never: a pod on "
            "borrowed room must never preempt the pods it borrows from",
        )


def summarize(config: TenantgateConfig) -> str:
    namespaces = sum(len(t.namespaces) for t in config.tenants.values())
    selectors = sum(1 for t in config.tenants.values() if t.namespaceSelector is not None)
    claimed = f"{namespaces} namespaces" + (f", {selectors} selectors" if selectors else "")
    return (
        f"{len(config.tenants)} tenants ({claimed}), {len(config.profiles)} profiles, "
        f"{len(config.rules)} rules, {len(config.priorityClasses)} priority classes"
    )


__all__ = ["LintReport", "SourceMap", "lint_file", "lint_text", "semantic_problems", "summarize"]
