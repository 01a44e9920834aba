"""Weighing a pod's evidence: the profile with the most, when it clears the threshold.

Compiled once per config (:func:`compile_evidence`): a table from each signal to the profiles
it counts for and how much. Weighing reads the pod's signals once (:func:`read_signals`), looks
each up, and sums per profile. The highest sum wins when it reaches the threshold; a tie goes
to the profile whose heaviest single signal weighs more, then to the profile declared first
in ``profiles``. Below the threshold there is no verdict, and the caller falls back to the
default profile.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from classifier.config import ClassifierConfig, ClassifierProblem
from classifier.evidence.signals import SIGNAL_KINDS, SignalReader
from classifier.evidence.weights import BUILTIN_WEIGHTS
from classifier.facts import PodFacts
from classifier.records import record


class Item(NamedTuple):
    """One signal counted for one profile (a pod counts dozens: a tuple is the cheapest to
    build)."""

    profile: str
    signal: str
    weight: int
    where: str


@record
class Weighing:
    """What the evidence says: the winning profile (or None) and every counted signal.

    ``counted`` keeps each signal the table names as it was read: the signal, where it was
    read, and the table's entries for it. The reason (:meth:`describe`) names only a few
    signals, so one :class:`Item` per signal and profile is built only when :attr:`items` is
    asked for.
    """

    profile: str | None
    scores: Mapping[str, int]
    counted: tuple[tuple[str, str, tuple[tuple[str, int], ...]], ...]
    threshold: int
    sidecars: tuple[str, ...] = ()

    @property
    def items(self) -> tuple[Item, ...]:
        """Every signal counted for a profile, in the order the signals were read."""
        # A profile is in ``scores`` exactly when it is allowed and some signal counted for it.
        scores = self.scores
        return tuple(
            Item(profile, signal, weight, where)
            for signal, where, entries in self.counted
            for profile, weight in entries
            if profile in scores
        )

    def ranking(self) -> list[tuple[str, int]]:
        """Profiles by total, the winner first among equal totals (a tie it won), then by name."""
        return sorted(self.scores.items(), key=lambda kv: (-kv[1], kv[0] != self.profile, kv[0]))

    def _signals_of(self, profile: str) -> list[tuple[str, int, str]]:
        """(signal, weight, where) of each non-zero signal counted for ``profile``, heaviest
        first, then by signal (as :attr:`items` would give them, filtered and sorted)."""
        found = [
            (signal, weight, where)
            for signal, where, entries in self.counted
            for name, weight in entries
            if name == profile and weight
        ]
        found.sort(key=_heaviest_first)
        return found

    def describe(self, *, explain: bool = False, limit: int = 4) -> str:
        """The evidence in words, each signal with its weight: the leading profile's heaviest
        signals and the runner-up's total; with ``explain``, every profile's signals, where
        each was read, and the sidecars set aside. Empty when nothing weighed anything."""
        ranking = [(p, s) for p, s in self.ranking() if s > 0]
        if not ranking:
            return ""
        shown = ranking if explain else ranking[:1]
        parts = []
        for profile, score in shown:
            items = self._signals_of(profile)
            listed = items if explain else items[:limit]
            text = ", ".join(
                f"{signal} {weight:+d}" + (f" ({where})" if explain else "")
                for signal, weight, where in listed
            )
            if len(listed) < len(items):
                text += f", +{len(items) - len(listed)} more"
            parts.append(f"{profile} {score} ({text})")
        if not explain and len(ranking) > 1:
            runner, score = ranking[1]
            parts.append(f"next {runner} {score}")
        tail = f"; sidecars set aside: {', '.join(self.sidecars)}" if self.sidecars else ""
        return "; ".join(parts) + tail


def _heaviest_first(found: tuple[str, int, str]) -> tuple[int, str]:
    return -found[1], found[0]


@dataclass(frozen=True, slots=True)
class Evidence:
    """Signal -> ((profile, weight), ...), the threshold, and the order that breaks ties."""

    table: Mapping[str, tuple[tuple[str, int], ...]]
    threshold: int
    order: tuple[str, ...]
    rank: Mapping[str, int] = field(init=False, repr=False, compare=False)
    known: frozenset[str] = field(init=False, repr=False, compare=False)
    reader: SignalReader = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rank", {name: i for i, name in enumerate(self.order)})
        object.__setattr__(self, "known", frozenset(self.table))
        object.__setattr__(self, "reader", SignalReader(self.known))

    def weigh(self, facts: PodFacts, *, allowed: frozenset[str] | None = None) -> Weighing:
        found = self.reader.read(facts)
        scores: dict[str, int] = {}
        heaviest: dict[str, int] = {}
        counted: list[tuple[str, str, tuple[tuple[str, int], ...]]] = []
        table = self.table
        for text, where in found.signals.items():
            entries = table.get(text)
            if entries is None:
                continue
            counted.append((text, where, entries))
            for profile, weight in entries:
                if allowed is not None and profile not in allowed:
                    continue
                scores[profile] = scores.get(profile, 0) + weight
                heaviest[profile] = max(heaviest.get(profile, 0), weight)
        rank = self.rank
        best = min(
            scores,
            key=lambda p: (-scores[p], -heaviest[p], rank.get(p, len(rank))),
            default=None,
        )
        winner = best if best is not None and scores[best] >= self.threshold else None
        return Weighing(winner, scores, tuple(counted), self.threshold, found.sidecars)


def compile_evidence(cfg: ClassifierConfig, problems: list[ClassifierProblem]) -> Evidence | None:
    """The evidence table of ``cfg``: built-in weights for the profiles it declares, then its
    own ``evidence.weights`` over them. None when nothing weighs anything."""
    spec = cfg.evidence
    weights: dict[str, dict[str, int]] = {}
    if spec.builtin:
        for profile, table in BUILTIN_WEIGHTS.items():
            if profile in cfg.profiles:
                weights[profile] = dict(table)
    for profile, table in spec.weights.items():
        path = f"evidence.weights.{profile}"
        if profile not in cfg.profiles:
            known = ", ".join(sorted(cfg.profiles))
            problems.append(
                ClassifierProblem(path, f'unknown profile "{profile}" (known: {known})')
            )
            continue
        for signal, weight in table.items():
            kind, sep, value = signal.partition(":")
            if not sep or not value or kind not in SIGNAL_KINDS:
                problems.append(
                    ClassifierProblem(
                        f"{path}.{signal}",
                        f'"{signal}" is not a signal: write KIND:VALUE with KIND one of '
                        + ", ".join(SIGNAL_KINDS),
                    )
                )
                continue
            weights.setdefault(profile, {})[signal] = weight
    counted: dict[str, list[tuple[str, int]]] = {}
    for profile, entries in weights.items():
        for signal, weight in entries.items():
            if weight:
                counted.setdefault(_normalise(signal), []).append((profile, weight))
    if not counted:
        return None
    return Evidence(
        {signal: tuple(found) for signal, found in counted.items()},
        spec.threshold,
        tuple(cfg.profiles),
    )


def _normalise(signal: str) -> str:
    kind, _, value = signal.partition(":")
    # Environment names and owner kinds keep their case; everything else is read lower-case.
    if kind in ("env", "owner"):
        return f"{kind}:{value.upper() if kind == 'env' else value}"
    return f"{kind}:{value.lower()}"
