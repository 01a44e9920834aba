"""``tenantgate schema``: the JSON Schema validates real config files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.cli import main
from admission.commands.schema import SCHEMA_ID, config_schema

jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tenantgate.yaml"


def printed_schema(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["schema"]) == 0
    schema: dict[str, Any] = json.loads(capsys.readouterr().out)
    return schema


def validator(schema: dict[str, Any]) -> Any:
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def test_prints_a_valid_draft_2020_12_schema(capsys: pytest.CaptureFixture[str]) -> None:
    schema = printed_schema(capsys)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == SCHEMA_ID
    assert schema == json.loads(json.dumps(config_schema()))
    for key in (
        "tenants",
        "burstPriorityClass",
        "unclaimedNamespaces",
        "reservationTTLSeconds",
        "ledger",
        "profiles",
        "rules",
        "priorityClasses",
    ):
        assert key in schema["properties"]
    validator(schema)


def test_the_example_config_validates(capsys: pytest.CaptureFixture[str]) -> None:
    document = yaml.safe_load(EXAMPLE.read_text())
    errors = list(validator(printed_schema(capsys)).iter_errors(document))
    assert errors == []


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"unclaimedNamespaces": "maybe"}, ["unclaimedNamespaces"]),
        ({"tenants": {"a": {"namespaces": ["a"]}}}, ["tenants", "a"]),
        (
            {"tenants": {"a": {"quota": {"guaranteed": {"cpu": "4x"}}}}},
            ["tenants", "a", "quota", "guaranteed", "cpu"],
        ),
        ({"tenants": {"a": {"quota": {}, "overQuota": "drop"}}}, ["tenants", "a", "overQuota"]),
        ({"ledger": {"backend": "etcd"}}, ["ledger", "backend"]),
        ({"surprise": 1}, []),
    ],
)
def test_mistakes_are_caught_by_the_schema(
    capsys: pytest.CaptureFixture[str], change: dict[str, Any], path: list[str]
) -> None:
    document = yaml.safe_load(EXAMPLE.read_text())
    document.update(change)
    errors = list(validator(printed_schema(capsys)).iter_errors(document))
    assert errors, f"{change} was accepted"
    assert any(list(error.absolute_path) == path for error in errors), [
        (list(e.absolute_path), e.message) for e in errors
    ]
