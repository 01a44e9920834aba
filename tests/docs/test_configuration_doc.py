"""docs/configuration.md stays true to the code.

Every fenced ``yaml`` block is checked according to the HTML comment on the line before it:

* no marker: a complete config file; it must load (``tenants.configfile.load_text``) and lint
  clean;
* ``<!-- fragment -->``: valid YAML; when its top-level keys are config sections, it is merged
  into ``examples/tenantgate.yaml`` (mapping sections key by key, others replaced) and the
  result must load and lint clean;
* ``<!-- excerpt: FILE -->``: a sub-document of FILE (same keys and values);
* ``<!-- lint-example: NAME -->``: a broken config on purpose; a ``console`` block running
  ``tenantgate lint NAME`` must follow, and is compared with the real output.

The worked tier example, the messages the document quotes, the ceiling table and the field
names are regenerated from the code as well.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml

from admission.commands import lint as lint_command
from classifier.config import (
    CLASSIFIED_BY_ANNOTATION,
    PROFILE_LABEL,
    ConditionSpec,
    EnforceableField,
    KeyMatchSpec,
    PriorityClassSpec,
    ProfileSpec,
    RuleSpec,
    SpreadConstraintSpec,
)
from classifier.profiles import APP_LABEL_KEYS
from tenants.config import (
    RESERVATION_ANNOTATION,
    TENANT_LABEL,
    TIER_LABEL,
    BurstSpec,
    TenantgateConfig,
    TenantPriorityClassesSpec,
    TenantProfilesSpec,
    TenantSpec,
)
from tenants.configfile import load_text, parse_yaml
from tenants.decisions import PolicyAdmitter
from tenants.ledger import MemoryLedger
from tenants.lint import lint_text
from tenants.verdicts import AdmissionInput, Verdict

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "configuration.md"
EXAMPLE = ROOT / "examples" / "tenantgate.yaml"
API_VERSION_LINE = "apiVersion: tenantgate.io/v1alpha1"

_FENCE = re.compile(r"^```(\w*)\s*$")
_MARKER = re.compile(r"^<!--\s*([a-z-]+)(?::\s*(\S+))?\s*-->$")
_MARKERS = frozenset({"fragment", "excerpt", "lint-example"})


@dataclass(frozen=True, slots=True)
class Block:
    lang: str
    text: str
    line: int  # of the opening fence, 1-based
    marker: str | None
    argument: str | None


def parse_blocks(text: str) -> list[Block]:
    """Every fenced block, with the marker comment on the last non-blank line before it."""
    found: list[Block] = []
    lines = text.splitlines()
    previous = ""
    index = 0
    while index < len(lines):
        fence = _FENCE.match(lines[index])
        if fence is None:
            if lines[index].strip():
                previous = lines[index].strip()
            index += 1
            continue
        start = index
        index += 1
        body: list[str] = []
        while index < len(lines) and not lines[index].startswith("```"):
            body.append(lines[index])
            index += 1
        if index == len(lines):
            raise AssertionError(f"docs/configuration.md:{start + 1}: unclosed code block")
        marker = _MARKER.match(previous)
        found.append(
            Block(
                lang=fence.group(1),
                text="\n".join(body) + "\n",
                line=start + 1,
                marker=marker.group(1) if marker else None,
                argument=marker.group(2) if marker else None,
            )
        )
        previous = ""
        index += 1
    return found


DOC_TEXT = DOC.read_text(encoding="utf-8")
BLOCKS = parse_blocks(DOC_TEXT)
YAML_BLOCKS = [b for b in BLOCKS if b.lang == "yaml"]


def _parsed(block: Block) -> Any:
    """The block's YAML; duplicate keys (which plain YAML loaders ignore) are errors."""
    return parse_yaml(block.text, filename=f"docs/configuration.md:{block.line}")[0]


def _by_marker(marker: str | None) -> list[Any]:
    return [pytest.param(b, id=f"line-{b.line}") for b in YAML_BLOCKS if b.marker == marker]


def _example() -> dict[str, Any]:
    data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _merged_into_example(fragment: Mapping[str, Any]) -> str:
    config = _example()
    for key, value in fragment.items():
        base = config.get(key)
        config[key] = (
            {**base, **value} if isinstance(base, dict) and isinstance(value, dict) else value
        )
    return yaml.safe_dump(config, sort_keys=False)


def _assert_loads_and_lints_clean(text: str, *, where: str) -> None:
    load_text(text, filename=where)
    report = lint_text(text, filename=where)
    assert report.ok, "\n".join(str(p) for p in report.problems)


# --------------------------------------------------------------------------- yaml blocks


def test_the_document_has_every_kind_of_block() -> None:
    kinds = {b.marker for b in YAML_BLOCKS}
    assert kinds == {None, *_MARKERS}, "a misspelt marker leaves a block unchecked"


