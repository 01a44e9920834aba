"""Tests for admission.configreload: a config read, validated and compiled in a child process,
bounded in size and in the problems it reports, and its policy unpickled in the serving one."""

from __future__ import annotations

import asyncio
import io
import json
import os
import pickle
import subprocess
import sys
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, NoReturn

import pytest

from admission.configreload import (
    ConfigRejected,
    load_policy_limited,
    read_policy,
    read_policy_stream,
    write_policy,
)
from bench.configgen import compile_generated, config_yaml, generate_config
from bench.stack import Pipeline
from bench.workload import build_workload, load_sources, pair_ids
from classifier import podview
from classifier.plan import Classifier
from classifier.profiles import CompiledProfile, apply_profile
from classifier.types import JSONObject
from tenants import configfile
from tenants.config import Policy
from tenants.decisions import PolicyAdmitter
from tenants.ledger import MemoryLedger
from tests.adversarial.support import EXAMPLE_CONFIG, broken_config


def test_problems_past_the_cap_are_counted_not_listed(tmp_path: Path) -> None:
    path = tmp_path / "tenantgate.yaml"
    path.write_text(broken_config(100))

    outcome = load_policy_limited(str(path), 1 << 30, 20)

    assert isinstance(outcome, ConfigRejected)
    assert len(outcome.problems) == 20
    assert outcome.omitted == 180
    assert outcome.count == 200
    assert str(outcome).endswith(" (and 180 more)")
    assert all(problem.startswith(f"{path}:") for problem in outcome.problems)


def test_a_file_over_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "tenantgate.yaml"
    path.write_text(EXAMPLE_CONFIG)
    limit = len(EXAMPLE_CONFIG.encode()) - 1

    outcome = load_policy_limited(str(path), limit, 20)

    assert isinstance(outcome, ConfigRejected)
    assert outcome.problems == (f"{path}: larger than the limit of {limit} bytes",)
    assert isinstance(load_policy_limited(str(path), limit + 1, 20), Policy)  # at the limit


def test_read_policy_loads_in_a_child_process(tmp_path: Path) -> None:
    path = tmp_path / "tenantgate.yaml"
    path.write_text(EXAMPLE_CONFIG)

    policy = asyncio.run(read_policy(path, max_bytes=1 << 24, max_problems=20))

    loaded_here = load_policy_limited(str(path), 1 << 24, 20)
    assert isinstance(loaded_here, Policy)
    assert set(policy.tenants) == set(loaded_here.tenants)
    path.write_text(broken_config(3))
    with pytest.raises(ConfigRejected) as caught:
        asyncio.run(read_policy(path, max_bytes=1 << 24, max_problems=2))
    assert caught.value.count == 6
    assert caught.value.omitted == 4


def run_child(path: Path) -> bytes:
    """The child as the server starts it: its own process (it lowers its own CPU priority,
    which must not stay with the test run)."""
    done = subprocess.run(
        [sys.executable, "-m", "admission.configreload", str(path), str(1 << 24), "1"],
        capture_output=True,
        check=True,
        timeout=60,
    )
    return done.stdout


def test_the_child_answers_in_json_then_the_policy(tmp_path: Path) -> None:
    niceness = os.nice(0)
    path = tmp_path / "tenantgate.yaml"
    path.write_text(broken_config(1))

    answer = json.loads(run_child(path))
    assert answer["ok"] is False
    assert answer["omitted"] == 1
    assert answer["problems"][0].startswith(f"{path}:")
    path.write_text(EXAMPLE_CONFIG)
    head, _, body = run_child(path).partition(b"\n")
    assert json.loads(head) == {"ok": True}
    policy = asyncio.run(read_policy_stream(io.BytesIO(body)))
    assert list(policy.tenants) == ["team-a", "ml"]
    assert os.nice(0) == niceness


# --------------------------------------------------------------------------- compiled in the child

NOW = 1_800_000_000.0
SELECTOR_TENANT = {
    "namespaces": [],
    "namespaceSelector": {"matchLabels": {"example.com/team": "platform"}},
    "quota": {"guaranteed": {"cpu": "8", "pods": "50"}},
}


