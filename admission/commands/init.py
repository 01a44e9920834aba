"""``tenantgate init [--preset NAME] [-o FILE]``: write a starter config from a preset.

The presets are complete, commented config files shipped in ``admission/presets/`` (``default``
is the example config); each passes ``tenantgate lint`` as written. Without ``-o`` the config
goes to stdout. An existing file is never replaced unless ``--force`` is given.
"""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path
from typing import TextIO

EXIT_OK = 0
EXIT_FAILED = 1
DEFAULT_PRESET = "default"


def preset_names() -> list[str]:
    """Every shipped preset, ``default`` first."""
    names = sorted(
        entry.name.removesuffix(".yaml")
        for entry in resources.files("admission").joinpath("presets").iterdir()
        if entry.name.endswith(".yaml")
    )
    return [DEFAULT_PRESET, *(name for name in names if name != DEFAULT_PRESET)]


def preset_text(name: str) -> str:
    """The config text of preset ``name``; ValueError for an unknown one."""
    if name not in preset_names():
        raise ValueError(f"unknown preset {name!r} (known: {', '.join(preset_names())})")
    return resources.files("admission").joinpath("presets", f"{name}.yaml").read_text("utf-8")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    names = preset_names()
    parser = subparsers.add_parser(
        "init",
        help="write a starter config from a preset",
        description="Write a starter tenantgate config. Presets: "
        "default (the example config), production (guarantees only, hard spreads), "
        "development (generous burst, no spreads), hpc (batch and MPI jobs on a gang "
        "scheduler), memory (memory-heavy pods to a memory-optimized scheduler), "
        "microservices (api and web spread over zones, small defaults), multitenant "
        "(several tenants found by namespace labels, one in queue mode), scheduler-selector "
        "(a scheduler per kind of pod). Check the result with `tenantgate lint FILE`.",
    )
    parser.add_argument(
        "--preset", choices=names, default=DEFAULT_PRESET, help="which preset (default: default)"
    )
    parser.add_argument(
        "-o", "--output", metavar="FILE", help="write to FILE instead of stdout ('-': stdout)"
    )
    parser.add_argument("--force", action="store_true", help="replace FILE if it exists")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    text = preset_text(args.preset)
    if args.output in (None, "-"):
        (out if out is not None else sys.stdout).write(text)
        return EXIT_OK
    path = Path(args.output)
    if path.exists() and not args.force:
        print(f"tenantgate init: {path} exists; pass --force to replace it", file=sys.stderr)
        return EXIT_FAILED
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        print(f"tenantgate init: cannot write {path}: {exc.strerror}", file=sys.stderr)
        return EXIT_FAILED
    print(
        f"wrote {path} (preset {args.preset}); check it with: tenantgate lint {path}",
        file=sys.stderr,
    )
    return EXIT_OK