@pytest.mark.parametrize("block", _by_marker(None))
def test_complete_configs_load_and_lint_clean(block: Block) -> None:
    body = [line for line in block.text.splitlines() if not line.startswith("#")]
    assert body[0] == API_VERSION_LINE, "an unmarked yaml block must be a whole config file"
    _assert_loads_and_lints_clean(block.text, where=f"docs/configuration.md:{block.line}")


@pytest.mark.parametrize("block", _by_marker("fragment"))
def test_fragments_are_valid_and_merge_into_the_example(block: Block) -> None:
    data = _parsed(block)
    assert isinstance(data, dict)
    assert data
    sections = set(TenantgateConfig.model_fields)
    if sections.isdisjoint(data):
        return  # not config (a pod spec the webhook produces): valid YAML is all we can ask
    assert set(data) <= sections, f"unknown sections: {sorted(set(data) - sections)}"
    merged = _merged_into_example(data)
    _assert_loads_and_lints_clean(merged, where=f"docs/configuration.md:{block.line}")


def _is_subdocument(part: Any, whole: Any) -> bool:
    if isinstance(part, dict):
        return isinstance(whole, dict) and all(
            key in whole and _is_subdocument(value, whole[key]) for key, value in part.items()
        )
    return bool(part == whole)


@pytest.mark.parametrize("block", _by_marker("excerpt"))
def test_excerpts_match_their_file(block: Block) -> None:
    assert block.argument is not None
    source = yaml.safe_load((ROOT / block.argument).read_text(encoding="utf-8"))
    assert _is_subdocument(_parsed(block), source)


def test_a_broken_fragment_would_be_caught() -> None:
    broken = {"tenants": {"x": {"namespaces": ["x"], "quota": {"guaranteed": {"cpu": "4 cores"}}}}}
    with pytest.raises(ValueError, match="invalid quantity"):
        load_text(_merged_into_example(broken))
    assert not _is_subdocument({"tenants": {"team-a": {"overQuota": "queue"}}}, _example())


# --------------------------------------------------------------------------- lint transcripts


def _transcripts() -> list[tuple[Block, str, list[str]]]:
    found = []
    for block in BLOCKS:
        first, *output = block.text.splitlines()
        if block.lang == "console" and first.startswith("$ tenantgate lint "):
            found.append((block, first.removeprefix("$ tenantgate lint ").strip(), output))
    return found


def test_every_lint_example_has_its_transcript() -> None:
    examples = {b.argument for b in YAML_BLOCKS if b.marker == "lint-example"}
    assert examples
    assert examples <= {name for _, name, _ in _transcripts()}


@pytest.mark.parametrize(
    ("block", "name", "expected"),
    [pytest.param(*t, id=f"line-{t[0].line}") for t in _transcripts()],
)
def test_lint_transcripts_are_real(
    block: Block,
    name: str,
    expected: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    examples = {b.argument: b for b in YAML_BLOCKS if b.marker == "lint-example"}
    if name in examples:
        (tmp_path / name).write_text(examples[name].text, encoding="utf-8")
        monkeypatch.chdir(tmp_path)
    else:
        monkeypatch.chdir(ROOT)
    out = io.StringIO()
    code = lint_command.run(argparse.Namespace(files=[Path(name)], quiet=False), out=out)
    assert out.getvalue().splitlines() == expected
    assert code == (lint_command.EXIT_OK if name not in examples else lint_command.EXIT_PROBLEMS)


# --------------------------------------------------------------------------- messages


def _admitter(text: str | None = None) -> PolicyAdmitter:
    loaded = load_text(text if text is not None else EXAMPLE.read_text(encoding="utf-8"))
    return PolicyAdmitter(loaded.policy, MemoryLedger())


def _create(admitter: PolicyAdmitter, pod: dict[str, Any], *, namespace: str = "team-a") -> Verdict:
    name = str(pod["metadata"]["name"])
    request = AdmissionInput(
        uid=f"uid-{name}", operation="CREATE", namespace=namespace, name=name, object=pod
    )
    return asyncio.run(admitter.mutate(request, now=0.0))


def _pod(name: str, *, cpu: str, image: str = "nginx:1.27", **spec: Any) -> dict[str, Any]:
    container = {
        "name": "app",
        "image": image,
        "ports": [{"containerPort": 80}],
        "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}},
    }
    return {
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [container], **spec},
    }


