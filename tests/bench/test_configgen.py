"""Generated configs: sizes, tenant kinds, and rules that change no classification."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from bench import configgen
from bench.configgen import compile_generated, generate_config
from bench.workload import SourcePod
from tenants.config import TenantgateConfig
from tenants.configfile import load_text

SHIPPED_RULES: list[dict[str, Any]] = [
    {"name": "shipped-batch", "profile": "batch", "match": {"ownerKind": "Job"}},
    {"name": "shipped-api", "profile": "api", "match": {"port": "*"}},
]


@pytest.fixture
def shipped_rules(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The example config with rules of its own (the embedded default ships none)."""
    example = configgen.example_config()

    def with_rules() -> dict[str, object]:
        return {**copy.deepcopy(example), "rules": copy.deepcopy(SHIPPED_RULES)}

    monkeypatch.setattr(configgen, "example_config", with_rules)
    return [rule["name"] for rule in SHIPPED_RULES]


def test_counts_and_order_of_rules(shipped_rules: list[str]) -> None:
    document = generate_config(tenants=3, rules=len(shipped_rules) + 5)

    names = [rule["name"] for rule in document["rules"]]
    assert len(names) == len(shipped_rules) + 5
    assert names[-len(shipped_rules) :] == shipped_rules  # team rules go first
    assert all(name.startswith("filler-") for name in names[:5])
    assert list(document["tenants"]) == ["t00000", "t00001", "t00002"]


def test_fewer_rules_than_shipped_keeps_the_shipped_ones(shipped_rules: list[str]) -> None:
    assert len(generate_config(tenants=1, rules=1)["rules"]) == len(shipped_rules)


def test_the_embedded_default_ships_no_rules() -> None:
    assert configgen.example_config()["rules"] == []
    assert len(generate_config(tenants=1, rules=7)["rules"]) == 7


def test_a_config_needs_a_tenant() -> None:
    with pytest.raises(ValueError, match="at least one tenant"):
        generate_config(tenants=0)


def test_it_compiles_and_its_yaml_loads_the_same() -> None:
    document = generate_config(tenants=12, rules=40)

    generated = compile_generated(document)
    loaded = load_text(configgen.config_yaml(document), filename="generated.yaml")

    assert generated.tenants == 12
    assert generated.rules == 40
    assert loaded.config == TenantgateConfig.model_validate(document)
    assert len(generated.namespaces()) == 24
    assert generated.namespaces()[0] == ("t00000", "t00000-prod")


def test_tenant_kinds() -> None:
    policy = compile_generated(generate_config(tenants=12)).policy

    burst = [name for name in policy.tenants if configgen.is_burst_tenant(int(name[1:]))]
    assert burst == ["t00003", "t00007", "t00011"]
    for name, tenant in policy.tenants.items():
        pods = tenant.quota.guaranteed["pods"]
        assert (pods.nanos == 0) == (name in burst)
        assert tenant.quota.ceiling["pods"].nanos > 0
    overridden = {n for n, t in policy.tenants.items() if t.classifier is not policy.classifier}
    assert overridden == {"t00005"}


def test_team_rules_match_no_workload_pod(sources: list[SourcePod]) -> None:
    plain = compile_generated(generate_config(tenants=1)).policy.classifier
    crowded = compile_generated(generate_config(tenants=1, rules=60)).policy.classifier

    for source in sources:
        expected = plain.classify(source.pod, namespace="t00000-prod")
        found = crowded.classify(source.pod, namespace="t00000-prod")
        assert found.profile == expected.profile, source.key
        assert found.rule == expected.rule, source.key
