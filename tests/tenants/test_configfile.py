"""Reading config files: every problem as FILE:LINE: FIELD: MESSAGE (tenants/configfile.py)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
import yaml

from tenants.configfile import (
    ConfigError,
    ConfigProblem,
    load,
    load_config,
    load_policy,
    load_text,
)
from tests.tenants.conftest import CONFIG, EXAMPLE_CONFIG


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_text(text, filename="cfg.yaml")
    return str(caught.value).splitlines()


def test_example_config_loads() -> None:
    loaded = load(EXAMPLE_CONFIG)
    policy = loaded.policy
    team_a = policy.tenants["team-a"]
    assert {str(k): str(v) for k, v in team_a.quota.guaranteed.items()} == {
        "cpu": "4",
        "memory": "8Gi",
        "pods": "20",
    }
    assert {k: str(v) for k, v in team_a.quota.ceiling.items()} == {
        "cpu": "6",
        "memory": "12Gi",
        "pods": "30",
    }
    assert team_a.namespaces == ("team-a", "team-a-dev")
    ml = policy.tenants["ml"]
    assert {k: str(v) for k, v in ml.quota.guaranteed.items()} == {
        "cpu": "32",
        "memory": "128Gi",
        "nvidia.com/gpu": "4",
    }
    assert str(ml.quota.ceiling["nvidia.com/gpu"]) == "6"
    assert policy.unclaimed == "allow"
    assert (
        policy.priority_classes["tenant-burst"].value
        < policy.priority_classes["tenant-guaranteed"].value
    )
    assert load_config(EXAMPLE_CONFIG) == loaded.config
    assert load_policy(EXAMPLE_CONFIG).tenants.keys() == policy.tenants.keys()
    # The validated config is the loader's to give, not the policy's to keep.
    assert not hasattr(policy, "config")


def test_bad_quantity_names_file_line_and_field() -> None:
    text = CONFIG.replace('guaranteed: {cpu: "4", memory: 8Gi', "guaranteed: {cpu: 4x, memory: 8Gi")
    assert problems(text) == [
        "cfg.yaml:24: tenants.team-a.quota.guaranteed.cpu: "
        'invalid quantity "4x": unknown suffix "x"'
    ]


def test_every_schema_problem_is_listed_with_its_line() -> None:
    text = """\
priorityClasses:
  tenant-burst: {value: 10}
tenants:
  team-a:
    namespaces: [team-a]
    quota:
      guaranteed:
        nvidia.com/gpu: lots
    overQuota: queue
    surprise: 1
  b:
    namespaces: [b]
unclaimedNamespaces: maybe
ledger:
  backend: etcd
"""
    assert problems(text) == [
        'cfg.yaml:8: tenants.team-a.quota.guaranteed[nvidia.com/gpu]: invalid quantity "lots": '
        "not a number",
        "cfg.yaml:9: tenants.team-a.overQuota: queue is not supported yet; use reject",
        "cfg.yaml:10: tenants.team-a.surprise: unknown field",
        "cfg.yaml:11: tenants.b.quota: required field is missing",
        "cfg.yaml:13: unclaimedNamespaces: Input should be 'allow' or 'deny'",
        "cfg.yaml:15: ledger.backend: Input should be 'memory' or 'kubernetes'",
    ]


def test_semantic_problems_carry_lines() -> None:
    text = CONFIG.replace("namespaces: [ml]", "namespaces: [ml, team-a]").replace(
        "allowed: [gold, batch-low]", "allowed: [gold, platinum]"
    )
    assert problems(text) == [
        'cfg.yaml:26: tenants.team-a.priorityClasses.allowed[1]: unknown priority class "platinum" '
        "(declare it under priorityClasses)",
        'cfg.yaml:30: tenants.ml.namespaces[1]: namespace "team-a" is already claimed by tenant '
        '"team-a"',
    ]


def test_duplicate_keys_are_errors() -> None:
    text = """\
tenants:
  a:
    namespaces: [a]
    quota: {guaranteed: {cpu: 1, cpu: 2}}
  a:
    quota: {}
"""
    assert problems(text) == [
        'cfg.yaml:4: tenants.a.quota.guaranteed.cpu: duplicate key "cpu" (first at line 4)',
        'cfg.yaml:5: tenants.a: duplicate key "a" (first at line 2)',
    ]


def test_merge_keys_are_not_duplicates() -> None:
    text = (
        CONFIG
        + """\
  anchored:
    namespaces: [anchored]
    quota: &q
      guaranteed: {cpu: "2"}
  merged:
    namespaces: [merged]
    quota:
      <<: *q
      burst: {ratio: 2}
"""
    )
    policy = load_text(text).policy
    assert str(policy.tenants["merged"].quota.ceiling["cpu"]) == "4"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "cfg.yaml:1: the config file is empty"),
        ("# only a comment\n", "cfg.yaml:1: the config file is empty"),
        (
            "tenants: [\n",
            "cfg.yaml:2:1: while parsing a flow node, did not find expected node content",
        ),
        ("a: 1\n---\nb: 2\n", "cfg.yaml:2:1: expected a single document in the stream"),
        ("- 1\n", "cfg.yaml:1: Input should be a valid dictionary"),
        ("tenants:\n  a: b: c\n", "cfg.yaml:2:7: mapping values are not allowed"),
    ],
)
def test_broken_documents(text: str, expected: str) -> None:
    (first, *_) = problems(text)
    assert first.startswith(expected), first


def test_unreadable_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as caught:
        load(missing)
    assert str(caught.value) == f"{missing}: cannot read: No such file or directory"
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="cannot read"):
        load(binary)


def test_problem_rendering() -> None:
    assert str(ConfigProblem("f.yaml", 3, "a.b", "bad")) == "f.yaml:3: a.b: bad"
    assert str(ConfigProblem("f.yaml", 3, "", "bad")) == "f.yaml:3: bad"
    assert str(ConfigProblem("f.yaml", 0, "", "bad")) == "f.yaml: bad"
    error = ConfigError([ConfigProblem("f", 9, "z", "m"), ConfigProblem("f", 2, "a", "m")])
    assert [p.line for p in error.problems] == [2, 9]


def test_a_loaded_config_keeps_no_yaml_nodes(tmp_path: Path) -> None:
    # The node tree (kept for line numbers while loading) is ~3x the config's size: a loaded
    # config must not keep any of it alive.
    path = tmp_path / "tenantgate.yaml"
    path.write_text(CONFIG, encoding="utf-8")

    def live_nodes() -> int:
        gc.collect()
        return sum(isinstance(o, yaml.nodes.Node) for o in gc.get_objects())

    before = live_nodes()
    loaded = load(path)
    assert live_nodes() == before
    assert loaded.policy.tenants


def test_yaml_types_survive_the_copy_that_drops_the_nodes() -> None:
    # An alias and a non-string key reach validation exactly as YAML built them.
    text = CONFIG.replace("  other:\n", "  other: &o\n").replace(
        'quota: {guaranteed: {cpu: "1"}}', 'quota: {guaranteed: {1: "1"}}'
    )
    assert any("tenants.other.quota.guaranteed" in line for line in problems(text))
