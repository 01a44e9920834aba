"""The config models and the compiled policy (tenants/config.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from classifier.config import ClassifierConfig, PriorityClassSpec
from classifier.quantities import Quantity
from tenants.config import (
    NamespaceSelector,
    NamespaceSelectorSpec,
    Policy,
    PolicyError,
    TenantgateConfig,
    compile_policy,
    field_path,
)
from tests.tenants.conftest import CONFIG


def base() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(CONFIG)
    return data


def with_tenant(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    data = base()
    data["tenants"] = {name: spec}
    return data


def errors(data: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as caught:
        TenantgateConfig.model_validate(data)
    return [
        (field_path(*(p for p in e["loc"] if isinstance(p, str | int))), str(e["msg"]))
        for e in caught.value.errors()
    ]


def compile_problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(PolicyError) as caught:
        compile_policy(TenantgateConfig.model_validate(data))
    return [str(p) for p in caught.value.problems]


class TestModels:
    def test_defaults(self) -> None:
        config = TenantgateConfig.model_validate({})
        assert config.tenants == {}
        assert config.burstPriorityClass == "tenant-burst"
        assert config.unclaimedNamespaces == "allow"
        assert config.reservationTTLSeconds == 120
        assert config.ledger.backend == "memory"

    def test_quantities_are_parsed_from_strings_ints_and_floats(self) -> None:
        config = TenantgateConfig.model_validate(
            with_tenant("t", {"quota": {"guaranteed": {"cpu": 0.5, "memory": "1Gi", "pods": 10}}})
        )
        guaranteed = config.tenants["t"].quota.guaranteed
        assert guaranteed == {
            "cpu": Quantity.parse("500m"),
            "memory": Quantity.parse("1Gi"),
            "pods": Quantity.parse("10"),
        }
        dumped = config.model_dump(mode="json")["tenants"]["t"]["quota"]["guaranteed"]
        assert dumped == {"cpu": "500m", "memory": "1Gi", "pods": "10"}

    def test_invalid_quantity_names_the_field(self) -> None:
        found = errors(with_tenant("t", {"quota": {"guaranteed": {"cpu": "4x"}}}))
        assert found == [
            (
                "tenants.t.quota.guaranteed.cpu",
                'Value error, invalid quantity "4x": unknown suffix "x"',
            )
        ]

    def test_queue_is_refused_clearly(self) -> None:
        found = errors(with_tenant("t", {"quota": {}, "overQuota": "queue"}))
        assert found == [
            ("tenants.t.overQuota", "Value error, queue is not supported yet; use reject")
        ]

    def test_kubernetes_backend_is_accepted(self) -> None:
        data = base()
        data["ledger"] = {"backend": "kubernetes"}
        assert TenantgateConfig.model_validate(data).ledger.backend == "kubernetes"

    @pytest.mark.parametrize(
        ("resources", "message"),
        [
            (
                {"limits.nvidia.com/gpu": "1"},
                'resource "limits.nvidia.com/gpu": only cpu, memory and ephemeral-storage have '
                "limits quotas; a nvidia.com/gpu limit always equals its request, write "
                '"requests.nvidia.com/gpu"',
            ),
            (
                {"requests.cpu": "1", "cpu": "2"},
                'resources "requests.cpu" and "cpu" name the same quota; keep one',
            ),
            ({"limits.pods": "1"}, 'resource name "limits.pods" is not a valid resource name'),
            ({"requests.pods": "1"}, 'resource "requests.pods": write "pods"'),
            ({"bad name!": "1"}, "is not a valid resource name"),
            ({"cpu": "-1"}, "must not be negative"),
        ],
    )
    def test_resource_names(self, resources: dict[str, str], message: str) -> None:
        ((where, text),) = errors(with_tenant("t", {"quota": {"guaranteed": resources}}))
        assert where == "tenants.t.quota.guaranteed"
        assert message in text

    @pytest.mark.parametrize(
        ("tenant", "spec", "message"),
        [
            ("Team_A", {"quota": {}}, "is not a DNS label"),
            ("t", {"quota": {}, "namespaces": ["Bad_NS"]}, "is not a valid namespace name"),
            ("t", {"quota": {}, "namespaces": ["a", "a"]}, 'namespace "a" is listed twice'),
            ("t", {}, "Field required"),
            ("t", {"quota": {}, "namespaceSelector": {}}, "an empty selector selects every"),
            ("t", {"quota": {"burst": {"ratio": 0}}}, "greater than 0"),
            ("t", {"quota": {}, "extra": 1}, "Extra inputs are not permitted"),
        ],
    )
    def test_tenant_shape(self, tenant: str, spec: dict[str, Any], message: str) -> None:
        found = errors(with_tenant(tenant, spec))
        assert any(message in text for _, text in found), found

    def test_quota_names_map_to_ledger_keys(self) -> None:
        """ResourceQuota's names (requests.*, limits.*, bare) count what the ledger counts."""
        config = TenantgateConfig.model_validate(
            with_tenant(
                "t",
                {
                    "quota": {
                        "guaranteed": {
                            "requests.cpu": "1",
                            "memory": "1Gi",
                            "limits.cpu": "2",
                            "limits.memory": "2Gi",
                            "limits.ephemeral-storage": "10Gi",
                            "requests.nvidia.com/gpu": "1",
                            "requests.hugepages-2Mi": "4Mi",
                            "pods": "10",
                        },
                        "burst": {"max": {"requests.cpu": "3", "limits.cpu": "6"}},
                    }
                },
            )
        )
        quota = config.tenants["t"].quota
        assert set(quota.guaranteed) == {
            "cpu",
            "memory",
            "limits.cpu",
            "limits.memory",
            "limits.ephemeral-storage",
            "nvidia.com/gpu",
            "hugepages-2Mi",
            "pods",
        }
        assert quota.burst is not None
        assert {k: str(v) for k, v in quota.burst.max.items()} == {"cpu": "3", "limits.cpu": "6"}

    def test_container_resources_take_plain_names(self) -> None:
        found = errors(
            with_tenant("t", {"quota": {}, "containerDefaults": {"limits": {"limits.cpu": "1"}}})
        )
        assert found == [
            (
                "tenants.t.containerDefaults.limits",
                'Value error, resource "limits.cpu": write the plain resource name "cpu" '
                "(this is a container resource, not a quota name)",
            )
        ]

    def test_ratio_is_exact(self) -> None:
        config = TenantgateConfig.model_validate(
            with_tenant("t", {"quota": {"guaranteed": {"cpu": "3"}, "burst": {"ratio": 1.1}}})
        )
        policy = compile_policy(config)
        assert str(policy.tenants["t"].quota.ceiling["cpu"]) == "3300m"


