"""Exact Kubernetes resource quantities: parsing, arithmetic, canonical formatting, resource lists.

Mirrors ``k8s.io/apimachinery/pkg/api/resource`` (quantity.go, suffix.go, amount.go) and the
resource-list helpers of ``k8s.io/apiserver/pkg/quota/v1`` (Add, Subtract, Max) and of the
ResourceQuota admission plugin (its ``prettyPrint`` of a list).

A parsed quantity is an exact integer number of nano-units: Kubernetes rounds every parsed value
whose precision is finer than 1n up (away from zero) to the next nano, so nothing finer can
exist. No floats are used anywhere, not even to read ``0.1``.

Kubernetes' quirks are kept on purpose, so that tenantgate agrees with the API server: "." and
a bare suffix such as "Ki" parse as zero, BinarySI values are capped at 2^63-1 when parsed (so
an "8Ei" total printed by ``str`` reads back capped), and a BinarySI value that is not a
multiple of 1024 prints bare ("1025") and reads back as DecimalSI.

Deliberate differences: ``str`` always gives the canonical form, where Go echoes an input it
considers canonical verbatim ("+1", "03Ki"); values beyond "E" or "Ei" print in exponent
notation, as newer Kubernetes does. Inputs Kubernetes accepts but nothing real needs are
rejected to keep every operation cheap on the admission path: a parsed magnitude of 1e100 or
more, or more than 1000 significant digits. Exponents beyond the int32 range are rejected, as
in current Kubernetes.
"""

from __future__ import annotations

import enum
import json
import logging
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Final, TypeAlias

logger = logging.getLogger(__name__)

__all__ = [
    "Quantity",
    "QuantityError",
    "QuantityFormat",
    "ResourceList",
    "add_lists",
    "field_path",
    "format_list",
    "max_lists",
    "parse_list",
    "parse_quantity",
    "sub_lists",
]


class QuantityError(ValueError):
    """A value that is not a valid Kubernetes quantity (the message says where and why)."""


class QuantityFormat(enum.StrEnum):
    """How a quantity is written back; remembered from the suffix it was parsed with."""

    DECIMAL_SI = "DecimalSI"  # 12M = 12 * 10^6
    BINARY_SI = "BinarySI"  # 12Mi = 12 * 2^20
    DECIMAL_EXPONENT = "DecimalExponent"  # 12e6


_NANO: Final = 10**9
_MAX_INT64: Final = 2**63 - 1
# ParseQuantity caps BinarySI values at the largest int64 ("9Ei" parses as 2^63-1).
_MAX_BINARY_NANOS: Final = _MAX_INT64 * _NANO
_MAX_EXPONENT: Final = 2**31 - 1
_MAX_SIGNIFICANT_DIGITS: Final = 1000
_MAX_MAGNITUDE_DIGITS: Final = 100  # |value| < 10**100
_MAX_SHOWN: Final = 64  # characters of a rejected value quoted back in a message

_DECIMAL_SUFFIXES: Final[Mapping[str, int]] = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_DECIMAL_SUFFIX_BY_EXPONENT: Final[Mapping[int, str]] = {e: s for s, e in _DECIMAL_SUFFIXES.items()}
_BINARY_SUFFIXES: Final[Mapping[str, int]] = {
    "Ki": 10,
    "Mi": 20,
    "Gi": 30,
    "Ti": 40,
    "Pi": 50,
    "Ei": 60,
}
# Nano-units per unit of each suffix (all exact integers: no suffix is finer than 1n).
_NANOS_PER_SUFFIX: Final[Mapping[str, tuple[int, QuantityFormat]]] = {
    **{s: (10 ** (e + 9), QuantityFormat.DECIMAL_SI) for s, e in _DECIMAL_SUFFIXES.items()},
    **{s: (_NANO << e, QuantityFormat.BINARY_SI) for s, e in _BINARY_SUFFIXES.items()},
}
_BINARY_SUFFIX_BY_POWER: Final = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")  # index: power of 1024

