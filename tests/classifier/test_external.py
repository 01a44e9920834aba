"""Real-world manifests outside the corpus (tests/fixtures/external): expected profiles.

The corpus (test_fixtures.py) is where the shipped weights are tuned and held out. These files
come from the corpus's repositories and from others it does not use (inference stacks, CI
infrastructure, operators' examples, accelerator vendors), each labelled from what the
software does before the classifier was run on it. The agreement is printed with its confusion
table and its misses, and held at the floor measured when the files were added, so a change to
the weights that helps the corpus at these workloads' cost shows.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.commands.review import read_manifests
from classifier.agreement import Agreement, measure
from classifier.templates import PodTemplate, find_pod_templates, pod_from_template
from tests.classifier.test_fixtures import classifier

EXTERNAL = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "external"
# 204 of 242 pods when the files were added, 205 since an add-on's images count as its own, 210
# since names and images of YARN, admission webhooks and request routers weigh, 212 since search
# services and training operators' own kinds weigh more:
# a floor against regressions.
FLOOR = 362 / 420


def files() -> list[Path]:
    return sorted(p for p in EXTERNAL.iterdir() if p.suffix in (".yaml", ".yml", ".json"))


def manifest_files() -> list[Path]:
    return [p for p in files() if p.name != "expected.yaml"]


@cache
def index() -> dict[str, dict[str, Any]]:
    data = yaml.safe_load((EXTERNAL / "expected.yaml").read_text())
    return {name: dict(entries or {}) for name, entries in data.items()}


@cache
def templates(name: str) -> tuple[PodTemplate, ...]:
    text = (EXTERNAL / name).read_text(encoding="utf-8")
    return tuple(
        found
        for document in read_manifests(name, text)
        for found in find_pod_templates(document.body)
    )


@cache
def outcomes() -> tuple[tuple[str, str, str, str], ...]:
    """(file, template key, expected profile, classified profile) of every template."""
    found = []
    for path in manifest_files():
        for template in templates(path.name):
            entry = index()[path.name][template.key]
            want = entry if isinstance(entry, str) else entry["expected"]
            pod = pod_from_template(template, namespace="default")
            got = classifier().classify(pod, namespace=str(pod["metadata"]["namespace"])).profile
            found.append((path.name, template.key, want, got))
    return tuple(found)


def agreement() -> Agreement:
    return measure((want, got) for _, _, want, got in outcomes())


def test_agreement_on_the_external_manifests(capsys: pytest.CaptureFixture[str]) -> None:
    found = agreement()
    lines = [f"external manifests, {found.summary()}", found.confusion_table()]
    for name, key, want, got in outcomes():
        if want != got:
            entry = index()[name][key]
            why = entry["why"] if isinstance(entry, dict) else "(not recorded)"
            lines.append(f"  miss {name} {key}: {want} -> {got}: {why}")
    text = "\n".join(lines)
    with capsys.disabled():
        print(f"\n{text}")
    assert found.rate >= FLOOR, text


def test_every_miss_is_recorded_with_why() -> None:
    """A pod the default gets wrong says so, with what it gives and why; a recorded miss the
    default now gets right must become a plain expected entry."""
    for name, key, want, got in outcomes():
        entry = index()[name][key]
        if want == got:
            assert isinstance(entry, str), (name, key, "no longer a miss")
        else:
            assert isinstance(entry, dict), (name, key, f"an unrecorded miss: {got}")
            assert set(entry) == {"expected", "classified", "why"}, (name, key)
            assert entry["classified"] == got, (name, key)


def test_every_file_has_its_source_and_its_entries() -> None:
    sources = (EXTERNAL / "SOURCES.md").read_text()
    names = {path.name for path in manifest_files()}
    listed = {
        line.split("|")[1].strip()
        for line in sources.splitlines()
        if line.startswith("| ") and not line.startswith(("| file ", "| --- "))
    }
    assert listed == names
    assert set(index()) == names
    for name in names:
        assert sorted(found.key for found in templates(name)) == sorted(index()[name]), name
