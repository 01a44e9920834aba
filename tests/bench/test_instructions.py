"""``python -m bench.instructions``: the callgrind count's plumbing (callgrind itself is too
slow for the suite; a stand-in ``valgrind`` on PATH prints what callgrind prints)."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from bench import instructions
from bench.configgen import compile_generated
from bench.instructions import CountError, collected


def test_the_count_is_read_from_what_callgrind_prints_at_exit() -> None:
    output = "==4711== Events    : Ir\n==4711== Collected : 771554330\n==4711==\n"
    assert collected(output) == 771_554_330
    with pytest.raises(CountError, match="printed no count"):
        collected("==4711== error: no such tool\n")


def test_the_child_sends_the_pairs_through_the_pipeline_without_a_denial() -> None:
    instructions.child(pairs=3, tenants=8, workload_pairs=4, seed=7)


def test_the_child_counts_the_cohorts_phase_config_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    compiled: list[dict[str, Any]] = []

    def recorded(document: dict[str, Any]) -> Any:
        compiled.append(document)
        return compile_generated(document)

    monkeypatch.setattr("bench.instructions.compile_generated", recorded)
    instructions.child(pairs=3, tenants=8, workload_pairs=4, seed=7, cohorts=True)
    assert compiled[0]["cohorts"]
    assert all(tenant["cohort"] for tenant in compiled[0]["tenants"].values())


def _stand_in(tmp_path: Path, stderr: str, status: int = 0) -> Path:
    """A ``valgrind`` that records its arguments and prints ``stderr``."""
    script = tmp_path / "valgrind"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$PYTHONHASHSEED $@" > "{tmp_path}/arguments"\n'
        f"printf '%s' '{stderr}' >&2\n"
        f"exit {status}\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return tmp_path


def test_the_count_per_pair_comes_from_the_child_run_under_callgrind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(_stand_in(tmp_path, "==1== Collected : 1200\n")))
    sizes = {"pairs": 3, "tenants": 8, "workload_pairs": 4, "seed": 7}
    assert instructions.count(python="/usr/bin/python3", cohorts=False, **sizes) == 400
    seed, *arguments = (tmp_path / "arguments").read_text().split()
    assert seed == "0"
    assert arguments[:5] == [
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        "--collect-atstart=no",
        "--toggle-collect=functools_reduce",
        "/usr/bin/python3",
    ]
    assert arguments[5:8] == ["-m", "bench.instructions", "--child"]
    assert "--pairs=3" in arguments
    assert "--cohorts" not in arguments
    instructions.count(python="/usr/bin/python3", cohorts=True, **sizes)
    assert "--cohorts" in (tmp_path / "arguments").read_text().split()


@pytest.mark.parametrize(
    ("stderr", "status", "message"),
    [
        ("==1== Collected : 0\n", 0, "no symbol functools_reduce"),
        ("Traceback: boom\n", 1, "the counted child failed"),
    ],
    ids=["stripped interpreter", "failed child"],
)
def test_a_count_that_cannot_be_taken_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stderr: str, status: int, message: str
) -> None:
    monkeypatch.setenv("PATH", str(_stand_in(tmp_path, stderr, status)))
    with pytest.raises(CountError, match=message):
        instructions.count(pairs=3, tenants=8, workload_pairs=4, seed=7)


def test_without_valgrind_the_tool_says_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert instructions.main(["--pairs=3"]) == 2
    assert "apt-get install valgrind" in capsys.readouterr().err
