"""``tenantgate lint`` semantics: every problem with file, line and field (tenants/lint.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tenants.lint import lint_file, lint_text
from tests.tenants.conftest import CONFIG, EXAMPLE_CONFIG

HEADER = """\
priorityClasses:
  tenant-burst: {value: 10}
  tenant-guaranteed: {value: 1000}
profiles:
  general: {}
  web: {}
rules:
  - name: web
    profile: web
    match: {port: 80}
"""


def lint(text: str) -> list[str]:
    report = lint_text(text, filename="c.yaml")
    assert report.ok is (not report.problems)
    return [str(problem) for problem in report.problems]


def test_example_and_test_configs_are_clean() -> None:
    report = lint_file(EXAMPLE_CONFIG)
    assert report.problems == ()
    assert report.summary.startswith("2 tenants (3 namespaces), ")
    assert lint(CONFIG) == []


def test_namespace_claimed_by_two_tenants() -> None:
    text = (
        HEADER
        + """\
tenants:
  a:
    namespaces: [shared, a]
    quota: {guaranteed: {cpu: 1}}
  b:
    namespaces: [b, shared]
    quota: {guaranteed: {cpu: 1}}
"""
    )
    assert lint(text) == [
        'c.yaml:16: tenants.b.namespaces[1]: namespace "shared" is already claimed by tenant "a"'
    ]


def test_namespace_selected_by_another_tenant() -> None:
    text = (
        HEADER
        + """\
tenants:
  a:
    namespaces: [prod]
    quota: {guaranteed: {cpu: 1}}
  b:
    namespaceSelector:
      matchExpressions:
        - {key: kubernetes.io/metadata.name, operator: In, values: [prod, stage]}
    quota: {guaranteed: {cpu: 1}}
  c:
    namespaceSelector:
      matchExpressions:
        - {key: kubernetes.io/metadata.name, operator: In, values: [prod, stage]}
    quota: {guaranteed: {cpu: 1}}
  d:
    namespaceSelector:
      matchExpressions:
        - {key: team, operator: DoesNotExist}
    quota: {guaranteed: {cpu: 1}}
"""
    )
    assert lint(text) == [
        'c.yaml:13: tenants.a.namespaces[0]: namespace "prod" is also claimed by the '
        "namespaceSelector of tenant b",
        "c.yaml:21: tenants.c.namespaceSelector: the same namespaceSelector as tenant b: every "
        "namespace it selects would be claimed by two tenants",
    ]


def test_burst_below_guaranteed() -> None:
    text = (
        HEADER
        + """\
tenants:
  a:
    namespaces: [a]
    quota:
      guaranteed: {cpu: "4", memory: 8Gi}
      burst:
        ratio: 0.5
        max: {memory: 4Gi, nvidia.com/gpu: 2}
"""
    )
    assert lint(text) == [
        "c.yaml:17: tenants.a.quota.burst.ratio: burst ratio 0.5 is below 1: burst below "
        "guaranteed (the ceiling stays at the guarantee)",
        "c.yaml:18: tenants.a.quota.burst.max.memory: burst max memory=4Gi is below guaranteed "
        "memory=8Gi (the ceiling stays at the guarantee)",
    ]


def test_unknown_profiles_everywhere() -> None:
    text = """\
priorityClasses:
  tenant-burst: {value: 10}
  tenant-guaranteed: {value: 1000}
profiles:
  web: {}
defaultProfile: general
rules:
  - name: db
    profile: database
    match: {image: postgres}
tenants:
  a:
    namespaces: [a]
    quota: {guaranteed: {cpu: 1}}
    profiles:
      allowed: [web, batch]
      overrides:
        ml: {schedulerName: x}
"""
    problems = lint(text)
    assert [p.split(": ")[0] for p in problems] == [
        "c.yaml:6",
        "c.yaml:9",
        "c.yaml:16",
        "c.yaml:18",
    ]
    assert problems[0].startswith('c.yaml:6: defaultProfile: unknown profile "general"')
    assert problems[1].startswith("c.yaml:9: rules[0].profile: ")
    assert "database" in problems[1]
    assert problems[2] == 'c.yaml:16: tenants.a.profiles.allowed[1]: unknown profile "batch"'
    assert problems[3] == 'c.yaml:18: tenants.a.profiles.overrides.ml: unknown profile "ml"'


def test_unknown_priority_classes_everywhere() -> None:
    text = """\
