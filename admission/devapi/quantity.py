"""Exact Kubernetes quantity values, as far as the test API server needs them.

The server decodes resource quantities to reject malformed ones (400, with the real message),
to check requests against limits, and to compute a pod's QoS class. Values are Fractions: no
float ever decides anything.
"""

from __future__ import annotations

import re
from fractions import Fraction

QUANTITY_PATTERN = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_NUMBER = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(.*)")
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


class QuantityError(ValueError):
    """Not a Kubernetes quantity."""


def parse(text: str | int) -> Fraction:
    if isinstance(text, bool):
        raise QuantityError(f"quantities must match the regular expression '{QUANTITY_PATTERN}'")
    if isinstance(text, int):
        return Fraction(text)
    m = _NUMBER.fullmatch(text.strip())
    if m is None or not re.fullmatch(QUANTITY_PATTERN, text.strip()):
        raise QuantityError(f"quantities must match the regular expression '{QUANTITY_PATTERN}'")
    number = Fraction(m.group(1))
    suffix = m.group(2)
    if suffix in _BINARY:
        return number * Fraction(1024) ** _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * Fraction(10) ** _DECIMAL[suffix]
    exponent = re.fullmatch(r"[eE]([+-]?[0-9]+)", suffix)
    if exponent is not None:
        return number * Fraction(10) ** int(exponent.group(1))
    raise QuantityError("unable to parse quantity's suffix")
