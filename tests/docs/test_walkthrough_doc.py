"""docs/walkthrough.md's commands are ones that exist: every ``tenantgate`` command line parses
with the CLI's own parser, every ``make`` target is in the Makefile, every file it reads is in
the repository. ``tests/integration/test_walkthrough.py`` runs the walkthrough itself."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from admission.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
WALKTHROUGH = REPO / "docs" / "walkthrough.md"


def shell_lines() -> list[str]:
    blocks = re.findall(r"^```sh\n(.*?)^```", WALKTHROUGH.read_text(), re.MULTILINE | re.DOTALL)
    lines: list[str] = []
    for block in blocks:
        joined = re.sub(r"\\\n\s*", "", block)
        lines += [line.split("#", 1)[0].strip() for line in joined.splitlines()]
    return [line for line in lines if line]


@pytest.mark.parametrize("line", [line for line in shell_lines() if line.startswith("tenantgate ")])
def test_every_tenantgate_command_parses(line: str) -> None:
    args = build_parser().parse_args(shlex.split(line)[1:])
    assert callable(args.func)


def test_every_make_target_exists() -> None:
    targets = set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), re.MULTILINE))
    used = {shlex.split(line)[1] for line in shell_lines() if line.startswith("make ")}
    assert used, "the walkthrough starts with make"
    assert used <= targets


def test_every_file_it_reads_is_in_the_repository() -> None:
    named = set(re.findall(r"\b(examples/[\w./-]+\.yaml)\b", WALKTHROUGH.read_text()))
    assert named
    assert sorted(path for path in named if not (REPO / path).is_file()) == []