class TestCompile:
    def test_policy_of_the_test_config(self, policy: Policy) -> None:
        team_a = policy.tenants["team-a"]
        assert team_a.quota.ceiling == {
            "cpu": Quantity.parse("6"),
            "memory": Quantity.parse("12Gi"),
            "pods": Quantity.parse("30"),
        }
        assert team_a.allowed_classes == {"tenant-guaranteed", "gold", "batch-low", "tenant-burst"}
        assert team_a.allowed_profiles is None
        assert team_a.container_defaults == {
            "cpu": Quantity.parse("100m"),
            "memory": Quantity.parse("128Mi"),
        }
        assert policy.tenants["ml"].allowed_profiles == frozenset({"ml"})
        assert policy.tenant_for("team-a-dev") is team_a
        assert policy.tenant_for("nobody") is None
        assert policy.burst_class == "tenant-burst"
        assert policy.reservation_ttl == 120.0

    def test_unknown_references(self) -> None:
        data = base()
        data["burstPriorityClass"] = "nope"
        data["tenants"]["team-a"]["priorityClasses"] = {"guaranteed": "x", "allowed": ["y"]}
        data["tenants"]["team-a"]["profiles"] = {
            "allowed": ["web"],
            "overrides": {"db": {"schedulerName": "s"}},
        }
        assert compile_problems(data) == [
            'burstPriorityClass: unknown priority class "nope" (declare it under priorityClasses)',
            'tenants.team-a.priorityClasses.guaranteed: unknown priority class "x" '
            "(declare it under priorityClasses)",
            'tenants.team-a.priorityClasses.allowed[0]: unknown priority class "y" '
            "(declare it under priorityClasses)",
            'tenants.team-a.profiles.allowed[0]: unknown profile "web"',
            'tenants.team-a.profiles.overrides.db: unknown profile "db"',
        ]

    def test_namespace_claimed_twice(self) -> None:
        data = base()
        data["tenants"]["ml"]["namespaces"] = ["ml", "team-a-dev"]
        assert compile_problems(data) == [
            'tenants.ml.namespaces[1]: namespace "team-a-dev" is already claimed by tenant "team-a"'
        ]

    def test_classifier_problems_are_reported(self) -> None:
        data = base()
        data["rules"].append({"name": "x", "profile": "missing"})
        (problem,) = compile_problems(data)
        assert problem.startswith("rules[2]")
        assert "missing" in problem

    def test_profile_overrides_give_the_tenant_its_own_classifier(self) -> None:
        data = base()
        data["tenants"]["ml"]["profiles"]["overrides"] = {"ml": {"schedulerName": "gpu-sched"}}
        data["tenants"]["other"]["profiles"] = copy.deepcopy(data["tenants"]["ml"]["profiles"])
        data["tenants"]["other"]["profiles"]["allowed"] = None
        policy = compile_policy(TenantgateConfig.model_validate(data))
        pod = {
            "metadata": {"labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
        }
        planned = policy.tenants["ml"].classifier.plan(pod, namespace="ml").mutated
        assert planned["spec"]["schedulerName"] == "gpu-sched"
        base_plan = policy.tenants["team-a"].classifier.plan(pod, namespace="team-a").mutated
        assert "schedulerName" not in base_plan["spec"]
        # Identical overrides share one compiled classifier.
        assert policy.tenants["ml"].classifier is policy.tenants["other"].classifier
        assert policy.tenants["team-a"].classifier is policy.classifier

    def test_many_tenants_compile_with_direct_lookups(self) -> None:
        data = base()
        data["tenants"] = {
            f"t{i}": {
                "namespaces": [f"ns{i}", f"ns{i}-dev"],
                "quota": {"guaranteed": {"cpu": "4", "memory": "8Gi"}, "burst": {"ratio": 1.5}},
            }
            for i in range(10_000)
        }
        policy = compile_policy(TenantgateConfig.model_validate(data))
        assert len(policy.by_namespace) == 20_000
        tenant = policy.tenant_for("ns9999-dev")
        assert tenant is not None
        assert tenant.name == "t9999"
        assert str(tenant.quota.ceiling["memory"]) == "12Gi"


class TestNamespaceSelector:
    @pytest.mark.parametrize(
        ("selector", "labels", "matches"),
        [
            ({"matchLabels": {"team": "a"}}, {"team": "a"}, True),
            ({"matchLabels": {"team": "a"}}, {"team": "b"}, False),
            ({"matchExpressions": [{"key": "t", "operator": "In", "values": ["x"]}]}, {}, False),
            ({"matchExpressions": [{"key": "t", "operator": "NotIn", "values": ["x"]}]}, {}, True),
            (
                {"matchExpressions": [{"key": "t", "operator": "NotIn", "values": ["x"]}]},
                {"t": "x"},
                False,
            ),
            ({"matchExpressions": [{"key": "t", "operator": "Exists"}]}, {"t": ""}, True),
            ({"matchExpressions": [{"key": "t", "operator": "DoesNotExist"}]}, {"t": ""}, False),
            (
                {
                    "matchLabels": {"env": "prod"},
                    "matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}],
                },
                {"env": "prod", "team": "b"},
                True,
            ),
        ],
    )
    def test_kubernetes_semantics(
        self, selector: dict[str, Any], labels: dict[str, str], matches: bool
    ) -> None:
        compiled = NamespaceSelector.from_spec(NamespaceSelectorSpec.model_validate(selector))
        assert compiled.matches(labels) is matches

    def test_explicit_lists_first_then_selectors_in_config_order(self) -> None:
        data = base()
        data["tenants"]["sel-1"] = {
            "namespaceSelector": {"matchLabels": {"team": "x"}},
            "quota": {},
        }
        data["tenants"]["sel-2"] = {
            "namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "Exists"}]},
            "quota": {},
        }
        policy = compile_policy(TenantgateConfig.model_validate(data))
        found = policy.tenant_for("team-a", {"team": "x"})
        assert found is not None
        assert found.name == "team-a"
        found = policy.tenant_for("new", {"team": "x"})
        assert found is not None
        assert found.name == "sel-1"
        found = policy.tenant_for("new2", {"team": "y"})
        assert found is not None
        assert found.name == "sel-2"
        assert policy.tenant_for("new2", {}) is None
        # Without labels (offline), selectors cannot claim anything.
        assert policy.tenant_for("new") is None
        # Cached answers are per label set.
        found = policy.tenant_for("new", {"team": "x"})
        assert found is not None
        assert found.name == "sel-1"


def test_tenants_of_one_size_share_their_compiled_values() -> None:
    data = base()
    team_a = data["tenants"]["team-a"]
    data["tenants"]["team-b"] = {**copy.deepcopy(team_a), "namespaces": ["team-b"]}
    # Equal, but written another way: messages must keep showing what this tenant wrote.
    other_size = copy.deepcopy(team_a)
    other_size["quota"]["guaranteed"]["memory"] = "8589934592"
    data["tenants"]["team-c"] = {**other_size, "namespaces": ["team-c"]}
    tenants = compile_policy(TenantgateConfig.model_validate(data)).tenants
    a, b, c = tenants["team-a"], tenants["team-b"], tenants["team-c"]
    assert b.quota is a.quota
    assert b.allowed_classes is a.allowed_classes
    assert b.container_defaults is a.container_defaults
    assert c.quota is not a.quota
    assert str(c.quota.guaranteed["memory"]) == "8589934592"
    assert c.quota == a.quota
    assert tenants["ml"].allowed_profiles == frozenset({"ml"})


# --------------------------------------------------------------------------- kept state


BATCH_POD: dict[str, Any] = {
    "metadata": {"labels": {"app": "x"}},
    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]},
}