# The same language as Kubernetes' hand-written scanner (parseQuantityString): sign, integer
# digits, optional "." and fraction digits (either may be empty: "5.", ".5" and even "." are
# accepted), then suffix letters, an optional sign and digits. Which suffixes are real is
# decided afterwards, exactly as ParseQuantity does. One compiled fullmatch is cheaper in
# CPython than a character loop written in Python.
_SCANNER: Final = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[+-]?[0-9]*)")
_NUMBER_PREFIX: Final = re.compile(r"[+-]?[0-9]*(?:\.[0-9]*)?")
_SIMPLE_KEY: Final = re.compile(r"[A-Za-z0-9_-]+")


def _quoted(value: object) -> str:
    """A value as it appears in a message: JSON-quoted, and short enough for a log line."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) > _MAX_SHOWN:
        text = text[:_MAX_SHOWN] + "..."
    return json.dumps(text, ensure_ascii=False) if isinstance(value, str) else text


def _invalid(value: object, why: str) -> QuantityError:
    return QuantityError(f"invalid quantity {_quoted(value)}: {why}")


@dataclass(frozen=True, slots=True, eq=False)
class Quantity:
    """An exact Kubernetes quantity: ``nanos`` * 10^-9, plus the format used to write it.

    Immutable and hashable. Equality, hashing and ordering are by value only, so
    ``Quantity.parse("1Ki") == Quantity.parse("1024")``; the format only affects ``str()``.
    Arithmetic returns new quantities and follows Kubernetes' choice of format: the left
    operand's, or the right operand's when the left one is zero.
    """

    nanos: int
    format: QuantityFormat = QuantityFormat.DECIMAL_SI

    def __post_init__(self) -> None:
        if type(self.nanos) is not int:
            raise TypeError(f"Quantity.nanos must be an int, not {type(self.nanos).__name__}")

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def parse(cls, text: str | int) -> Quantity:
        """Parse a Kubernetes quantity string (``"100m"``, ``"1.5Gi"``, ``"2e3"``) or an int.

        Raises ``QuantityError`` naming the input and what is wrong with it.
        """
        if isinstance(text, str):
            return _parse_cached(text)
        if isinstance(text, int) and not isinstance(text, bool):
            return _parse(str(text))
        raise _invalid(text, f"expected a string or an integer, not {type(text).__name__}")

    @classmethod
    def from_json(cls, value: object) -> Quantity:
        """Read a quantity as a parsed JSON/YAML document holds it.

        Like Kubernetes' ``UnmarshalJSON``: surrounding whitespace is ignored and numbers are
        accepted. A float is read through its shortest round-tripping decimal text (``0.5`` ->
        ``"0.5"``), which is the literal as written for any literal of up to 15 significant
        digits; the float itself is never used in arithmetic.
        """
        if isinstance(value, str):
            known = _PARSED.get(value)
            return known if known is not None else _parse_cached(value.strip(), key=value)
        if isinstance(value, int) and not isinstance(value, bool):
            return _parse(str(value))
        if isinstance(value, float):
            if not math.isfinite(value):
                raise _invalid(value, "not a finite number")
            return _parse(repr(value))
        raise _invalid(value, f"expected a string or a number, not {type(value).__name__}")

    @classmethod
    def from_int(
        cls, value: int, *, format: QuantityFormat = QuantityFormat.DECIMAL_SI
    ) -> Quantity:
        """``value`` whole units, like Kubernetes' ``NewQuantity``."""
        return cls(value * _NANO, format)

    @classmethod
    def from_milli(
        cls, value: int, *, format: QuantityFormat = QuantityFormat.DECIMAL_SI
    ) -> Quantity:
        """``value`` thousandths of a unit, like Kubernetes' ``NewMilliQuantity``."""
        return cls(value * 1_000_000, format)

    @classmethod
    def zero(cls, format: QuantityFormat = QuantityFormat.DECIMAL_SI) -> Quantity:
        return cls(0, format)

    # -- value --------------------------------------------------------------------------------

    def is_zero(self) -> bool:
        return self.nanos == 0

    def sign(self) -> int:
        """-1, 0 or 1."""
        return (self.nanos > 0) - (self.nanos < 0)

    def value(self) -> int:
        """Whole units, rounded up away from zero (Kubernetes' ``Value()``)."""
        return _div_away_from_zero(self.nanos, _NANO)

    def milli_value(self) -> int:
        """Thousandths of a unit, rounded up away from zero (Kubernetes' ``MilliValue()``)."""
        return _div_away_from_zero(self.nanos, 1_000_000)

    # -- arithmetic (never mutates) -----------------------------------------------------------

    def __add__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        fmt = other.format if self.nanos == 0 else self.format
        return from_nanos(self.nanos + other.nanos, fmt)

    def __sub__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        fmt = other.format if self.nanos == 0 else self.format
        return from_nanos(self.nanos - other.nanos, fmt)

    def __neg__(self) -> Quantity:
        return from_nanos(-self.nanos, self.format)

    def __abs__(self) -> Quantity:
        return self if self.nanos >= 0 else from_nanos(-self.nanos, self.format)

    # -- comparison (by value, across formats) ------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.nanos == other.nanos

    def __hash__(self) -> int:
        return hash(self.nanos)

    def __lt__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.nanos < other.nanos

    def __le__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.nanos <= other.nanos

    def __gt__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.nanos > other.nanos

    def __ge__(self, other: Quantity) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.nanos >= other.nanos

    # -- text ---------------------------------------------------------------------------------

    def __str__(self) -> str:
        """The canonical Kubernetes form (``Quantity.String()`` / ``CanonicalizeBytes``)."""
        return _canonical(self.nanos, self.format)

    def __repr__(self) -> str:
        return f"Quantity.parse({str(self)!r})"


