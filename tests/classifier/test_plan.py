"""The mutation plan: annotations, copy discipline, overrides, and idempotence (property test)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from classifier import podview
from classifier.config import (
    ClassifierConfig,
    ClassifierConfigError,
    ProfileOverrideSpec,
)
from classifier.plan import Classifier, Plan, compile_classifier
from classifier.profiles import selector_matches, toleration_key
from classifier.templates import pod_from_template
from classifier.types import JSONObject
from tests.classifier import test_fixtures

ROOT = Path(__file__).resolve().parents[2]


def default_classifier() -> Classifier:
    """The embedded default config, classifier sections only (tenants are not ours)."""
    raw = yaml.safe_load((ROOT / "examples" / "tenantgate.yaml").read_text())
    fields = ClassifierConfig.model_fields
    return compile_classifier(
        ClassifierConfig.model_validate({k: v for k, v in raw.items() if k in fields})
    )


DEFAULT = default_classifier()

# Every field set and enforced, so the property test covers the merging code paths too.
ENFORCING = compile_classifier(
    ClassifierConfig.model_validate(
        {
            "priorityClasses": {"low": {"value": 100}, "high": {"value": 1000}},
            "defaultProfile": "plain",
            "profiles": {
                "plain": {},
                "strict": {
                    "schedulerName": "custom",
                    "priorityClassName": "high",
                    "nodeSelector": {"pool": "a"},
                    "labels": {"team": "platform"},
                    "annotations": {"owner": "platform"},
                    "tolerations": [
                        {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
                        {"key": "spot", "value": "true", "effect": "NoSchedule"},
                    ],
                    "topologySpreadConstraints": [
                        {"topologyKey": "kubernetes.io/hostname", "maxSkew": 1},
                        {"topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
                    ],
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
                                        "matchExpressions": [
                                            {"key": "fast", "operator": "In", "values": ["y"]}
                                        ]
                                    },
                                }
                            ],
                        },
                        "podAffinity": {
                            "preferredDuringSchedulingIgnoredDuringExecution": [
                                {"weight": 1, "podAffinityTerm": {"topologyKey": "zone"}}
                            ]
                        },
                        "podAntiAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": [
                                {"topologyKey": "kubernetes.io/hostname"}
                            ]
                        },
                    },
                    "enforce": [
                        "schedulerName",
                        "priorityClassName",
                        "nodeSelector",
                        "affinity",
                        "topologySpreadConstraints",
                        "labels",
                        "annotations",
                    ],
                },
                "soft": {
                    "schedulerName": "custom",
                    "priorityClassName": "low",
                    "nodeSelector": {"pool": "b"},
                    "labels": {"team": "soft"},
                    "tolerations": [{"operator": "Exists", "key": "gpu"}],
                    "topologySpreadConstraints": [{"topologyKey": "zone"}],
                    "affinity": {
                        "podAntiAffinity": {
                            "preferredDuringSchedulingIgnoredDuringExecution": [
                                {"weight": 9, "podAffinityTerm": {"topologyKey": "zone"}}
                            ]
                        }
                    },
                },
            },
            "rules": [
                {"name": "ports", "profile": "strict", "match": {"port": "*"}},
                {"name": "owned", "profile": "soft", "match": {"ownerKind": "*"}},
            ],
        }
    )
)


def plain_pod(**spec: Any) -> JSONObject:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "containers": [{"name": "c", "image": "nginx:1.27", "ports": [{"containerPort": 80}]}],
            **spec,
        },
    }


# --------------------------------------------------------------------------- examples


def test_plan_applies_the_profile_and_annotates() -> None:
    pod = plain_pod()
    before = copy.deepcopy(pod)
    plan = DEFAULT.plan(pod, namespace="team-a")
    assert pod == before
    assert plan.changed
    assert plan.classification.profile == "web-frontend"
    assert plan.mutated["metadata"]["annotations"] == {
        "tenantgate.io/profile": "web-frontend",
        "tenantgate.io/classified-by": "evidence",
    }
    assert [c["topologyKey"] for c in plan.mutated["spec"]["topologySpreadConstraints"]] == [
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    ]
    assert plan.notes[0].startswith("spread over kubernetes.io/hostname")


def test_replanning_the_result_changes_nothing() -> None:
    first = DEFAULT.plan(plain_pod(), namespace="team-a")
    second = DEFAULT.plan(first.mutated, namespace="team-a")
    assert second.changed is False
    assert second.mutated == first.mutated
    assert second.classification == first.classification


def test_the_mutated_pod_owns_the_parts_others_may_write() -> None:
    pod = plain_pod()
    pod["metadata"]["annotations"] = {"a": "b"}
    plan = DEFAULT.plan(pod, namespace="team-a")
    mutated = plan.mutated
    assert mutated is not pod
    assert mutated["metadata"] is not pod["metadata"]
    assert mutated["metadata"]["labels"] is not pod["metadata"]["labels"]
    assert mutated["metadata"]["annotations"] is not pod["metadata"]["annotations"]
    assert mutated["spec"] is not pod["spec"]
    # Untouched subtrees are shared rather than copied: planning stays cheap.
    assert mutated["spec"]["containers"] is pod["spec"]["containers"]


def test_a_pod_without_labels_gets_no_empty_labels() -> None:
    pod: JSONObject = {
        "metadata": {"name": "x"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    plan = DEFAULT.plan(pod, namespace="dev")
    assert plan.classification.profile == "general"
    assert "labels" not in plan.mutated["metadata"]
    assert plan.notes == ()
    assert plan.mutated["metadata"]["annotations"] == {
        "tenantgate.io/profile": "general",
        "tenantgate.io/classified-by": "default",
    }


def test_a_pod_without_metadata_or_spec() -> None:
    plan = DEFAULT.plan({}, namespace="dev")
    assert plan.mutated == {
        "metadata": {
            "annotations": {
                "tenantgate.io/profile": "general",
                "tenantgate.io/classified-by": "default",
            }
        }
    }


def test_a_stale_profile_annotation_is_corrected() -> None:
    pod = plain_pod()
    pod["metadata"]["annotations"] = {"tenantgate.io/profile": "system"}
    plan = DEFAULT.plan(pod, namespace="team-a")
    assert plan.mutated["metadata"]["annotations"]["tenantgate.io/profile"] == "web-frontend"


def test_skipped_rules_are_in_the_notes() -> None:
    raw = yaml.safe_load((ROOT / "examples" / "tenantgate.yaml").read_text())
    fields = ClassifierConfig.model_fields
    raw = {k: v for k, v in raw.items() if k in fields}
    raw["rules"] = [
        {
            "name": "ml-training",
            "profile": "ml-training",
            "match": {"resource": "nvidia.com/gpu > 0"},
        }
    ]
    with_rule = compile_classifier(ClassifierConfig.model_validate(raw))
    pod = plain_pod()
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    plan = with_rule.plan(pod, namespace="team-a", allowed_profiles=frozenset({"web-frontend"}))
    assert plan.classification.profile == "web-frontend"
    assert plan.notes[0] == 'rule "ml-training" matched but profile "ml-training" is not allowed'


def test_opt_in_problem_still_yields_a_plan() -> None:
    pod = plain_pod()
    pod["metadata"]["labels"]["tenantgate.io/profile"] = "system"
    plan = DEFAULT.plan(pod, namespace="team-a", allowed_profiles=frozenset({"api"}))
    # Only api's evidence counts here (a port is a hint, below the threshold): the default.
    assert plan.classification.profile == "general"
    assert plan.classification.problem is not None


def test_with_profile_overrides_shares_rules_and_changes_one_profile() -> None:
    tenant = DEFAULT.with_profile_overrides(
        {"web-frontend": ProfileOverrideSpec(schedulerName="edge-scheduler")},
        path="tenants.a.profiles.overrides",
    )
    assert DEFAULT.with_profile_overrides({}) is DEFAULT
    plan = tenant.plan(plain_pod(), namespace="team-a")
    assert plan.mutated["spec"]["schedulerName"] == "edge-scheduler"
    assert "schedulerName" not in DEFAULT.plan(plain_pod(), namespace="team-a").mutated["spec"]
    assert tenant.profile("api") is DEFAULT.profile("api")
    with pytest.raises(ClassifierConfigError) as caught:
        DEFAULT.with_profile_overrides(
            {"nope": ProfileOverrideSpec()}, path="tenants.a.profiles.overrides"
        )
    assert [p.path for p in caught.value.problems] == ["tenants.a.profiles.overrides.nope"]


def test_override_with_an_invalid_merge_is_reported() -> None:
    with pytest.raises(ClassifierConfigError) as caught:
        DEFAULT.with_profile_overrides(
            {"batch": ProfileOverrideSpec(priorityClassName="gold")}, path="over"
        )
    assert str(caught.value).startswith(
        'over.batch.priorityClassName: unknown priority class "gold"'
    )


def test_classifier_exposes_its_tables() -> None:
    assert DEFAULT.profile_names == frozenset(
        {
            "web-frontend",
            "api",
            "database",
            "batch",
            "ml-training",
            "streaming",
            "system",
            "general",
        }
    )
    assert (
        DEFAULT.priority_classes["tenant-burst"].value < DEFAULT.priority_classes["batch-low"].value
    )
    assert DEFAULT.priority_classes["tenant-guaranteed"].value == 1000
    assert DEFAULT.lint() == []


# --------------------------------------------------------------------------- property test

APP_KEYS = ["app", "app.kubernetes.io/name", "app.kubernetes.io/instance", "k8s-app", "tier"]
PROFILES = [*sorted(DEFAULT.profile_names | ENFORCING.profile_names), "unknown"]
IMAGES = [
    "nginx:1.27",
    "postgres:16",
    "docker.io/bitnami/redis:7",
    "solsson/kafka:2.4",
    "busybox",
    "rayproject/ray:2.9.0",
    "ghcr.io/acme/api@sha256:0123",
]
TOLERATIONS: list[JSONObject] = [
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "nvidia.com/gpu", "effect": "NoSchedule", "value": ""},
    {"key": "spot", "value": "true", "effect": "NoSchedule"},
    {
        "key": "cloud.google.com/gke-spot",
        "operator": "Equal",
        "value": "true",
        "effect": "NoSchedule",
    },
    {"operator": "Exists"},
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {"key": "gpu", "operator": "Exists"},
]

label_values = st.sampled_from(["web", "db", "x", "a.b-c"])


@st.composite
def pods(draw: st.DrawFn) -> JSONObject:
    labels = draw(
        st.dictionaries(
            st.sampled_from([*APP_KEYS, "team", "pod-template-hash"]), label_values, max_size=4
        )
    )
    if draw(st.booleans()) and draw(st.booleans()):
        labels["tenantgate.io/profile"] = draw(st.sampled_from(PROFILES))
    meta: JSONObject = {"name": "p"}
    keep_empty_labels = draw(st.booleans())
    if labels or keep_empty_labels:
        meta["labels"] = labels
    if draw(st.booleans()):
        meta["annotations"] = draw(
            st.dictionaries(
                st.sampled_from(["owner", "note", "tenantgate.io/profile"]),
                label_values,
                max_size=2,
            )
        )
    owners = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["ReplicaSet", "Job", "DaemonSet", "StatefulSet", "PyTorchJob"]),
                st.sampled_from(["w", "w-29000000", "w-x"]),
            ),
            max_size=1,
        )
    )
    if owners:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": k, "name": n, "uid": "u"} for k, n in owners
        ]
    containers: list[JSONObject] = []
    for index, image in enumerate(draw(st.lists(st.sampled_from(IMAGES), min_size=1, max_size=2))):
        container: JSONObject = {"name": f"c{index}", "image": image}
        ports = draw(st.lists(st.sampled_from([80, 443, 7070, 9090]), max_size=2, unique=True))
        if ports:
            container["ports"] = [{"containerPort": p} for p in ports]
        requests = draw(
            st.dictionaries(
                st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "gpu.intel.com/i915"]),
                st.sampled_from(["0", "1", "250m", "2Gi"]),
                max_size=2,
            )
        )
        if requests:
            container["resources"] = {"limits": requests}
        containers.append(container)
    spec: JSONObject = {"containers": containers}
    optional: dict[str, Any] = {
        "schedulerName": st.sampled_from(["default-scheduler", "custom", "other"]),
        "priorityClassName": st.sampled_from(["batch-low", "tenant-guaranteed", "low"]),
        "priority": st.sampled_from([0, 100]),
        "restartPolicy": st.sampled_from(["Always", "OnFailure", "Never"]),
        "hostNetwork": st.booleans(),
        "nodeSelector": st.dictionaries(
            st.sampled_from(["pool", "disk"]), label_values, max_size=2
        ),
        "tolerations": st.lists(
            st.sampled_from(TOLERATIONS), max_size=3, unique_by=lambda t: repr(toleration_key(t))
        ),
        "topologySpreadConstraints": st.lists(
            st.fixed_dictionaries(
                {
                    "topologyKey": st.sampled_from(["kubernetes.io/hostname", "zone", "rack"]),
                    "maxSkew": st.integers(1, 3),
                    "whenUnsatisfiable": st.sampled_from(["DoNotSchedule", "ScheduleAnyway"]),
                    "labelSelector": st.fixed_dictionaries(
                        {
                            "matchLabels": st.dictionaries(
                                st.sampled_from(APP_KEYS), label_values, min_size=1, max_size=1
                            )
                        }
                    ),
                }
            ),
            max_size=2,
            unique_by=lambda c: c["topologyKey"],
        ),
        "affinity": st.fixed_dictionaries(
            {},
            optional={
                "nodeAffinity": st.just(
                    {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "zone", "operator": "In", "values": ["a"]}
                                    ]
                                },
                                {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
                            ]
                        }
                    }
                ),
                "podAntiAffinity": st.just(
                    {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": 3,
                                "podAffinityTerm": {
                                    "topologyKey": "rack",
                                    "labelSelector": {"matchLabels": {"app": "x"}},
                                },
                            }
                        ]
                    }
                ),
            },
        ),
    }
    for field, strategy in optional.items():
        if draw(st.booleans()):
            spec[field] = draw(strategy)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def check_plan_properties(classifier: Classifier, pod: JSONObject, namespace: str) -> None:
    before = copy.deepcopy(pod)
    first = classifier.plan(pod, namespace=namespace)
    assert pod == before, "plan modified its input"
    assert first.changed == (first.mutated != pod)
    second = classifier.plan(first.mutated, namespace=namespace)
    assert second.mutated == first.mutated
    assert second.changed is False
    assert second.classification.profile == first.classification.profile
    check_plan_without_notes(classifier, pod, namespace, first)

    mutated = first.mutated
    tolerations = list(podview.objects(podview.spec(mutated).get("tolerations")))
    keys = [toleration_key(t) for t in tolerations]
    assert len(keys) == len(set(keys)), "a toleration was duplicated"
    labels = podview.labels(mutated)
    original_spreads = podview.spec(pod).get("topologySpreadConstraints") or []
    for constraint in podview.objects(podview.spec(mutated).get("topologySpreadConstraints")):
        if constraint not in original_spreads:
            assert selector_matches(podview.obj(constraint.get("labelSelector")), labels)
    anti = podview.obj(podview.obj(podview.spec(mutated).get("affinity")).get("podAntiAffinity"))
    for term in podview.objects(anti.get("requiredDuringSchedulingIgnoredDuringExecution")):
        if term.get("topologyKey") == "kubernetes.io/hostname":
            assert selector_matches(podview.obj(term.get("labelSelector")), labels)


def check_plan_without_notes(
    classifier: Classifier, pod: JSONObject, namespace: str, planned: Plan
) -> None:
    """The admission path plans without notes: the same pod, change and classification."""
    quiet = classifier.plan(pod, namespace=namespace, notes=False)
    assert quiet.notes == ()
    assert quiet.mutated == planned.mutated
    assert quiet.changed == planned.changed
    assert quiet.classification == planned.classification


def test_planning_without_notes_gives_the_same_plan_on_every_fixture_pod() -> None:
    classifier = test_fixtures.classifier()
    for name, key in test_fixtures.all_templates():
        pod = pod_from_template(test_fixtures.template(name, key), namespace="default")
        namespace = str(pod["metadata"]["namespace"])
        check_plan_without_notes(
            classifier, pod, namespace, classifier.plan(pod, namespace=namespace)
        )


NAMESPACES = st.sampled_from(["default", "kube-system", "team-a", "ml"])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod=pods(), namespace=NAMESPACES)
def test_plan_is_idempotent_with_the_default_config(pod: JSONObject, namespace: str) -> None:
    check_plan_properties(DEFAULT, pod, namespace)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod=pods(), namespace=NAMESPACES)
def test_plan_is_idempotent_when_every_field_is_enforced(pod: JSONObject, namespace: str) -> None:
    check_plan_properties(ENFORCING, pod, namespace)


@settings(max_examples=100, deadline=None)
@given(pod=pods(), allowed=st.frozensets(st.sampled_from(PROFILES), max_size=3))
def test_plan_respects_allowed_profiles(pod: JSONObject, allowed: frozenset[str]) -> None:
    plan = DEFAULT.plan(pod, namespace="team-a", allowed_profiles=allowed)
    assert plan.classification.profile in allowed | {"general"}
    check_plan_properties(DEFAULT, pod, "team-a")