def overridden() -> TenantgateConfig:
    """The test config with a selector tenant and a tenant whose batch profile is overridden."""
    data = base()
    data["tenants"]["ml"]["profiles"]["overrides"] = {"batch": {"schedulerName": "batch-sched"}}
    data["tenants"]["sel"] = {
        "namespaceSelector": {"matchLabels": {"team": "sel"}},
        "quota": {"guaranteed": {"cpu": "1"}},
    }
    return TenantgateConfig.model_validate(data)


def planned_spec(policy: Policy, tenant: str) -> dict[str, Any]:
    namespace = tenant if tenant != "sel" else "sel-ns"
    classifier = policy.tenants[tenant].classifier
    spec: dict[str, Any] = classifier.plan(BATCH_POD, namespace=namespace).mutated["spec"]
    return spec


def test_a_policy_compiled_without_its_config_keeps_none_of_it() -> None:
    config = overridden()
    policy = compile_policy(config)
    assert not hasattr(policy, "config")
    # The classifiers keep their part of the config only, not the tenants.
    for classifier in {id(t.classifier): t.classifier for t in policy.tenants.values()}.values():
        assert type(classifier.config) is ClassifierConfig
        assert classifier.config.rules == config.rules
    assert len(policy.variants) == 1
    assert policy.ledger_backend == "memory"


