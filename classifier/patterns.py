"""Shell-glob patterns as rules write them: detection, compilation, literal start.

Rule values are globs (``postgres-*``, ``training.kubeflow.org/*``); these helpers turn them into
one compiled regex per condition and tell the rule index what text every match starts with.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable

GLOB_CHARS = frozenset("*?[")


def is_glob(text: str) -> bool:
    return not GLOB_CHARS.isdisjoint(text)


def compile_globs(patterns: Iterable[str], *, fold_case: bool = False) -> re.Pattern[str]:
    """One regex matching the whole text against any of ``patterns`` (shell globs)."""
    parts = [fnmatch.translate(p.lower() if fold_case else p) for p in patterns]
    return re.compile("|".join(f"(?:{part})" for part in parts) or "(?!)")


def literal_prefix(pattern: str) -> str:
    """The text every match of the glob ``pattern`` starts with."""
    for position, char in enumerate(pattern):
        if char in GLOB_CHARS:
            return pattern[:position]
    return pattern
