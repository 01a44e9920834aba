"""Tests for admission.configreload: a config checked in a child process, bounded in size and in
the problems it reports, then loaded."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from admission.configreload import ConfigRejected, load_policy_limited, main, read_policy
from tenants.config import Policy
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


def test_the_child_answers_in_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "tenantgate.yaml"
    path.write_text(broken_config(1))

    assert main([str(path), str(1 << 24), "1"]) == 0

    answer = json.loads(capsys.readouterr().out)
    assert answer["ok"] is False
    assert answer["omitted"] == 1
    assert answer["problems"][0].startswith(f"{path}:")
    path.write_text(EXAMPLE_CONFIG)
    assert main([str(path), str(1 << 24), "1"]) == 0
    assert json.loads(capsys.readouterr().out) == {"ok": True}