def test_with_priority_classes_compiles_only_the_classifiers_again() -> None:
    config = overridden()
    policy = compile_policy(config)
    classes = {
        **policy.priority_classes,
        "batch-low": PriorityClassSpec(value=150, preemptionPolicy="Never"),
    }
    live = policy.with_priority_classes(classes)

    assert live.priority_classes["batch-low"].value == 150
    assert policy.priority_classes["batch-low"].value == 100  # the original is untouched
    for tenant in ("team-a", "ml", "sel"):
        assert planned_spec(live, tenant)["priority"] == 150
        assert planned_spec(live, tenant)["preemptionPolicy"] == "Never"
        assert planned_spec(policy, tenant)["priority"] == 100
    assert planned_spec(live, "ml")["schedulerName"] == "batch-sched"
    assert "schedulerName" not in planned_spec(live, "team-a")
    # The same as compiling the config with those values from scratch.
    fresh = compile_policy(config.model_copy(update={"priorityClasses": classes}))
    for tenant in ("team-a", "ml", "sel"):
        assert planned_spec(live, tenant) == planned_spec(fresh, tenant)
    assert live.tenants["team-a"].quota is policy.tenants["team-a"].quota
    # The indexes lead to the recompiled tenants.
    assert live.by_namespace["ml"] is live.tenants["ml"]
    assert live.tenant_for("sel-ns", {"team": "sel"}) is live.tenants["sel"]
    assert live.selector_tenants == (live.tenants["sel"],)
    assert live.tenants["team-a"].classifier is live.classifier
    assert live.variants[0].classifier is live.tenants["ml"].classifier
    # And it can be done again from the result.
    again = live.with_priority_classes(policy.priority_classes)
    assert planned_spec(again, "ml")["priority"] == 100


def test_with_priority_classes_keeps_the_names() -> None:
    policy = compile_policy(overridden())
    with pytest.raises(ValueError, match="names must not change"):
        policy.with_priority_classes({"tenant-burst": PriorityClassSpec(value=1)})