# Arithmetic and parsing build many quantities on the admission path; writing the two slots
# directly skips the frozen dataclass's __init__ (about three times slower) for values that are
# valid by construction.
_new_object = object.__new__
_set_nanos = Quantity.__dict__["nanos"].__set__
_set_format = Quantity.__dict__["format"].__set__


def from_nanos(nanos: int, fmt: QuantityFormat) -> Quantity:
    """``Quantity(nanos, fmt)`` for a count computed from other quantities' (an int by
    construction): built without the constructor's check, as arithmetic builds its results."""
    quantity = _new_object(Quantity)
    _set_nanos(quantity, nanos)
    _set_format(quantity, fmt)
    return quantity


def parse_quantity(text: str | int) -> Quantity:
    """Same as ``Quantity.parse``."""
    return Quantity.parse(text)


def _div_away_from_zero(nanos: int, unit: int) -> int:
    quotient, remainder = divmod(abs(nanos), unit)
    if remainder:
        quotient += 1
    return quotient if nanos >= 0 else -quotient


# -- parsing ----------------------------------------------------------------------------------

# Parsed values by their text. Quantities are immutable, so one parse of "100m" serves every
# pod that asks for it; manifests use few distinct values, while a pod is read several times per
# admission (rules, /mutate, /validate). Bounded in count and key length so that unusual inputs
# cannot grow it: once full, new texts are parsed without being kept.
_PARSED: Final[dict[str, Quantity]] = {}
_PARSED_MAX_ENTRIES: Final = 4096
_PARSED_MAX_KEY: Final = 40


def _parse_cached(text: str, *, key: str | None = None) -> Quantity:
    """``_parse(text)``, remembered under ``key`` (default ``text``); errors are not kept."""
    key = text if key is None else key
    known = _PARSED.get(key)
    if known is not None:
        return known
    quantity = _parse(text)
    if len(key) <= _PARSED_MAX_KEY and len(_PARSED) < _PARSED_MAX_ENTRIES:
        _PARSED[key] = quantity
    return quantity


