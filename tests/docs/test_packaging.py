"""Packaging metadata: the licence as setuptools wants it, and the licence file itself."""

from __future__ import annotations

import tomllib
import warnings
from pathlib import Path

from setuptools.config.pyprojecttoml import apply_configuration  # type: ignore[import-untyped]
from setuptools.dist import Distribution  # type: ignore[import-untyped]

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = REPO / "pyproject.toml"


def test_reading_pyproject_raises_no_setuptools_warning() -> None:
    """A ``{text = ...}`` table printed "`project.license` as a TOML table is deprecated"."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        distribution = apply_configuration(Distribution(), PYPROJECT)

    assert distribution.metadata.license_expression == "Apache-2.0"
    assert distribution.metadata.license_files == ["LICENSE"]


def test_the_licence_file_is_the_apache_2_text() -> None:
    text = (REPO / "LICENSE").read_text()
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    build = tomllib.loads(PYPROJECT.read_text())["build-system"]["requires"]
    assert build == ["setuptools>=77.0.3"], "SPDX licence strings need setuptools 77.0.3"