priorityClasses:
  tenant-guaranteed: {value: 1000}
profiles:
  general: {priorityClassName: gold}
burstPriorityClass: tenant-burst
tenants:
  a:
    namespaces: [a]
    quota: {guaranteed: {cpu: 1}}
    priorityClasses: {guaranteed: silver, allowed: [bronze]}
"""
    problems = lint(text)
    assert problems[0].startswith("c.yaml:4: profiles.general")
    assert "gold" in problems[0]
    assert problems[1:] == [
        'c.yaml:5: burstPriorityClass: unknown priority class "tenant-burst" '
        "(declare it under priorityClasses)",
        'c.yaml:10: tenants.a.priorityClasses.allowed[0]: unknown priority class "bronze" '
        "(declare it under priorityClasses)",
        'c.yaml:10: tenants.a.priorityClasses.guaranteed: unknown priority class "silver" '
        "(declare it under priorityClasses)",
    ]


def test_rules_that_can_never_match() -> None:
    text = (
        HEADER
        + """\
  - name: everything
    profile: general
  - name: after-everything
    profile: web
    match: {port: 443}
  - name: contradiction
    profile: web
    match:
      all:
        - label: {key: app, exists: true}
        - label: {key: app, absent: true}
"""
    )
    problems = lint(text)
    assert problems[0].startswith("c.yaml:13: rules[2]: ")
    assert 'rule "after-everything" can never match' in problems[0]
    assert problems[1].startswith("c.yaml:16: rules[3]")
    assert 'rule "contradiction" can never match' in problems[1]
    assert len(problems) == 2


def test_tenant_without_namespaces_and_burst_class_ordering() -> None:
    text = """\
priorityClasses:
  tenant-burst: {value: 5000}
  tenant-guaranteed: {value: 1000}
profiles:
  general: {}
tenants:
  lonely:
    quota: {guaranteed: {cpu: 1}}
"""
    assert lint(text) == [
        "c.yaml:7: tenants.lonely: tenant lonely claims no namespace: set namespaces or "
        "namespaceSelector",
        "c.yaml:7: tenants.lonely.priorityClasses.guaranteed: burst pods must be the first "
        "preemption victims: burst class tenant-burst (value 5000) must be below "
        "tenant-guaranteed (value 1000)",
    ]


def test_schema_problems_stop_before_semantics() -> None:
    assert lint(HEADER + "tenants: {a: {quota: {guaranteed: {cpu: x}}}}\n") == [
        'c.yaml:11: tenants.a.quota.guaranteed.cpu: invalid quantity "x": not a number'
    ]


def test_unreadable_file(tmp_path: Path) -> None:
    report = lint_file(tmp_path / "missing.yaml")
    assert not report.ok
    assert str(report.problems[0]).endswith("missing.yaml: cannot read: No such file or directory")


def test_the_kubernetes_ledger_backend_is_accepted() -> None:
    assert lint(HEADER + "ledger: {backend: kubernetes}\n") == []


@pytest.mark.parametrize("backend", ["etcd"])
def test_unsupported_settings(backend: str) -> None:
    (problem,) = lint(HEADER + f"ledger: {{backend: {backend}}}\n")
    assert problem == "c.yaml:11: ledger.backend: Input should be 'memory' or 'kubernetes'"


def test_a_pod_group_rule_an_earlier_one_always_claims_is_reported_at_its_line() -> None:
    rule = "{name: %s, label: example.com/job, size: {label: example.com/size}}"
    text = HEADER.replace(
        "  web: {}\n",
        f"  web:\n    podGroup:\n      - {rule % 'first'}\n      - {rule % 'second'}\n",
    )
    assert lint(text) == [
        "c.yaml:9: profiles.web.podGroup[1]: pod group rule second never applies: first "
        "(profiles.web.podGroup[0]) claims every pod it would; narrow first with matchLabels "
        "or owners, or move it after this one"
    ]
