"""Profiles: every field as a default (or enforced), tolerations as a set, sibling selectors."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from classifier.config import ClassifierProblem, PriorityClassSpec, ProfileSpec
from classifier.profiles import (
    TolerationKey,
    apply_profile,
    compile_profile,
    describe_toleration,
    selector_matches,
    sibling_selector,
    toleration_covers,
    toleration_key,
)
from classifier.types import JSONObject

CLASSES = {
    "low": PriorityClassSpec(value=100),
    "burst": PriorityClassSpec(value=10, preemptionPolicy="Never"),
}


def apply(profile: dict[str, Any], pod: JSONObject) -> tuple[JSONObject, list[str], bool]:
    """Apply like Classifier.plan does, and prove the input was left alone."""
    problems: list[ClassifierProblem] = []
    compiled = compile_profile(
        "p",
        ProfileSpec.model_validate(profile),
        priority_classes=CLASSES,
        path="profiles.p",
        problems=problems,
    )
    assert problems == []
    before = copy.deepcopy(pod)
    mutated: JSONObject = dict(pod)
    meta: JSONObject = dict(pod.get("metadata") or {})
    for key in ("labels", "annotations"):
        if isinstance(meta.get(key), dict):
            meta[key] = dict(meta[key])
    mutated["metadata"] = meta
    mutated["spec"] = dict(pod.get("spec") or {})
    notes: list[str] = []
    changed = apply_profile(mutated, compiled, notes=notes)
    assert pod == before, "the input pod was modified"
    again = dict(mutated)
    again["metadata"] = copy.deepcopy(mutated["metadata"])
    again["spec"] = dict(mutated["spec"])
    assert apply_profile(again, compiled, notes=[]) is False, "not idempotent"
    assert again == mutated
    return mutated, notes, changed


def make_pod(*, labels: dict[str, str] | None = None, **spec: Any) -> JSONObject:
    body: JSONObject = {"containers": [{"name": "c", "image": "x"}], **spec}
    meta: JSONObject = {"name": "p"}
    if labels is not None:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}


# --------------------------------------------------------------------------- tolerations


@pytest.mark.parametrize(
    ("toleration", "key"),
    [
        (
            {"key": "k", "value": "v", "effect": "NoSchedule"},
            ("k", "Equal", "v", "NoSchedule", None),
        ),
        ({"key": "k", "operator": "Equal", "value": "v"}, ("k", "Equal", "v", "", None)),
        ({"operator": "Exists"}, ("", "Exists", "", "", None)),
        (
            {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ("k", "Exists", "", "NoExecute", 300),
        ),
        ({"key": "k", "value": None, "effect": ""}, ("k", "Equal", "", "", None)),
    ],
)
def test_toleration_key_applies_kubernetes_defaults(
    toleration: dict[str, Any], key: TolerationKey
) -> None:
    assert toleration_key(toleration) == key


COVERS: list[tuple[str, dict[str, Any], dict[str, Any], bool]] = [
    ("identical", {"key": "k", "operator": "Exists"}, {"key": "k", "operator": "Exists"}, True),
    (
        "Equal is the default",
        {"key": "k", "value": "v"},
        {"key": "k", "operator": "Equal", "value": "v"},
        True,
    ),
    ("Exists covers a value", {"key": "k", "operator": "Exists"}, {"key": "k", "value": "v"}, True),
    (
        "a value does not cover Exists",
        {"key": "k", "value": "v"},
        {"key": "k", "operator": "Exists"},
        False,
    ),
    ("other value", {"key": "k", "value": "a"}, {"key": "k", "value": "b"}, False),
    ("other key", {"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}, False),
    (
        "empty key Exists covers all",
        {"operator": "Exists"},
        {"key": "k", "value": "v", "effect": "NoExecute"},
        True,
    ),
    (
        "all effects cover one",
        {"key": "k", "operator": "Exists"},
        {"key": "k", "operator": "Exists", "effect": "NoSchedule"},
        True,
    ),
    (
        "one effect does not cover all",
        {"key": "k", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "k", "operator": "Exists"},
        False,
    ),
    (
        "forever covers a while",
        {"key": "k", "operator": "Exists", "effect": "NoExecute"},
        {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
        True,
    ),
    (
        "a while does not cover forever",
        {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
        {"key": "k", "operator": "Exists", "effect": "NoExecute"},
        False,
    ),
    (
        "longer covers shorter",
        {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 600},
        {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
        True,
    ),
]


@pytest.mark.parametrize(
    ("existing", "wanted", "covered"), [c[1:] for c in COVERS], ids=[c[0] for c in COVERS]
)
def test_toleration_covers(existing: dict[str, Any], wanted: dict[str, Any], covered: bool) -> None:
    assert toleration_covers(toleration_key(existing), toleration_key(wanted)) is covered


@pytest.mark.parametrize(
    ("toleration", "text"),
    [
        (
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            "nvidia.com/gpu:NoSchedule op=Exists",
        ),
        ({"key": "spot", "value": "true", "effect": "NoSchedule"}, "spot=true:NoSchedule"),
        ({"operator": "Exists"}, "op=Exists"),
        (
            {"key": "n", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5},
            "n:NoExecute op=Exists for 5s",
        ),
    ],
)
def test_describe_toleration(toleration: dict[str, Any], text: str) -> None:
    assert describe_toleration(toleration_key(toleration)) == text


GPU = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
SPOT = {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}


def test_tolerations_are_added_once() -> None:
    mutated, notes, changed = apply({"tolerations": [GPU, SPOT]}, make_pod())
    assert changed
    assert mutated["spec"]["tolerations"] == [GPU, SPOT]
    assert notes == ["tolerations added: nvidia.com/gpu:NoSchedule op=Exists, spot=true:NoSchedule"]


def test_existing_tolerations_are_kept_and_not_duplicated() -> None:
    # The pod spells SPOT with the defaulted operator left out: still the same toleration.
    own = [
        {"key": "spot", "value": "true", "effect": "NoSchedule"},
        {"key": "mine", "operator": "Exists"},
    ]
    mutated, _, changed = apply({"tolerations": [GPU, SPOT]}, make_pod(tolerations=own))
    assert changed
    assert mutated["spec"]["tolerations"] == [*own, GPU]


def test_a_broader_toleration_makes_the_profile_one_redundant() -> None:
    _, _, changed = apply(
        {"tolerations": [GPU, SPOT]}, make_pod(tolerations=[{"operator": "Exists"}])
    )
    assert changed is False


def test_duplicate_profile_tolerations_collapse() -> None:
    mutated, _, _ = apply(
        {"tolerations": [SPOT, {"key": "spot", "value": "true", "effect": "NoSchedule"}]},
        make_pod(),
    )
    assert mutated["spec"]["tolerations"] == [SPOT]


# --------------------------------------------------------------------------- scalars and maps


@pytest.mark.parametrize(
    ("current", "enforce", "expected", "note"),
    [
        (None, False, "gpu-scheduler", "schedulerName set to gpu-scheduler"),
        ("default-scheduler", False, "gpu-scheduler", "schedulerName set to gpu-scheduler"),
        ("", False, "gpu-scheduler", "schedulerName set to gpu-scheduler"),
        (
            "volcano",
            False,
            "volcano",
            "kept schedulerName volcano set by the pod (profile: gpu-scheduler)",
        ),
        ("volcano", True, "gpu-scheduler", "schedulerName set to gpu-scheduler"),
    ],
)
def test_scheduler_name(current: str | None, enforce: bool, expected: str, note: str) -> None:
    spec: dict[str, Any] = {} if current is None else {"schedulerName": current}
    profile: dict[str, Any] = {"schedulerName": "gpu-scheduler"}
    if enforce:
        profile["enforce"] = ["schedulerName"]
    mutated, notes, _ = apply(profile, make_pod(**spec))
    assert mutated["spec"]["schedulerName"] == expected
    assert notes == [note]


def test_priority_class_sets_value_and_policy() -> None:
    mutated, notes, changed = apply({"priorityClassName": "burst"}, make_pod(priority=0))
    assert changed
    spec = mutated["spec"]
    assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == (
        "burst",
        10,
        "Never",
    )
    assert notes == ["priorityClassName set to burst (priority 10, preemptionPolicy Never)"]


def test_priority_class_of_the_pod_is_kept_unless_enforced() -> None:
    own = make_pod(priorityClassName="low", priority=100)
    mutated, notes, changed = apply({"priorityClassName": "burst"}, own)
    assert not changed
    assert mutated["spec"]["priorityClassName"] == "low"
    assert notes == ["kept priorityClassName low set by the pod (profile: burst)"]
    mutated, _, changed = apply(
        {"priorityClassName": "burst", "enforce": ["priorityClassName"]}, own
    )
    assert changed
    assert (mutated["spec"]["priorityClassName"], mutated["spec"]["priority"]) == ("burst", 10)


def test_a_stale_priority_is_corrected() -> None:
    mutated, _, changed = apply(
        {"priorityClassName": "low"}, make_pod(priorityClassName="low", priority=0)
    )
    assert changed
    assert mutated["spec"]["priority"] == 100


@pytest.mark.parametrize(
    ("current", "enforce", "expected"),
    [
        (None, False, {"pool": "gpu"}),
        ({}, False, {"pool": "gpu"}),
        ({"disk": "ssd"}, False, {"disk": "ssd"}),
        ({"disk": "ssd", "pool": "cpu"}, True, {"disk": "ssd", "pool": "gpu"}),
    ],
)
def test_node_selector(
    current: dict[str, str] | None, enforce: bool, expected: dict[str, str]
) -> None:
    spec = {} if current is None else {"nodeSelector": current}
    profile: dict[str, Any] = {"nodeSelector": {"pool": "gpu"}}
    if enforce:
        profile["enforce"] = ["nodeSelector"]
    mutated, _, _ = apply(profile, make_pod(**spec))
    assert mutated["spec"]["nodeSelector"] == expected


def test_labels_and_annotations_fill_in_missing_keys() -> None:
    own = make_pod(labels={"team": "web"})
    own["metadata"]["annotations"] = {"note": "mine"}
    profile = {
        "labels": {"team": "ml", "tier": "gpu"},
        "annotations": {"note": "profile", "owner": "platform"},
    }
    mutated, notes, _ = apply(profile, own)
    assert mutated["metadata"]["labels"] == {"team": "web", "tier": "gpu"}
    assert mutated["metadata"]["annotations"] == {"note": "mine", "owner": "platform"}
    assert "kept label team=web set by the pod (profile: ml)" in notes
    assert "labels set: tier=gpu" in notes
    enforced, _, _ = apply({**profile, "enforce": ["labels"]}, own)
    assert enforced["metadata"]["labels"] == {"team": "ml", "tier": "gpu"}


# --------------------------------------------------------------------------- selectors


@pytest.mark.parametrize(
    ("labels", "selector"),
    [
        ({"app": "web", "pod-template-hash": "abc"}, {"app": "web"}),
        (
            {
                "app.kubernetes.io/name": "db",
                "app.kubernetes.io/instance": "main",
                "statefulset.kubernetes.io/pod-name": "db-0",
                "apps.kubernetes.io/pod-index": "0",
                "controller-revision-hash": "db-123",
            },
            {"app.kubernetes.io/name": "db", "app.kubernetes.io/instance": "main"},
        ),
        ({"k8s-app": "kube-dns", "tier": "x"}, {"k8s-app": "kube-dns", "tier": "x"}),
        ({"job-name": "pi", "controller-uid": "1"}, {}),
        ({"app": ""}, {}),
    ],
)
def test_sibling_selector_uses_only_workload_labels(
    labels: dict[str, str], selector: dict[str, str]
) -> None:
    assert sibling_selector(labels) == selector


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]},
            {"a": "2"},
            True,
        ),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": "1"}, False),
    ],
)
def test_selector_matches(selector: dict[str, Any], labels: dict[str, str], matches: bool) -> None:
    assert selector_matches(selector, labels) is matches


SPREAD = {
    "topologySpreadConstraints": [
        {"topologyKey": "kubernetes.io/hostname", "maxSkew": 1},
        {
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "minDomains": 2,
        },
    ]
}


def test_spread_selects_the_pods_siblings() -> None:
    labels = {"app": "web", "pod-template-hash": "abc", "version": "1"}
    mutated, notes, changed = apply(SPREAD, make_pod(labels=labels))
    assert changed
    assert mutated["spec"]["topologySpreadConstraints"] == [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": "web"}},
            "matchLabelKeys": ["pod-template-hash"],
        },
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "minDomains": 2,
            "labelSelector": {"matchLabels": {"app": "web"}},
            "matchLabelKeys": ["pod-template-hash"],
        },
    ]
    for constraint in mutated["spec"]["topologySpreadConstraints"]:
        assert selector_matches(constraint["labelSelector"], labels)
    assert notes[0] == (
        "spread over kubernetes.io/hostname (maxSkew 1, ScheduleAnyway) among pods with app=web"
    )


def test_spread_without_template_hash_has_no_match_label_keys() -> None:
    mutated, _, _ = apply(SPREAD, make_pod(labels={"app.kubernetes.io/name": "db"}))
    for constraint in mutated["spec"]["topologySpreadConstraints"]:
        assert "matchLabelKeys" not in constraint


def test_profile_match_label_keys_are_kept_but_never_overlap_the_selector() -> None:
    profile = {
        "topologySpreadConstraints": [{"topologyKey": "zone", "matchLabelKeys": ["app", "version"]}]
    }
    mutated, _, _ = apply(profile, make_pod(labels={"app": "web", "version": "2"}))
    (constraint,) = mutated["spec"]["topologySpreadConstraints"]
    assert constraint["matchLabelKeys"] == ["version"]


def test_spread_is_skipped_with_a_note_when_the_pod_has_no_app_labels() -> None:
    mutated, notes, changed = apply(SPREAD, make_pod(labels={"job-name": "pi"}))
    assert not changed
    assert "topologySpreadConstraints" not in mutated["spec"]
    assert notes[0].startswith(
        "skipped spread over kubernetes.io/hostname: the pod has none of the labels "
        "app.kubernetes.io/name, app.kubernetes.io/instance, app.kubernetes.io/component, app"
    )


def test_the_pods_own_spread_on_a_key_wins_unless_enforced() -> None:
    own = {
        "topologyKey": "kubernetes.io/hostname",
        "maxSkew": 3,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}},
    }
    mutated, notes, _ = apply(
        SPREAD, make_pod(labels={"app": "web"}, topologySpreadConstraints=[own])
    )
    spreads = mutated["spec"]["topologySpreadConstraints"]
    assert [s["topologyKey"] for s in spreads] == [
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    ]
    assert spreads[0] == own
    assert notes[0] == (
        "kept the pod's own spread over kubernetes.io/hostname (profile constraint not applied)"
    )
    enforced, _, _ = apply(
        {**SPREAD, "enforce": ["topologySpreadConstraints"]},
        make_pod(labels={"app": "web"}, topologySpreadConstraints=[own]),
    )
    hostname = [
        s
        for s in enforced["spec"]["topologySpreadConstraints"]
        if s["topologyKey"] == "kubernetes.io/hostname"
    ]
    assert hostname == [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]


# --------------------------------------------------------------------------- affinity

ANTI = {
    "affinity": {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname"}
            ],
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 50, "podAffinityTerm": {"topologyKey": "zone"}}
            ],
        }
    }
}


def test_anti_affinity_selects_siblings() -> None:
    labels = {"app": "db", "pod-template-hash": "h"}
    mutated, notes, _ = apply(ANTI, make_pod(labels=labels))
    anti = mutated["spec"]["affinity"]["podAntiAffinity"]
    assert anti == {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {
                "topologyKey": "kubernetes.io/hostname",
                "labelSelector": {"matchLabels": {"app": "db"}},
                "matchLabelKeys": ["pod-template-hash"],
            }
        ],
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 50,
                "podAffinityTerm": {
                    "topologyKey": "zone",
                    "labelSelector": {"matchLabels": {"app": "db"}},
                    "matchLabelKeys": ["pod-template-hash"],
                },
            }
        ],
    }
    assert notes == ["podAntiAffinity set from profile p"]


def test_anti_affinity_is_skipped_without_app_labels() -> None:
    mutated, notes, changed = apply(ANTI, make_pod())
    assert not changed
    assert "affinity" not in mutated["spec"]
    assert [n.split(":")[0] for n in notes] == [
        "skipped required podAntiAffinity over kubernetes.io/hostname",
        "skipped preferred podAntiAffinity over zone",
    ]


def test_explicit_label_selector_is_used_as_is() -> None:
    profile = {
        "affinity": {
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 10,
                        "podAffinityTerm": {
                            "topologyKey": "zone",
                            "labelSelector": {"matchLabels": {"app": "cache"}},
                            "namespaces": ["shared"],
                        },
                    }
                ]
            }
        }
    }
    mutated, _, _ = apply(profile, make_pod())
    term = mutated["spec"]["affinity"]["podAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ][0]
    assert term["podAffinityTerm"] == {
        "topologyKey": "zone",
        "labelSelector": {"matchLabels": {"app": "cache"}},
        "namespaces": ["shared"],
    }


NODE = {
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
                    {"matchExpressions": [{"key": "tpu", "operator": "Exists"}]},
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 5,
                    "preference": {
                        "matchExpressions": [{"key": "fast", "operator": "In", "values": ["yes"]}]
                    },
                }
            ],
        }
    }
}
OWN_NODE = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                {
                    "matchExpressions": [
                        {"key": "zone", "operator": "In", "values": ["b"]},
                        {"key": "gpu", "operator": "Exists"},
                    ]
                },
            ]
        }
    }
}


def test_node_affinity_default_is_set_only_when_the_pod_has_none() -> None:
    mutated, _, changed = apply(NODE, make_pod())
    assert changed
    assert mutated["spec"]["affinity"]["nodeAffinity"] == NODE["affinity"]["nodeAffinity"]
    kept, notes, changed = apply(NODE, make_pod(affinity=copy.deepcopy(OWN_NODE)))
    assert not changed
    assert kept["spec"]["affinity"] == OWN_NODE
    assert notes == ["kept the pod's own nodeAffinity (profile nodeAffinity not applied)"]


def test_enforced_node_affinity_is_anded_into_the_pods_terms() -> None:
    profile = {**NODE, "enforce": ["affinity"]}
    mutated, _, changed = apply(profile, make_pod(affinity=copy.deepcopy(OWN_NODE)))
    assert changed
    node = mutated["spec"]["affinity"]["nodeAffinity"]
    terms = node["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    zone_a = {"key": "zone", "operator": "In", "values": ["a"]}
    zone_b = {"key": "zone", "operator": "In", "values": ["b"]}
    gpu = {"key": "gpu", "operator": "Exists"}
    tpu = {"key": "tpu", "operator": "Exists"}
    assert terms == [
        {"matchExpressions": [zone_a, gpu]},
        {"matchExpressions": [zone_a, tpu]},
        # already requires gpu: a term the profile allows, kept as it is
        {"matchExpressions": [zone_b, gpu]},
    ]
    assert (
        node["preferredDuringSchedulingIgnoredDuringExecution"]
        == NODE["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    )


def test_enforced_pod_anti_affinity_appends_missing_terms() -> None:
    own = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "rack", "labelSelector": {"matchLabels": {"app": "db"}}}
            ]
        }
    }
    mutated, _, changed = apply(
        {**ANTI, "enforce": ["affinity"]},
        make_pod(labels={"app": "db"}, affinity=copy.deepcopy(own)),
    )
    assert changed
    required = mutated["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert [t["topologyKey"] for t in required] == ["rack", "kubernetes.io/hostname"]
    preferred = mutated["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert [t["podAffinityTerm"]["topologyKey"] for t in preferred] == ["zone"]


def test_other_affinity_kinds_of_the_pod_are_preserved() -> None:
    own = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "cache"}}}
            ]
        }
    }
    mutated, _, _ = apply(ANTI, make_pod(labels={"app": "db"}, affinity=copy.deepcopy(own)))
    assert mutated["spec"]["affinity"]["podAffinity"] == own["podAffinity"]
    assert "podAntiAffinity" in mutated["spec"]["affinity"]


def test_compile_resolves_priority_and_reports_unknown_class() -> None:
    problems: list[ClassifierProblem] = []
    compiled = compile_profile(
        "batch",
        ProfileSpec(priorityClassName="low"),
        priority_classes=CLASSES,
        path="profiles.batch",
        problems=problems,
    )
    assert compiled.priority == ("low", CLASSES["low"])
    compile_profile(
        "batch",
        ProfileSpec(priorityClassName="nope"),
        priority_classes=CLASSES,
        path="profiles.batch",
        problems=problems,
    )
    assert problems == [
        ClassifierProblem(
            "profiles.batch.priorityClassName", 'unknown priority class "nope" (known: burst, low)'
        )
    ]


def test_rendered_json_is_never_shared_between_pods() -> None:
    compiled = compile_profile(
        "p",
        ProfileSpec.model_validate({"tolerations": [GPU], **NODE}),
        priority_classes=CLASSES,
        path="profiles.p",
        problems=[],
    )
    first = make_pod()
    apply_profile(first, compiled, notes=[])
    first["spec"]["tolerations"][0]["key"] = "changed"
    first["spec"]["affinity"]["nodeAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ].clear()
    second = make_pod()
    apply_profile(second, compiled, notes=[])
    assert second["spec"]["tolerations"] == [GPU]
    assert second["spec"]["affinity"] == NODE["affinity"]
