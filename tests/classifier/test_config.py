"""Config models (shape), compilation (cross-references) and the lint analysis of rules."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from classifier import config as config_module
from classifier.config import (
    ClassifierConfig,
    ClassifierConfigError,
    PriorityClassSpec,
    ProfileOverrideSpec,
    ProfileSpec,
    parse_resource_expression,
    set_priority_class,
)
from classifier.plan import compile_classifier
from classifier.rulelint import find_unreachable_rules
from classifier.types import JSONObject


def make(**sections: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "priorityClasses": {"low": {"value": 10}},
        "profiles": {"general": {}, "gpu": {"priorityClassName": "low"}},
        "rules": [],
    }
    data.update(sections)
    return data


def rule(match: Any, *, name: str = "r", profile: str = "gpu") -> dict[str, Any]:
    return {"name": name, "profile": profile, "match": match}


# --------------------------------------------------------------------------- shape


def test_defaults_and_camel_case_fields() -> None:
    cfg = ClassifierConfig.model_validate(make())
    assert cfg.apiVersion == "tenantgate.io/v1alpha1"
    assert cfg.kind == "TenantgateConfig"
    assert cfg.defaultProfile == "general"
    assert cfg.priorityClasses["low"] == PriorityClassSpec(value=10)
    assert cfg.priorityClasses["low"].preemptionPolicy == "PreemptLowerPriority"


def test_condition_keywords_round_trip_by_alias() -> None:
    cfg = ClassifierConfig.model_validate(
        make(rules=[rule({"any": [{"image": "x"}, {"not": {"all": [{"port": 80}]}}]})])
    )
    match = cfg.rules[0].match
    assert match is not None
    dumped = match.model_dump(exclude_none=True)
    assert dumped == {"any": [{"image": ["x"]}, {"not": {"all": [{"port": [80]}]}}]}


def test_scalars_are_accepted_for_lists() -> None:
    cfg = ClassifierConfig.model_validate(
        make(rules=[rule({"namespace": "ns", "resource": "memory >= 8Gi", "port": "http"})])
    )
    match = cfg.rules[0].match
    assert match is not None
    assert match.namespace == ["ns"]
    assert match.resource == ["memory >= 8Gi"]
    assert match.port == ["http"]


INVALID: list[tuple[str, dict[str, Any], str, str]] = [
    ("empty condition", make(rules=[rule({})]), "rules.0.match", "at least one of"),
    (
        "two key tests",
        make(rules=[rule({"label": {"key": "a", "value": "b", "exists": True}})]),
        "rules.0.match.label",
        "exactly one of value, values, glob, contains, exists, absent (got value, exists)",
    ),
    (
        "no key test",
        make(rules=[rule({"label": {"key": "a"}})]),
        "rules.0.match.label",
        "set exactly one of",
    ),
    (
        "exists false",
        make(rules=[rule({"label": {"key": "a", "exists": False}})]),
        "rules.0.match.label.exists",
        "Input should be True",
    ),
    (
        "bad resource expression",
        make(rules=[rule({"any": [{"image": "x"}, {"resource": "gpu >> 1"}]})]),
        "rules.0.match.any.1.resource.0",
        "is not a resource comparison: write NAME OP QUANTITY",
    ),
    ("port out of range", make(rules=[rule({"port": 0})]), "rules.0.match.port", "1-65535"),
    (
        "empty list of alternatives",
        make(rules=[rule({"namespace": []})]),
        "rules.0.match.namespace",
        "at least 1 item",
    ),
    (
        "unknown restart policy",
        make(rules=[rule({"restartPolicy": "Sometimes"})]),
        "rules.0.match.restartPolicy.0",
        "Input should be",
    ),
    ("bad rule name", make(rules=[rule({"port": 80}, name="a b")]), "rules.0.name", "pattern"),
    (
        "extra field",
        make(rules=[rule({"port": 80}) | {"priority": 1}]),
        "rules.0.priority",
        "Extra inputs are not permitted",
    ),
    (
        "toleration Exists with a value",
        make(
            profiles={
                "general": {"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}
            }
        ),
        "profiles.general.tolerations.0",
        "value must be empty when operator is Exists",
    ),
    (
        "toleration without key must be Exists",
        make(profiles={"general": {"tolerations": [{"effect": "NoSchedule"}]}}),
        "profiles.general.tolerations.0",
        "operator must be Exists when key is empty",
    ),
    (
        "tolerationSeconds without NoExecute",
        make(
            profiles={
                "general": {
                    "tolerations": [{"key": "k", "operator": "Exists", "tolerationSeconds": 5}]
                }
            }
        ),
        "profiles.general.tolerations.0",
        "effect must be NoExecute when tolerationSeconds is set",
    ),
    (
        "node selector Gt needs an integer",
        make(
            profiles={
                "general": {
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {"key": "cores", "operator": "Gt", "values": ["x"]}
                                        ]
                                    }
                                ]
                            }
                        }
                    }
                }
            }
        ),
        "profiles.general.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms.0.matchExpressions.0",
        "operator Gt needs exactly one integer value",
    ),
    (
        "label selector In without values",
        make(
            profiles={
                "general": {
                    "affinity": {
                        "podAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "topologyKey": "zone",
                                    "labelSelector": {
                                        "matchExpressions": [{"key": "a", "operator": "In"}]
                                    },
                                }
                            ]
                        }
                    }
                }
            }
        ),
        "profiles.general.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution.0"
        ".labelSelector.matchExpressions.0",
        "values must be non-empty with operator In",
    ),
    (
        "spread with a fixed label selector",
        make(
            profiles={
                "general": {
                    "topologySpreadConstraints": [
                        {"topologyKey": "zone", "labelSelector": {"matchLabels": {"a": "b"}}}
                    ]
                }
            }
        ),
        "profiles.general.topologySpreadConstraints.0.labelSelector",
        "Extra inputs are not permitted",
    ),
    (
        "minDomains needs DoNotSchedule",
        make(
            profiles={
                "general": {"topologySpreadConstraints": [{"topologyKey": "zone", "minDomains": 2}]}
            }
        ),
        "profiles.general.topologySpreadConstraints.0",
        "minDomains can only be set with whenUnsatisfiable: DoNotSchedule",
    ),
    (
        "two spreads on one key",
        make(
            profiles={
                "general": {
                    "topologySpreadConstraints": [{"topologyKey": "zone"}, {"topologyKey": "zone"}]
                }
            }
        ),
        "profiles.general.topologySpreadConstraints",
        "two spread constraints on the same topologyKey",
    ),
    (
        "reserved label",
        make(profiles={"general": {"labels": {"tenantgate.io/tier": "x"}}}),
        "profiles.general.labels",
        "the tenantgate.io/ prefix is reserved",
    ),
    (
        "invalid label value",
        make(profiles={"general": {"labels": {"team": "a b"}}}),
        "profiles.general.labels",
        "is not a valid label value",
    ),
    (
        "invalid annotation key",
        make(profiles={"general": {"annotations": {"bad key": "x"}}}),
        "profiles.general.annotations",
        "is not a valid qualified name",
    ),
    (
        "enforce twice",
        make(profiles={"general": {"schedulerName": "s", "enforce": ["schedulerName"] * 2}}),
        "profiles.general.enforce",
        "enforce lists a field twice",
    ),
    (
        "enforce tolerations",
        make(profiles={"general": {"enforce": ["tolerations"]}}),
        "profiles.general.enforce.0",
        "Input should be",
    ),
    (
        "profile name not a label value",
        make(profiles={"general": {}, "no good": {}}),
        "profiles",
        "profile name 'no good' is not a valid label value",
    ),
    (
        "priority above user range",
        make(priorityClasses={"huge": {"value": 1_000_000_001}}),
        "priorityClasses",
        "above the highest user-definable priority 1000000000",
    ),
    (
        "system- prefix",
        make(priorityClasses={"system-mine": {"value": 1}}),
        "priorityClasses",
        "the system- prefix is reserved",
    ),
    (
        "built-in class with another value",
        make(priorityClasses={"system-node-critical": {"value": 1}}),
        "priorityClasses",
        "built-in priority class system-node-critical has value 2000001000",
    ),
    (
        "unknown preemption policy",
        make(priorityClasses={"x": {"value": 1, "preemptionPolicy": "Sometimes"}}),
        "priorityClasses.x.preemptionPolicy",
        "Input should be",
    ),
    ("wrong apiVersion", make(apiVersion="v1"), "apiVersion", "Input should be"),
]


@pytest.mark.parametrize(
    ("data", "loc", "message"), [case[1:] for case in INVALID], ids=[case[0] for case in INVALID]
)
def test_invalid_shapes_name_the_field(data: dict[str, Any], loc: str, message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ClassifierConfig.model_validate(data)
    found = {
        ".".join(str(part) for part in error["loc"]): error["msg"]
        for error in caught.value.errors()
    }
    assert loc in found, found
    assert message in found[loc]


def test_builtin_system_classes_are_accepted_with_their_values() -> None:
    cfg = ClassifierConfig.model_validate(
        make(priorityClasses={"system-cluster-critical": {"value": 2_000_000_000}})
    )
    assert cfg.priorityClasses["system-cluster-critical"].value == 2_000_000_000


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("nvidia.com/gpu > 0", ("nvidia.com/gpu", ">", "0")),
        ("memory>=8Gi", ("memory", ">=", "8Gi")),
        (" gpu.intel.com/*  !=  2 ", ("gpu.intel.com/*", "!=", "2")),
        ("cpu<=500m", ("cpu", "<=", "500m")),
    ],
)
def test_parse_resource_expression(text: str, parts: tuple[str, str, str]) -> None:
    assert parse_resource_expression(text) == parts


def test_json_schema_is_generated() -> None:
    schema = ClassifierConfig.model_json_schema()
    assert "rules" in schema["properties"]
    condition = schema["$defs"]["ConditionSpec"]["properties"]
    assert set(condition) >= {"all", "any", "not", "image", "resource", "ownerKind"}
    assert condition["image"]["anyOf"][0] == {"type": "string"}


def test_subclass_adds_sections_and_still_compiles() -> None:
    class Whole(ClassifierConfig):
        tenants: dict[str, int] = {}

    cfg = Whole.model_validate(make(tenants={"a": 1}))
    assert cfg.tenants == {"a": 1}
    classifier = compile_classifier(cfg)
    assert classifier.profile_names == frozenset({"general", "gpu"})
    with pytest.raises(ValidationError):
        ClassifierConfig.model_validate(make(tenants={"a": 1}))


def classifier_imports() -> dict[str, set[str]]:
    """Every module of the classifier package and the package modules it imports, anywhere
    in its body (imports inside functions and under TYPE_CHECKING count too)."""
    package = Path(config_module.__file__).parent
    graph: dict[str, set[str]] = {}
    for path in package.glob("*.py"):
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == "classifier":
                    imported.update(f"classifier.{alias.name}" for alias in node.names)
                elif node.module.startswith("classifier."):
                    imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(a.name for a in node.names if a.name.startswith("classifier."))
        graph[f"classifier.{path.stem}"] = imported
    return graph


def test_the_classifier_package_has_no_import_cycle() -> None:
    graph = classifier_imports()
    assert "classifier.plan" not in graph["classifier.config"]

    def reaches(start: str, target: str, seen: set[str]) -> bool:
        for module in graph.get(start, set()) - seen:
            seen.add(module)
            if module == target or reaches(module, target, seen):
                return True
        return False

    cycles = [module for module in graph if reaches(module, module, set())]
    assert cycles == []


# --------------------------------------------------------------------------- compiling


def problems_of(data: dict[str, Any], **kwargs: Any) -> dict[str, str]:
    cfg = ClassifierConfig.model_validate(data)
    with pytest.raises(ClassifierConfigError) as caught:
        compile_classifier(cfg, **kwargs)
    return {problem.path: problem.message for problem in caught.value.problems}


SEMANTIC: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "unknown profile in a rule",
        make(
            rules=[rule({"port": 80}, profile="gpu"), rule({"port": 81}, name="b", profile="web")]
        ),
        "rules[1].profile",
        'unknown profile "web" (known: general, gpu)',
    ),
    (
        "unknown priority class in a profile",
        make(profiles={"general": {"priorityClassName": "high"}}),
        "profiles.general.priorityClassName",
        'unknown priority class "high" (known: low)',
    ),
    (
        "unknown default profile",
        make(defaultProfile="fallback"),
        "defaultProfile",
        'unknown profile "fallback" (known: general, gpu)',
    ),
    (
        "duplicate rule names",
        make(rules=[rule({"port": 80}), rule({"port": 81})]),
        "rules[1].name",
        'duplicate rule name "r" (also rules[0])',
    ),
    (
        "invalid quantity",
        make(rules=[rule({"any": [{"port": 80}, {"resource": ["cpu > 1", "memory > 12XY"]}]})]),
        "rules[0].match.any[1].resource[1]",
        'invalid quantity "12XY"',
    ),
    (
        "reserved key in a condition",
        make(rules=[rule({"not": {"annotation": {"key": "tenantgate.io/tier", "exists": True}}})]),
        "rules[0].match.not.annotation.key",
        "keys under tenantgate.io/ are written by tenantgate",
    ),
    (
        "opt-in label in a condition",
        make(rules=[rule({"label": {"key": "tenantgate.io/profile", "value": "gpu"}})]),
        "rules[0].match.label.key",
        "is the opt-in label and is handled before the rules",
    ),
    (
        "enforce of an unset field",
        make(profiles={"general": {"enforce": ["nodeSelector"]}}),
        "profiles.general.enforce",
        "enforces nodeSelector, but the profile does not set it",
    ),
]


@pytest.mark.parametrize(
    ("data", "path", "message"),
    [case[1:] for case in SEMANTIC],
    ids=[case[0] for case in SEMANTIC],
)
def test_semantic_problems_name_the_field(data: dict[str, Any], path: str, message: str) -> None:
    found = problems_of(data)
    assert path in found, found
    assert message in found[path]


def test_every_problem_is_reported_at_once() -> None:
    data = make(
        defaultProfile="nope",
        profiles={"general": {"priorityClassName": "nope"}},
        rules=[rule({"port": 80}, profile="nope")],
    )
    assert set(problems_of(data)) == {
        "defaultProfile",
        "profiles.general.priorityClassName",
        "rules[0].profile",
    }


def test_error_message_lists_problems_one_per_line() -> None:
    with pytest.raises(ClassifierConfigError) as caught:
        compile_classifier(ClassifierConfig.model_validate(make(defaultProfile="x")))
    assert str(caught.value) == 'defaultProfile: unknown profile "x" (known: general, gpu)'


def test_overrides_are_checked_under_their_path() -> None:
    data = make()
    found = problems_of(
        data,
        profile_overrides={
            "web": ProfileOverrideSpec(schedulerName="s"),
            "gpu": ProfileOverrideSpec(priorityClassName="high"),
        },
        overrides_path="tenants.a.profiles.overrides",
    )
    assert found == {
        "tenants.a.profiles.overrides.web": 'unknown profile "web" (known: general, gpu)',
        "tenants.a.profiles.overrides.gpu.priorityClassName": (
            'unknown priority class "high" (known: low)'
        ),
    }


def test_override_replaces_only_the_fields_it_sets() -> None:
    base = ProfileSpec.model_validate(
        {
            "schedulerName": "a",
            "nodeSelector": {"pool": "x"},
            "tolerations": [{"operator": "Exists"}],
        }
    )
    merged = ProfileOverrideSpec(nodeSelector={"pool": "y"}).apply_to(base)
    assert merged.schedulerName == "a"
    assert merged.nodeSelector == {"pool": "y"}
    assert len(merged.tolerations) == 1
    cleared = ProfileOverrideSpec(tolerations=[]).apply_to(base)
    assert cleared.tolerations == []


# --------------------------------------------------------------------------- set_priority_class


def test_set_priority_class_writes_the_three_fields_on_a_copy_of_spec() -> None:
    shared_spec: JSONObject = {"containers": [], "priority": 0}
    pod: JSONObject = {"spec": shared_spec}
    spec = PriorityClassSpec(value=10, preemptionPolicy="Never")
    assert set_priority_class(pod, name="burst", spec=spec) is True
    assert pod["spec"] == {
        "containers": [],
        "priorityClassName": "burst",
        "priority": 10,
        "preemptionPolicy": "Never",
    }
    assert shared_spec == {"containers": [], "priority": 0}
    assert set_priority_class(pod, name="burst", spec=spec) is False


def test_set_priority_class_creates_spec() -> None:
    pod: JSONObject = {}
    set_priority_class(pod, name="x", spec=PriorityClassSpec(value=1))
    assert pod == {
        "spec": {
            "priorityClassName": "x",
            "priority": 1,
            "preemptionPolicy": "PreemptLowerPriority",
        }
    }


# --------------------------------------------------------------------------- lint


def lint(rules: list[dict[str, Any]], **sections: Any) -> list[tuple[str, str]]:
    cfg = ClassifierConfig.model_validate(make(rules=rules, **sections))
    return [(p.path, p.message) for p in find_unreachable_rules(cfg)]


LINT: list[tuple[str, list[dict[str, Any]], list[tuple[str, str]]]] = [
    (
        "catch-all shadows the rest",
        [{"name": "all", "profile": "gpu"}, rule({"port": 80}, name="b")],
        [
            (
                "rules[1]",
                'rule "b" can never match: rule "all" (rules[0]) before it matches every pod',
            )
        ],
    ),
    (
        "all: [] matches everything",
        [rule({"all": []}, name="a"), rule({"port": 80}, name="b")],
        [("rules[1]", 'rule "b" can never match: rule "a" (rules[0]) before it matches every pod')],
    ),
    (
        "same condition twice",
        [rule({"port": 80}, name="a"), rule({"port": [80]}, name="b")],
        [
            (
                "rules[1]",
                'rule "b" can never match: rule "a" (rules[0]) before it has the same condition',
            )
        ],
    ),
    (
        "exists and absent",
        [
            rule(
                {
                    "all": [
                        {"label": {"key": "app", "exists": True}},
                        {"label": {"key": "app", "absent": True}},
                    ]
                }
            )
        ],
        [
            (
                "rules[0].match.all",
                'rule "r" can never match: label app cannot satisfy both set and absent',
            )
        ],
    ),
    (
        "two different exact values",
        [
            rule(
                {
                    "label": {"key": "app", "value": "a"},
                    "all": [{"label": {"key": "app", "values": ["b", "c"]}}],
                }
            )
        ],
        [
            (
                "rules[0].match",
                'rule "r" can never match: label app cannot satisfy both a and one of b, c',
            )
        ],
    ),
    (
        "empty any",
        [rule({"all": [{"port": 80}, {"any": []}]})],
        [
            (
                "rules[0].match.all[1].any",
                'rule "r" can never match: an empty any: [] matches nothing',
            )
        ],
    ),
    (
        "negated catch-all",
        [rule({"not": {"all": []}})],
        [
            (
                "rules[0].match.not",
                'rule "r" can never match: it negates a condition that matches every pod',
            )
        ],
    ),
    (
        "hostNetwork both ways",
        [rule({"all": [{"hostNetwork": True}, {"hostNetwork": False}]})],
        [
            (
                "rules[0].match.all",
                'rule "r" can never match: hostNetwork cannot be both true and false',
            )
        ],
    ),
    (
        "disjoint namespaces",
        [rule({"all": [{"namespace": ["a", "b"]}, {"namespace": "c"}]})],
        [
            (
                "rules[0].match.all",
                'rule "r" can never match: namespace cannot be both one of a, b and c',
            )
        ],
    ),
    (
        "disjoint restart policies",
        [rule({"restartPolicy": "Never", "all": [{"restartPolicy": ["Always", "OnFailure"]}]})],
        [
            (
                "rules[0].match",
                'rule "r" can never match: restartPolicy cannot be both Never and one of Always, '
                "OnFailure",
            )
        ],
    ),
    (
        "a condition and its negation",
        [rule({"all": [{"image": "x"}, {"not": {"image": "x"}}]})],
        [
            (
                "rules[0].match.all",
                'rule "r" can never match: it requires a condition and its negation',
            )
        ],
    ),
    (
        "any of impossible alternatives",
        [rule({"any": [{"any": []}, {"not": {"all": []}}]})],
        [
            (
                "rules[0].match.any",
                'rule "r" can never match: none of its any: alternatives can match',
            )
        ],
    ),
    (
        "satisfiable: exists and a value",
        [
            rule(
                {
                    "all": [
                        {"label": {"key": "app", "exists": True}},
                        {"label": {"key": "app", "value": "x"}},
                    ]
                }
            )
        ],
        [],
    ),
    (
        "satisfiable: namespace globs are not compared",
        [rule({"all": [{"namespace": "team-*"}, {"namespace": "ml"}]})],
        [],
    ),
    (
        "satisfiable: not of a sometimes condition",
        [rule({"not": {"port": 80}}, name="a"), rule({"port": 80}, name="b")],
        [],
    ),
    (
        "contains and absent on one label",
        [
            rule(
                {
                    "all": [
                        {"label": {"key": "app", "contains": "db"}},
                        {"label": {"key": "app", "absent": True}},
                    ]
                }
            )
        ],
        [
            (
                "rules[0].match.all",
                'rule "r" can never match: label app cannot satisfy both set and absent',
            )
        ],
    ),
    (
        "same per-container condition twice",
        [
            rule({"container": {"resource": "memory > 8Gi"}}, name="a"),
            rule({"container": {"resource": ["memory > 8Gi"]}}, name="b"),
        ],
        [
            (
                "rules[1]",
                'rule "b" can never match: rule "a" (rules[0]) before it has the same condition',
            )
        ],
    ),
    (
        "a volume claim condition and its negation",
        [rule({"all": [{"volumeClaim": "template"}, {"not": {"volumeClaim": "template"}}]})],
        [
            (
                "rules[0].match.all",
                'rule "r" can never match: it requires a condition and its negation',
            )
        ],
    ),
    (
        "satisfiable: image contains and a glob",
        [rule({"all": [{"image": {"contains": "sql"}}, {"image": "mysql"}]})],
        [],
    ),
    (
        "catch-all via any with an always branch",
        [rule({"any": [{"port": 80}, {"all": []}]}, name="a"), rule({"port": 81}, name="b")],
        [("rules[1]", 'rule "b" can never match: rule "a" (rules[0]) before it matches every pod')],
    ),
]


@pytest.mark.parametrize(
    ("rules", "expected"), [case[1:] for case in LINT], ids=[case[0] for case in LINT]
)
def test_lint_finds_rules_that_can_never_match(
    rules: list[dict[str, Any]], expected: list[tuple[str, str]]
) -> None:
    assert lint(rules) == expected


def test_lint_flags_rules_reading_what_a_profile_adds() -> None:
    found = lint(
        [rule({"any": [{"port": 80}, {"label": {"key": "team*", "exists": True}}]})],
        profiles={"general": {}, "gpu": {"labels": {"team": "ml"}}},
    )
    assert found == [
        (
            "rules[0].match.any[1].label.key",
            'profile "gpu" adds label team, so a pod this webhook has already mutated could be '
            "classified differently when re-invoked",
        )
    ]


def test_classifier_lint_is_the_same_analysis() -> None:
    cfg = ClassifierConfig.model_validate(
        make(rules=[{"name": "a", "profile": "gpu"}, rule({"port": 80}, name="b")])
    )
    assert compile_classifier(cfg).lint() == find_unreachable_rules(cfg)


# --------------------------------------------------------------------------- schema of conditions

# (condition, valid, the schema can tell): the schema checks shape; a resource expression's
# grammar, an empty text and "exactly one test" are the model's to check.
CONDITION_FORMS: list[tuple[dict[str, Any], bool, bool]] = [
    ({"image": "mysql"}, True, True),
    ({"image": ["mysql", "bitnami/*"]}, True, True),
    ({"image": {"contains": "sql"}}, True, True),
    ({"image": {"glob": ["postgres"], "contains": ["mssql", "oracle"]}}, True, True),
    ({"image": {}}, False, True),
    ({"image": {"contains": ""}}, False, False),
    ({"image": {"like": "sql"}}, False, True),
    ({"label": {"key": "app", "contains": ["front"]}}, True, True),
    ({"label": {"key": "app", "contains": "front", "value": "x"}}, False, False),
    ({"container": {"resource": "memory > 8Gi"}}, True, True),
    ({"container": {"resource": ["memory > 8Gi", "nvidia.com/gpu > 0"]}}, True, True),
    ({"container": {}}, False, True),
    ({"container": {"resource": "memory is big"}}, False, False),
    ({"volumeClaim": "template"}, True, True),
    ({"volumeClaim": "any"}, True, True),
    ({"volumeClaim": True}, False, True),
]


@pytest.mark.parametrize(("condition", "valid", "in_schema"), CONDITION_FORMS)
def test_new_condition_forms_in_the_model_and_the_schema(
    condition: dict[str, Any], valid: bool, in_schema: bool
) -> None:
    """The model and the JSON Schema ``tenantgate schema`` prints agree on every form the
    schema can tell."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = ClassifierConfig.model_json_schema(by_alias=True, mode="validation")
    document = make(rules=[{"name": "r", "profile": "general", "match": condition}])
    try:
        ClassifierConfig.model_validate(document)
        model_valid = True
    except ValidationError:
        model_valid = False
    assert model_valid is valid
    schema_errors = list(jsonschema.Draft202012Validator(schema).iter_errors(document))
    if in_schema:
        assert (schema_errors == []) is valid, schema_errors
