"""A rule written in a config stays decisive now that evidence is weighed.

On every preset that writes rules of its own (``admission/presets/*.yaml``), every pod of the
real-manifest corpus that a rule matches gets the same profile, by the same rule, with the
shipped evidence weighed as with evidence off (``evidence: {builtin: false}``, which is how
every config was read before evidence). Only pods no rule matches may change.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from classifier.config import ClassifierConfig
from classifier.plan import Classifier, compile_classifier
from classifier.templates import pod_from_template
from tests.classifier import test_fixtures

ROOT = Path(__file__).resolve().parents[2]
PRESETS = ROOT / "admission" / "presets"


def presets_with_rules() -> list[str]:
    return sorted(
        path.stem
        for path in PRESETS.glob("*.yaml")
        if (yaml.safe_load(path.read_text()) or {}).get("rules")
    )


@cache
def compiled(name: str, *, evidence: bool) -> Classifier:
    raw: dict[str, Any] = yaml.safe_load((PRESETS / f"{name}.yaml").read_text())
    fields = ClassifierConfig.model_fields
    config = {k: v for k, v in raw.items() if k in fields}
    if not evidence:
        config["evidence"] = {"builtin": False}
    return compile_classifier(ClassifierConfig.model_validate(config))


def test_the_presets_that_write_rules() -> None:
    # The embedded default writes none (it judges by evidence); every other preset does.
    assert presets_with_rules() == sorted(
        path.stem for path in PRESETS.glob("*.yaml") if path.stem != "default"
    )


@pytest.mark.parametrize("name", presets_with_rules())
def test_a_pod_a_rule_matches_keeps_its_verdict(name: str) -> None:
    before, after = compiled(name, evidence=False), compiled(name, evidence=True)
    matched = 0
    for fixture, key in test_fixtures.all_templates():
        pod = pod_from_template(test_fixtures.template(fixture, key), namespace="default")
        namespace = str(pod["metadata"]["namespace"])
        old = before.classify(pod, namespace=namespace)
        if old.source != "rule":
            continue
        matched += 1
        new = after.classify(pod, namespace=namespace)
        assert (new.source, new.rule, new.profile) == ("rule", old.rule, old.profile), (
            fixture,
            key,
        )
    assert matched > 0, f"no pod of the corpus matches a rule of preset {name}"
