"""README, troubleshooting and runbook: the commands and links they name exist."""

from __future__ import annotations

import re
from pathlib import Path

from admission.cli import build_parser
from tests.deploy.test_monitoring import runbook_sections

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def subcommands() -> set[str]:
    parser = build_parser()
    (action,) = [a for a in parser._actions if a.dest == "command"]
    choices = action.choices
    assert isinstance(choices, dict)
    return set(choices)


def test_the_readme_lists_every_command() -> None:
    readme = (REPO / "README.md").read_text()
    listed = set(re.findall(r"^\| `tenantgate ([\w-]+)", readme, re.MULTILINE))
    assert listed == subcommands()


def test_every_runbook_link_in_the_docs_has_its_section() -> None:
    anchors = set(runbook_sections())
    for page in ("troubleshooting.md", "runbook.md", "metrics.md"):
        text = (DOCS / page).read_text()
        links = re.findall(r"\((?:runbook\.md)?#([\w-]+)\)", text)
        missing = sorted(set(links) - anchors)
        assert missing == [], f"{page} links to missing runbook sections: {missing}"


def test_the_changelog_and_licence_exist() -> None:
    assert (REPO / "CHANGELOG.md").read_text().startswith("# Changelog")
    assert "## [Unreleased]" in (REPO / "CHANGELOG.md").read_text()
    assert (REPO / "LICENSE").is_file()