def test_worked_example_matches_the_admitter() -> None:
    admitter = _admitter()
    verdicts = [_create(admitter, _pod(f"web-{i}", cpu="500m")) for i in range(1, 14)]
    tiers = [
        v.patched["metadata"]["labels"][TIER_LABEL] if v.patched is not None else None
        for v in verdicts
    ]
    assert tiers == ["guaranteed"] * 8 + ["burst"] * 4 + [None]
    for number in (1, 9):
        warnings = "\n".join(f"Warning: {w}" for w in verdicts[number - 1].warnings)
        assert f"apply -f web-{number}.yaml\n{warnings}\npod/web-{number} created" in DOC_TEXT
    denied = verdicts[12]
    assert not denied.allowed
    assert denied.reason == "Forbidden"
    assert f'admission webhook "mutate.tenantgate.io" denied the request: {denied.message}\n' in (
        DOC_TEXT
    )


def test_above_ceiling_warning_matches_the_admitter() -> None:
    admitter = _admitter()
    pods = [_pod("big", cpu="5"), _pod("a", cpu="500m"), _pod("b", cpu="1")]
    verdicts = [_create(admitter, pod) for pod in pods]
    assert all(v.allowed for v in verdicts)
    assert f"Warning: {verdicts[-1].warnings[-1]}\n" in DOC_TEXT


def test_quoted_denials_match_the_admitter() -> None:
    admitter = _admitter()
    asks_class = _pod("x", cpu="100m", priorityClassName="platform-critical", priority=1000000)
    opt_in = _pod("y", cpu="100m")
    opt_in["metadata"]["labels"][PROFILE_LABEL] = "nosuch"
    unclaimed = _admitter(_merged_into_example({"unclaimedNamespaces": "deny"}))
    messages = [
        _create(admitter, asks_class).message,
        _create(admitter, opt_in).message,
        _create(unclaimed, _pod("z", cpu="100m"), namespace="x").message,
    ]
    for message in messages:
        assert message
        assert f"`{message}`" in DOC_TEXT


def test_ceiling_table_matches_the_compiled_quotas() -> None:
    data = next(
        yaml.safe_load(b.text)
        for b in YAML_BLOCKS
        if b.marker == "fragment" and "data" in (yaml.safe_load(b.text).get("tenants") or {})
    )
    policy = load_text(_merged_into_example(data)).policy
    for tenant in ("team-a", "data"):
        quota = policy.tenants[tenant].quota
        names = list(quota.guaranteed)
        row = " | ".join(
            [
                " / ".join(names),
                " / ".join(str(quota.guaranteed[n]) for n in names),
                " / ".join(str(quota.ceiling[n]) for n in names),
            ]
        )
        assert f"| {row} |" in DOC_TEXT, row


def test_sibling_selector_output_matches_the_plan() -> None:
    shown = next(
        data["spec"]
        for b in YAML_BLOCKS
        if b.marker == "fragment" and "spec" in (data := _parsed(b))
    )
    labels = {
        "app.kubernetes.io/name": "shop",
        "app.kubernetes.io/component": "frontend",
        "pod-template-hash": "5d4f8c",
    }
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "shop-5d4f8c", "uid": "u"}
    pod = {
        "metadata": {"name": "shop-5d4f8c-x2x", "labels": labels, "ownerReferences": [owner]},
        "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
    }
    plan = load_text(EXAMPLE.read_text(encoding="utf-8")).policy.classifier.plan(
        pod, namespace="team-a"
    )
    assert plan.classification.profile == "web-frontend"
    assert plan.mutated["spec"]["topologySpreadConstraints"] == shown["topologySpreadConstraints"]
    for key, value in labels.items():
        assert f"`{key}: {value}`" in DOC_TEXT


# --------------------------------------------------------------------------- coverage


def _aliases(model: type[Any]) -> set[str]:
    return {info.alias or name for name, info in model.model_fields.items()}


@pytest.mark.parametrize(
    "model",
    [
        TenantgateConfig,
        PriorityClassSpec,
        ProfileSpec,
        SpreadConstraintSpec,
        RuleSpec,
        ConditionSpec,
        KeyMatchSpec,
        TenantSpec,
        BurstSpec,
        TenantPriorityClassesSpec,
        TenantProfilesSpec,
    ],
)
def test_every_field_is_documented(model: type[Any]) -> None:
    # Named alone (`ratio`) or at the end of a dotted path (`quota.burst.ratio`).
    missing = sorted(
        name
        for name in _aliases(model)
        if not re.search(rf"`(?:[\w-]+\.)*{re.escape(name)}\b", DOC_TEXT)
    )
    assert not missing, f"{model.__name__} fields missing from the document: {missing}"


def test_written_keys_and_sibling_labels_are_documented() -> None:
    keys = [TENANT_LABEL, TIER_LABEL, RESERVATION_ANNOTATION, PROFILE_LABEL]
    keys += [CLASSIFIED_BY_ANNOTATION, *APP_LABEL_KEYS, *get_args(EnforceableField)]
    missing = [key for key in keys if f"`{key}`" not in DOC_TEXT]
    assert not missing