def _parse(text: str) -> Quantity:
    # ParseQuantity answers "0" before scanning; it is by far the most common input.
    if text == "0":
        return _ZERO
    if not text:
        raise _invalid(text, "empty")
    # Fast path for the shapes nearly every manifest uses: an integer with or without one of
    # the fixed suffixes ("2", "500m", "512Mi"). Short enough that no bound can be crossed.
    last = text[-1]
    if last == "i":
        head, suffix = text[:-2], text[-2:]
    elif last.isalpha():
        head, suffix = text[:-1], last
    else:
        head, suffix = text, ""
    scaled = _NANOS_PER_SUFFIX.get(suffix)
    if scaled is not None and 0 < len(head) <= 18 and head.isascii() and head.isdigit():
        multiplier, fmt = scaled
        nanos = int(head) * multiplier
        if nanos > _MAX_BINARY_NANOS and fmt is QuantityFormat.BINARY_SI:
            nanos = _MAX_BINARY_NANOS
        return from_nanos(nanos, fmt)

    match = _SCANNER.fullmatch(text)
    if match is None:
        raise _invalid(text, _diagnose(text))
    sign, integer, fraction, suffix = match.groups()
    fraction = fraction or ""

    fmt, base, exponent = _interpret(text, suffix)

    digits = (integer + fraction).lstrip("0")
    if not digits:
        return from_nanos(0, fmt)
    significant = digits.rstrip("0")
    if len(significant) > _MAX_SIGNIFICANT_DIGITS:
        raise _invalid(text, f"more than {_MAX_SIGNIFICANT_DIGITS} significant digits")
    # value = int(significant) * 10**shift * base**exponent
    shift = len(digits) - len(significant) - len(fraction)

    if base == 10:
        shift += exponent
        if len(significant) + shift > _MAX_MAGNITUDE_DIGITS:
            raise _invalid(text, f"out of range (must be below 1e{_MAX_MAGNITUDE_DIGITS})")
        nanos = _round_up_to_nanos(int(significant), len(significant), shift + 9)
    else:
        if len(significant) + shift > 20:
            # At least 10^20 before the binary multiplier: far above the cap below.
            nanos = _MAX_BINARY_NANOS
        else:
            nanos = min(
                _round_up_to_nanos(int(significant) << exponent, None, shift + 9),
                _MAX_BINARY_NANOS,
            )
        if nanos < _NANO:
            # ParseQuantity switches a non-zero binary value below one unit to DecimalSI.
            fmt = QuantityFormat.DECIMAL_SI
    return from_nanos(-nanos if sign == "-" else nanos, fmt)


def _round_up_to_nanos(mantissa: int, mantissa_digits: int | None, scale: int) -> int:
    """``mantissa * 10**scale`` rounded up to an integer (the mantissa is positive)."""
    if scale >= 0:
        return mantissa * _pow10(scale)
    if mantissa_digits is not None and -scale >= mantissa_digits:
        # 0 < mantissa < 10**-scale: a non-zero value below 1n becomes 1n.
        return 1
    quotient, remainder = divmod(mantissa, _pow10(-scale))
    return quotient + 1 if remainder else quotient


def _pow10(exponent: int) -> int:
    result: int = 10**exponent
    return result


def _interpret(text: str, suffix: str) -> tuple[QuantityFormat, int, int]:
    """(format, base, exponent) for a suffix, like suffix.go's ``interpret``."""
    decimal = _DECIMAL_SUFFIXES.get(suffix)
    if decimal is not None:
        return QuantityFormat.DECIMAL_SI, 10, decimal
    binary = _BINARY_SUFFIXES.get(suffix)
    if binary is not None:
        return QuantityFormat.BINARY_SI, 2, binary
    if len(suffix) > 1 and suffix[0] in "eE":
        exponent_text = suffix[1:]
        unsigned = exponent_text[1:] if exponent_text[0] in "+-" else exponent_text
        if unsigned.isdigit():
            unsigned = unsigned.lstrip("0") or "0"
            if len(unsigned) > 10 or int(unsigned) > _MAX_EXPONENT:
                raise _invalid(text, "exponent out of range")
            exponent = -int(unsigned) if exponent_text[0] == "-" else int(unsigned)
            return QuantityFormat.DECIMAL_EXPONENT, 10, exponent
    raise _invalid(text, f"unknown suffix {_quoted(suffix)}")


def _diagnose(text: str) -> str:
    """Why ``text`` does not even scan as <number><suffix>, in a few words."""
    if not text:
        return "empty"
    if text != text.strip():
        return "surrounding whitespace"
    number = _NUMBER_PREFIX.match(text)
    end = number.end() if number is not None else 0
    rest = text[end:]
    if not any(c.isdigit() for c in text[:end]):
        return "not a number"
    if rest.startswith("."):
        return "more than one decimal point"
    return f"unknown suffix {_quoted(rest)}"


