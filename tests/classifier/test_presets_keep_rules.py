"""A rule written in a config stays decisive now that evidence is weighed.

On every preset that writes rules of its own (``admission/presets/*.yaml``), every pod of the
real-manifest corpus that a rule matches gets the same profile, by the same rule, with the
shipped evidence weighed as with evidence off (``evidence: {builtin: false}``, which is how
every config was read before evidence). Only pods no rule matches may change. Every rule of
every such preset is exercised: the rules no corpus pod matches get a corpus pod labelled for
them, one the evidence alone would give another profile.
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
from classifier.types import JSONObject
from tests.classifier import test_fixtures

ROOT = Path(__file__).resolve().parents[2]
PRESETS = ROOT / "admission" / "presets"


def presets_with_rules() -> list[str]:
    return sorted(
        path.stem
        for path in PRESETS.glob("*.yaml")
        if (yaml.safe_load(path.read_text()) or {}).get("rules")
    )


# Corpus pods relabelled for the rules no corpus pod matches as written: (fixture, template
# key, labels added). The evidence calls the first a database and the second a web frontend.
RELABELLED = (
    (
        "k8s-website-cassandra-statefulset.yaml",
        "StatefulSet/cassandra@spec.template",
        {"workload.kubernetes.io/priority": "realtime"},
    ),
    (
        "k8s-examples-guestbook-all-in-one.yaml",
        "Deployment/frontend@spec.template",
        {"workload.kubernetes.io/type": "batch"},
    ),
)


@cache
def pods() -> tuple[tuple[str, JSONObject], ...]:
    """Every corpus pod, then the relabelled ones, each with a name for messages."""
    found = []
    for fixture, key in test_fixtures.all_templates():
        found.append(
            (
                f"{fixture} {key}",
                pod_from_template(test_fixtures.template(fixture, key), namespace="default"),
            )
        )
    for fixture, key, labels in RELABELLED:
        pod = pod_from_template(test_fixtures.template(fixture, key), namespace="default")
        pod["metadata"]["labels"] = {**pod["metadata"].get("labels", {}), **labels}
        found.append((f"{fixture} {key} +{labels}", pod))
    return tuple(found)


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
    exercised = set()
    for subject, pod in pods():
        namespace = str(pod["metadata"]["namespace"])
        old = before.classify(pod, namespace=namespace)
        if old.source != "rule":
            continue
        exercised.add(old.rule)
        new = after.classify(pod, namespace=namespace)
        assert (new.source, new.rule, new.profile) == ("rule", old.rule, old.profile), subject
    raw: dict[str, Any] = yaml.safe_load((PRESETS / f"{name}.yaml").read_text())
    assert exercised == {rule["name"] for rule in raw["rules"]}, f"rules no pod matches in {name}"


def test_the_relabelled_pods_differ_by_evidence() -> None:
    # Each relabelled pod would get another profile than its rule's from the evidence alone,
    # so keeping the rule's verdict is a test of rules staying decisive.
    default = test_fixtures.classifier()
    rules = compiled("scheduler-selector", evidence=True)
    for _, pod in pods()[-len(RELABELLED) :]:
        namespace = str(pod["metadata"]["namespace"])
        by_rule = rules.classify(pod, namespace=namespace)
        by_evidence = default.classify(pod, namespace=namespace)
        assert by_rule.source == "rule"
        assert by_evidence.source == "evidence"
        assert by_evidence.profile != by_rule.profile