def _generated_config(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """A generated config (tenants with profile overrides among them) plus a selector tenant."""
    document = generate_config(tenants=30)
    document["tenants"]["by-label"] = SELECTOR_TENANT
    path = tmp_path / "tenantgate.yaml"
    path.write_text(config_yaml(document))
    return path, document


@pytest.fixture(scope="module")
def compiled_both_ways(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Policy, Policy, dict[str, Any]]:
    """The same config compiled in a child process (and unpickled here), and here."""
    path, document = _generated_config(tmp_path_factory.mktemp("config"))
    from_child = asyncio.run(read_policy(path, max_bytes=1 << 24, max_problems=20))
    here = load_policy_limited(str(path), 1 << 24, 20)
    assert isinstance(here, Policy)
    return from_child, here, document


def test_the_serving_process_does_not_load_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading, validating and compiling hold the GIL for seconds on a large config: in the
    serving process they would stall every review; the policy comes back compiled."""

    def refuse(*args: object, **kwargs: object) -> NoReturn:
        raise AssertionError("the config was loaded in the serving process")

    monkeypatch.setattr(configfile, "load_text", refuse)
    monkeypatch.setattr(configfile, "compile_policy", refuse)
    path, document = _generated_config(tmp_path)

    policy = asyncio.run(read_policy(path, max_bytes=1 << 24, max_problems=20))

    assert list(policy.tenants) == list(document["tenants"])


def test_the_policy_from_the_child_is_built_like_one_compiled_here(
    compiled_both_ways: tuple[Policy, Policy, dict[str, Any]],
) -> None:
    from_child, here, _ = compiled_both_ways

    assert list(from_child.tenants) == list(here.tenants)
    assert from_child.by_namespace.keys() == here.by_namespace.keys()
    assert all(from_child.by_namespace[ns].name == t.name for ns, t in here.by_namespace.items())
    assert [t.name for t in from_child.selector_tenants] == ["by-label"]
    assert (
        from_child.tenant_for("anything", {"example.com/team": "platform"})
        is (from_child.tenants["by-label"])
    )
    for name, tenant in from_child.tenants.items():
        assert from_child.by_namespace.get(tenant.namespaces[0] if tenant.namespaces else "") in (
            None,
            tenant,
        )
        assert replace(tenant, classifier=here.tenants[name].classifier) == here.tenants[name]
    # Shared objects stay shared: one classifier per set of profile overrides, as here.
    classifiers = {id(t.classifier) for t in from_child.tenants.values()}
    assert classifiers == {
        id(from_child.classifier),
        *(id(v.classifier) for v in from_child.variants),
    }
    assert len(from_child.variants) == len(here.variants) == 1
    assert len({id(t.quota) for t in from_child.tenants.values()}) == len(
        {id(t.quota) for t in here.tenants.values()}
    )
    compiled = {"tenants", "by_namespace", "selector_tenants", "classifier", "variants"}
    for field in fields(Policy):
        if field.compare and field.name not in compiled:  # the config's scalar settings
            assert getattr(from_child, field.name) == getattr(here, field.name), field.name


def _classifiers(policy: Policy) -> list[Classifier]:
    return [policy.classifier, *(variant.classifier for variant in policy.variants)]


def test_the_policy_from_the_child_classifies_and_applies_every_profile_alike(
    compiled_both_ways: tuple[Policy, Policy, dict[str, Any]],
) -> None:
    """Every fixture pod through every profile of every compiled classifier (the overrides'
    too): the pre-rendered spread and pod (anti-)affinity JSON must survive the trip."""
    from_child, here, _ = compiled_both_ways
    sources = load_sources()
    namespace = next(iter(here.by_namespace))
    applied = 0
    for child_classifier, classifier in zip(
        _classifiers(from_child), _classifiers(here), strict=True
    ):
        assert child_classifier.profile_names == classifier.profile_names
        for source in sources:
            assert child_classifier.plan(source.pod, namespace=namespace) == classifier.plan(
                source.pod, namespace=namespace
            ), source.key
            for name in sorted(classifier.profile_names):
                outcomes = [
                    _apply(source.pod, compiled.profile(name))
                    for compiled in (child_classifier, classifier)
                ]
                assert outcomes[0] == outcomes[1], (source.key, name)
                applied += outcomes[1][2]
    assert applied > 0


def _apply(pod: JSONObject, profile: CompiledProfile) -> tuple[JSONObject, list[str], bool]:
    mutated: JSONObject = dict(pod)
    mutated["metadata"] = dict(podview.metadata(pod))
    mutated["spec"] = dict(podview.spec(pod))
    notes: list[str] = []
    changed = apply_profile(mutated, profile, notes=notes)
    return mutated, notes, changed


def test_the_policy_from_the_child_decides_alike(
    compiled_both_ways: tuple[Policy, Policy, dict[str, Any]],
) -> None:
    """Real review pairs over the generated tenants: the same answers, byte for byte."""
    from_child, here, document = compiled_both_ways
    workload = build_workload(compile_generated(document), pairs=60, seed=3)
    pipelines = [Pipeline(PolicyAdmitter(policy, MemoryLedger())) for policy in (from_child, here)]
    for index, pair in enumerate(workload.pairs):
        mutate_body, validate_body = pair.bodies(pair_ids(5, index))
        answers = [
            (p.mutate(mutate_body, now=NOW)[0], p.validate(validate_body, now=NOW)[0])
            for p in pipelines
        ]
        assert answers[0] == answers[1], pair.source
    assert len({pair.profile for pair in workload.pairs}) > 3


def test_the_policy_from_the_child_compiles_with_the_cluster_s_priority_classes(
    compiled_both_ways: tuple[Policy, Policy, dict[str, Any]],
) -> None:
    from_child, here, _ = compiled_both_ways
    classes = {
        name: spec.model_copy(update={"value": spec.value + 1})
        for name, spec in here.priority_classes.items()
    }

    recompiled, expected = (
        from_child.with_priority_classes(classes),
        here.with_priority_classes(classes),
    )

    assert recompiled.priority_classes == expected.priority_classes
    tenant = next(
        t for t in recompiled.tenants.values() if t.classifier is not recompiled.classifier
    )
    assert tenant.classifier is recompiled.variants[0].classifier
    source = load_sources()[0]
    namespace = tenant.namespaces[0]
    assert tenant.classifier.plan(source.pod, namespace=namespace) == expected.tenants[
        tenant.name
    ].classifier.plan(source.pod, namespace=namespace)


def test_a_broken_policy_stream_is_an_error_not_a_policy(
    compiled_both_ways: tuple[Policy, Policy, dict[str, Any]],
) -> None:
    _, here, _ = compiled_both_ways
    stream = io.BytesIO()
    write_policy(here, stream)
    whole = stream.getvalue()

    assert list(asyncio.run(read_policy_stream(io.BytesIO(whole))).tenants) == list(here.tenants)
    for cut in (len(whole) // 10, len(whole) // 2, len(whole) - 1):
        with pytest.raises((EOFError, pickle.UnpicklingError)):
            asyncio.run(read_policy_stream(io.BytesIO(whole[:cut])))
    wrong = io.BytesIO()
    pickle.Pickler(wrong).dump({"not": "a policy"})
    with pytest.raises(pickle.UnpicklingError, match="expected a policy, got dict"):
        asyncio.run(read_policy_stream(io.BytesIO(wrong.getvalue())))


def test_a_child_that_fails_refuses_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child killed half-way (out of memory, say) leaves no usable answer: the file is
    refused with the reason, never half taken."""
    path = tmp_path / "tenantgate.yaml"
    path.write_text(EXAMPLE_CONFIG)
    fake = tmp_path / "python"
    fake.write_text(
        "#!/bin/sh\nprintf '{\"ok\": true}\\n\\200\\005garbage'\necho killed >&2\nexit 137\n"
    )
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))

    with pytest.raises(ConfigRejected) as caught:
        asyncio.run(read_policy(path, max_bytes=1 << 24, max_problems=20))

    assert caught.value.problems == (
        f"{path}: could not be checked: the process checking it exited with code 137 killed",
    )