_ZERO: Final = from_nanos(0, QuantityFormat.DECIMAL_SI)


# -- formatting -------------------------------------------------------------------------------


# Cached: the admission path writes the same few values again and again (container defaults,
# requests and headroom in warnings), and the text depends on nothing else.
@lru_cache(maxsize=4096)
def _canonical(nanos: int, fmt: QuantityFormat) -> str:
    if nanos == 0:
        return "0"
    if fmt is QuantityFormat.BINARY_SI:
        units, below_unit = divmod(nanos, _NANO)
        if below_unit == 0 and abs(units) >= 1024:
            power = 0
            while units % 1024 == 0:
                units //= 1024
                power += 1
            if power < len(_BINARY_SUFFIX_BY_POWER):
                return f"{units}{_BINARY_SUFFIX_BY_POWER[power]}"
            # Beyond Ei there is no binary suffix: write the exact decimal value instead
            # (newer Kubernetes does the same rather than dropping the magnitude).
            return _canonical(nanos, QuantityFormat.DECIMAL_EXPONENT)
        # Small or fractional binary values are written in DecimalSI (CanonicalizeBytes).
        fmt = QuantityFormat.DECIMAL_SI

    mantissa, exponent = nanos, -9
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    # The exponent goes down to a multiple of three (1.2M is written 1200k, 0.1 as 100m).
    lower = exponent % 3
    if lower:
        mantissa *= 10**lower
        exponent -= lower
    if fmt is QuantityFormat.DECIMAL_SI:
        suffix = _DECIMAL_SUFFIX_BY_EXPONENT.get(exponent)
        if suffix is not None:
            return f"{mantissa}{suffix}"
        # Nothing above "E": exponent notation keeps the magnitude (1000E is written 1e21).
    if exponent == 0:
        return str(mantissa)
    return f"{mantissa}e{exponent}"


# -- resource lists ---------------------------------------------------------------------------

ResourceList: TypeAlias = Mapping[str, Quantity]


def add_lists(a: ResourceList, b: ResourceList) -> dict[str, Quantity]:
    """Per-resource sum; a resource named in only one list keeps its value (quota.Add)."""
    result = dict(a)
    for name, quantity in b.items():
        current = result.get(name)
        result[name] = quantity if current is None else current + quantity
    return result


def sub_lists(a: ResourceList, b: ResourceList) -> dict[str, Quantity]:
    """Per-resource ``a - b``; a resource only in ``b`` comes out negated (quota.Subtract)."""
    result = dict(a)
    for name, quantity in b.items():
        current = result.get(name)
        result[name] = -quantity if current is None else current - quantity
    return result


def max_lists(a: ResourceList, b: ResourceList) -> dict[str, Quantity]:
    """Per-resource maximum over the union of names (quota.Max; ties keep ``b``'s value)."""
    result = dict(a)
    for name, quantity in b.items():
        current = result.get(name)
        if current is None or current <= quantity:
            result[name] = quantity
    return result


def format_list(resources: ResourceList) -> str:
    """``cpu=2,memory=1Gi``: names sorted, canonical values, as in ResourceQuota's messages."""
    return ",".join(f"{name}={resources[name]}" for name in sorted(resources))


def parse_list(mapping: Mapping[str, object], *, where: str) -> dict[str, Quantity]:
    """Parse a JSON ``{resource name: quantity}`` object found at field path ``where``.

    Errors name the offending entry: ``spec.overhead.cpu: invalid quantity "x": ...``
    (``where[nvidia.com/gpu]`` for names that are not simple words).
    """
    result: dict[str, Quantity] = {}
    for name, raw in mapping.items():
        try:
            result[name] = Quantity.from_json(raw)
        except QuantityError as exc:
            raise QuantityError(f"{field_path(where, name)}: {exc}") from exc
    return result


def field_path(where: str, key: str) -> str:
    """``where.key``, or ``where[key]`` when the key is not a plain word (``nvidia.com/gpu``)."""
    if _SIMPLE_KEY.fullmatch(key):
        return f"{where}.{key}" if where else key
    return f"{where}[{key}]"
