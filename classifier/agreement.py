"""Agreement between the profiles a person expects and the profiles the rules give.

A regression in the rules shows as a number: the share of pods classified as expected, and a
confusion table (expected profile per row, classified profile per column) that says where
the misses go.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Agreement:
    """How many (expected, classified) pairs agree, and the count of every pair."""

    pairs: Counter[tuple[str, str]]

    @property
    def total(self) -> int:
        return sum(self.pairs.values())

    @property
    def matched(self) -> int:
        return sum(n for (expected, got), n in self.pairs.items() if expected == got)

    @property
    def rate(self) -> float:
        return self.matched / self.total if self.total else 1.0

    def summary(self) -> str:
        return f"agreement with expected profiles: {self.matched}/{self.total} ({self.rate:.1%})"

    def confusion_table(self) -> str:
        """Rows: expected profile; columns: classified profile; ``.`` for zero."""
        labels = sorted({p for pair in self.pairs for p in pair})
        header = ["expected \\ classified", *labels]
        rows = [header]
        for expected in labels:
            counts = [self.pairs.get((expected, got), 0) for got in labels]
            if any(counts):
                rows.append([expected, *(str(n) if n else "." for n in counts)])
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        return "\n".join(
            "  ".join(
                cell.ljust(width) if i == 0 else cell.rjust(width)
                for i, (cell, width) in enumerate(zip(row, widths, strict=True))
            ).rstrip()
            for row in rows
        )


def measure(pairs: Iterable[tuple[str, str]]) -> Agreement:
    """The agreement of ``(expected, classified)`` pairs."""
    return Agreement(Counter(pairs))
