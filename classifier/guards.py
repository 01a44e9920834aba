"""Guards: the cheap necessary condition each compiled condition states for the rule index.

A guard lists facts (atoms) a pod must have one of for the condition to hold or raise:
exact values (``("label", "app", "web")``) and literal starts of globbed values
(``("namespace", "team-")``). A condition with nothing cheap to say has no guard (None) and
is a candidate for every pod.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from classifier.patterns import is_glob, literal_prefix

# An exact fact a pod may have, e.g. ("label", "app", "web"), ("namespace", "dev"), ("port", 80).
Atom = tuple[Hashable, ...]
# A fact whose value must start with a literal text, e.g. ("namespace", "team-"), or for images
# (("image", 2), "org/"); the first item names the field, the second is the literal start.
PrefixAtom = tuple[Hashable, str]

REQUESTS = "resource"  # the field whose values are only known once the requests are
VOLUME_CLAIM = "volume-claim"  # the atom of a pod mounting a persistent volume claim
_COARSE = frozenset({"owner", "restartPolicy", "hostNetwork", "has-port", VOLUME_CLAIM})


@dataclass(frozen=True, slots=True)
class Guard:
    """A necessary condition: a condition can hold, or raise, only if the pod has one of these.

    A condition without one (``not``, ``absent``, a ``*`` glob...) has the guard None: it is a
    candidate for every pod.
    """

    exact: frozenset[Atom] = frozenset()
    prefixes: frozenset[PrefixAtom] = frozenset()

    def __or__(self, other: Guard) -> Guard:
        return Guard(self.exact | other.exact, self.prefixes | other.prefixes)

    @property
    def reads_requests(self) -> bool:
        return any(a[0] == REQUESTS for a in self.exact) or any(
            p[0] == REQUESTS for p in self.prefixes
        )

    @property
    def rank(self) -> tuple[bool, bool, int]:
        """Lower is more selective: cheap facts first, rare values first, fewer atoms first."""
        coarse = any(a[0] in _COARSE for a in self.exact) or any(
            p[0] in _COARSE for p in self.prefixes
        )
        return (self.reads_requests, coarse, len(self.exact) + len(self.prefixes))


def any_of_guards(guards: Iterable[Guard | None]) -> Guard | None:
    """The guard of "one of these holds": None as soon as one is None."""
    combined = Guard()
    for guard in guards:
        if guard is None:
            return None
        combined = combined | guard
    return combined


def values_guard(field_name: Hashable, values: Iterable[str]) -> Guard | None:
    """Exact values as atoms, globs as prefix atoms; None if a glob starts with a wildcard."""
    exact: set[Atom] = set()
    prefixes: set[PrefixAtom] = set()
    for value in values:
        if not is_glob(value):
            exact.add((field_name, value))
            continue
        prefix = literal_prefix(value)
        if not prefix:
            return None
        prefixes.add((field_name, prefix))
    return Guard(frozenset(exact), frozenset(prefixes))
