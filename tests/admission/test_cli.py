"""The ``tenantgate`` entry point: subcommand discovery and process-level behaviour."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version

import pytest

from admission.cli import build_parser, main


def test_every_subcommand_is_registered() -> None:
    parser = build_parser()
    help_text = parser.format_help()
    for command in (
        "certs",
        "lint",
        "queue",
        "review",
        "scheduler-config",
        "schema",
        "serve",
        "usage",
    ):
        assert command in help_text, command


def test_closed_output_pipe_exits_quietly() -> None:
    # `tenantgate schema | head -1` after head has exited: the read end is already closed, so
    # the first write fails whatever the pipe buffer size and the scheduling.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "admission.cli", "schema"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert b"Traceback" not in result.stderr, result.stderr.decode()
    assert result.returncode == 141


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])

    assert exited.value.code == 0
    assert capsys.readouterr().out == f"tenantgate {version('tenantgate')}\n"
