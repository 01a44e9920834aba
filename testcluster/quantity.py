"""Kubernetes quantities as exact fractions, for the simulated kubelet's room checks
(the grammar of ``staging/src/k8s.io/apimachinery/pkg/api/resource/quantity.go``)."""

from __future__ import annotations

import re
from fractions import Fraction

_SUFFIXES = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_QUANTITY = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$"
)


def parse_quantity(text: str | int | float) -> Fraction:
    """``"1.5Gi"`` -> 1610612736; raises ValueError on anything else than a quantity."""
    match = _QUANTITY.match(str(text).strip())
    if match is None:
        raise ValueError(f"invalid quantity {text!r}")
    number, exponent, suffix = match.groups()
    value = Fraction(number)
    if exponent:
        return value * Fraction(10) ** int(exponent[1:])
    return value * _SUFFIXES[suffix or ""]
