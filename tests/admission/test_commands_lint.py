"""``tenantgate lint``: exit codes and output through the real CLI entry point."""

from __future__ import annotations

from pathlib import Path

import pytest

from admission.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tenantgate.yaml"

BROKEN = """\
priorityClasses:
  tenant-burst: {value: 10}
  tenant-guaranteed: {value: 1000}
profiles:
  general: {}
tenants:
  a:
    namespaces: [shared]
    quota:
      guaranteed: {cpu: "4"}
      burst: {max: {cpu: "2"}}
  b:
    namespaces: [shared]
    quota: {guaranteed: {cpu: "1"}}
    profiles: {allowed: [web]}
"""


def test_clean_file_exits_zero_with_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{EXAMPLE}: ok: 2 tenants (3 namespaces), ")
    assert out.count("\n") == 1


def test_problems_exit_one_and_are_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "tenantgate.yaml"
    config.write_text(BROKEN)
    assert main(["lint", str(config)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{config}:11: tenants.a.quota.burst.max.cpu: burst max cpu=2 is below guaranteed "
        "cpu=4 (the ceiling stays at the guarantee)",
        f'{config}:13: tenants.b.namespaces[0]: namespace "shared" is already claimed by '
        'tenant "a"',
        f'{config}:15: tenants.b.profiles.allowed[0]: unknown profile "web"',
        "3 problems found",
    ]


def test_several_files_and_quiet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("tenants: [\n")
    assert main(["lint", "-q", str(EXAMPLE), str(broken)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"{broken}:2:1: ")
    assert main(["lint", "--quiet", str(EXAMPLE)]) == 0
    assert capsys.readouterr().out == ""


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.yaml"
    assert main(["lint", str(missing)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{missing}: cannot read: No such file or directory",
        "1 problem found",
    ]


def test_a_file_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["lint"])
    assert exited.value.code == 2
    assert "the following arguments are required: FILE" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # A key without ':' is noticed on the next line; the mistake is on this one.
        (
            "kind: TenantgateConfig\ntenants\n  team-a:\n    namespaces: [team-a]\n",
            "2:1: while scanning a simple key, could not find expected ':' "
            "(noticed at line 3, column 9)",
        ),
        # An unclosed bracket: reported where it opens.
        (
            "tenants:\n  team-a:\n    namespaces: [team-a\n  ml: {}\n",
            "3:17: while parsing a flow sequence, did not find expected ',' or ']' "
            "(noticed at line 4, column 5)",
        ),
        # An unterminated quote, noticed at the end of the file.
        (
            'tenants:\n  team-a:\n    namespaces: ["team-a]\n  ml: {}\n',
            "3:18: while scanning a quoted scalar, found unexpected end of stream "
            "(noticed at line 5, column 1)",
        ),
        # Where the parser is right, its own position stands.
        ("tenants:\n  a: b: c\n", "2:7: mapping values are not allowed in this context"),
        (
            "tenants:\n  - a\n b: c\n",
            "3:2: while parsing a block mapping, did not find expected key",
        ),
    ],
)
def test_yaml_syntax_errors_name_the_line_and_column_of_the_mistake(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(text)

    assert main(["lint", str(path)]) == 1

    assert capsys.readouterr().out.splitlines()[0] == f"{path}:{expected}"
