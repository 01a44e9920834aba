"""``tenantgate lint FILE...``: check config files for schema and semantic problems.

Prints every problem as ``FILE:LINE: FIELD: MESSAGE`` (on stdout, so CI logs and editors can
parse it) and exits 1 when any file has one; otherwise prints a short summary per file and
exits 0. Warnings (``FILE:LINE: FIELD: warning: MESSAGE``) never change the exit code.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from tenants.lint import lint_file

EXIT_OK = 0
EXIT_PROBLEMS = 1


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "lint",
        help="check tenant, profile and rule config files",
        description="Check config files: schema, unknown profiles or priority classes, a "
        "namespace claimed by two tenants, burst below guaranteed, rules that can never "
        "match. Exit code 1 when any problem is found.",
    )
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE", help="config file")
    parser.add_argument("-q", "--quiet", action="store_true", help="print problems only")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    stream = out if out is not None else sys.stdout
    problems = 0
    for path in args.files:
        report = lint_file(path)
        for warning in report.warnings:
            print(_as_warning(str(warning), warning.message), file=stream)
        if report.ok:
            if not args.quiet:
                print(f"{report.file}: ok: {report.summary}", file=stream)
            continue
        problems += len(report.problems)
        for problem in report.problems:
            print(problem, file=stream)
    if problems and not args.quiet:
        print(f"{problems} problem{'s' if problems != 1 else ''} found", file=stream)
    return EXIT_PROBLEMS if problems else EXIT_OK


def _as_warning(text: str, message: str) -> str:
    """``FILE:LINE: FIELD: warning: MESSAGE``."""
    return f"{text.removesuffix(message)}warning: {message}"
