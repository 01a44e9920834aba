"""Label and field selectors: the query-string forms and the ``LabelSelector`` object form."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


class SelectorError(ValueError):
    """A selector that does not parse or names something invalid."""


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # in, notin, exists, !, gt, lt
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.operator == "in":
            return present and value in self.values
        if self.operator == "notin":
            return not present or value not in self.values
        if self.operator == "exists":
            return present
        if self.operator == "!":
            return not present
        if not present or value is None:
            return False
        try:
            have, want = int(value), int(self.values[0])
        except ValueError:
            return False
        return have > want if self.operator == "gt" else have < want


@dataclass(frozen=True)
class LabelSelector:
    """Requirements that must all hold; no requirements selects everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


EVERYTHING = LabelSelector()


def validate_label_key(key: str) -> None:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        raise SelectorError(
            f'invalid label key "{key}": prefix part must be a lowercase RFC 1123 subdomain'
        )
    if not name or len(name) > 63 or not _QUALIFIED_NAME.fullmatch(name):
        raise SelectorError(
            f'invalid label key "{key}": name part must consist of alphanumeric characters, '
            "'-', '_' or '.', and must start and end with an alphanumeric character"
        )


def validate_label_value(value: str) -> None:
    if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
        raise SelectorError(
            f'invalid label value: "{value}": a valid label must be an empty string or consist '
            "of alphanumeric characters, '-', '_' or '.', and must start and end with an "
            "alphanumeric character"
        )


# --- the query-string form (labels.Parse) -----------------------------------------------------

_TOKEN = re.compile(r"\s*(?:(?P<op>==|!=|=|\(|\)|,|!|<|>)|(?P<word>[^\s,()=!<>]+))")


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None:  # pragma: no cover - every character is an operator or a word
            raise SelectorError(f"unable to parse requirement: unexpected {text[pos:]!r}")
        out.append(m.group("op") or m.group("word"))
        pos = m.end()
    return out


def parse_label_selector(text: str) -> LabelSelector:
    """Parse ``a=b,c!=d,e in (f,g),!h,i`` as the API server does."""
    tokens = _tokens(text)
    requirements: list[Requirement] = []
    i = 0

    def expect_word(what: str) -> str:
        nonlocal i
        if i >= len(tokens) or tokens[i] in ("==", "!=", "=", "(", ")", ",", "!", "<", ">"):
            found = tokens[i] if i < len(tokens) else "end of string"
            raise SelectorError(f"unable to parse requirement: found '{found}', expected: {what}")
        word = tokens[i]
        i += 1
        return word

    while i < len(tokens):
        if tokens[i] == "!":
            i += 1
            key = expect_word("identifier after '!'")
            validate_label_key(key)
            requirements.append(Requirement(key, "!"))
        else:
            key = expect_word("identifier")
            validate_label_key(key)
            op = tokens[i] if i < len(tokens) else ","
            if op == ",":
                requirements.append(Requirement(key, "exists"))
            elif op in ("=", "=="):
                i += 1
                value = _optional_value(tokens, i)
                i += 1 if value is not None else 0
                validate_label_value(value or "")
                requirements.append(Requirement(key, "in", (value or "",)))
            elif op == "!=":
                i += 1
                value = _optional_value(tokens, i)
                i += 1 if value is not None else 0
                validate_label_value(value or "")
                requirements.append(Requirement(key, "notin", (value or "",)))
            elif op in ("in", "notin"):
                i += 1
                values, i = _value_set(tokens, i)
                requirements.append(Requirement(key, op, values))
            elif op in ("<", ">"):
                i += 1
                number = expect_word("integer")
                if not re.fullmatch(r"-?\d+", number):
                    raise SelectorError(
                        f"unable to parse requirement: for 'Gt', 'Lt' operators, the value "
                        f"must be an integer, got '{number}'"
                    )
                requirements.append(Requirement(key, "gt" if op == ">" else "lt", (number,)))
            else:
                raise SelectorError(
                    f"unable to parse requirement: found '{op}', expected: "
                    "in, notin, =, ==, !=, gt, lt"
                )
        if i < len(tokens):
            if tokens[i] != ",":
                raise SelectorError(f"found '{tokens[i]}', expected: ',' or 'end of string'")
            i += 1
            if i == len(tokens):
                raise SelectorError("found 'end of string', expected: identifier")
    return LabelSelector(tuple(requirements))


def _optional_value(tokens: Sequence[str], i: int) -> str | None:
    if i < len(tokens) and tokens[i] not in ("==", "!=", "=", "(", ")", ",", "!", "<", ">"):
        return tokens[i]
    return None


def _value_set(tokens: Sequence[str], i: int) -> tuple[tuple[str, ...], int]:
    if i >= len(tokens) or tokens[i] != "(":
        found = tokens[i] if i < len(tokens) else "end of string"
        raise SelectorError(f"unable to parse requirement: found '{found}', expected: '('")
    i += 1
    values: list[str] = []
    expect_value = True
    while i < len(tokens) and tokens[i] != ")":
        word = tokens[i]
        if word == ",":
            if expect_value:
                values.append("")
            expect_value = True
        elif expect_value:
            validate_label_value(word)
            values.append(word)
            expect_value = False
        else:
            raise SelectorError(f"unable to parse requirement: found '{word}', expected: ','")
        i += 1
    if i >= len(tokens):
        raise SelectorError("unable to parse requirement: found 'end of string', expected: ')'")
    if expect_value and values:
        values.append("")
    return tuple(sorted(set(values))), i + 1


# --- the object form (metav1.LabelSelector) --------------------------------------------------


def label_selector_from_object(selector: Any, *, where: str) -> LabelSelector:
    """A ``{matchLabels, matchExpressions}`` object; absent or ``{}`` selects everything."""
    if selector is None:
        return EVERYTHING
    if not isinstance(selector, dict):
        raise SelectorError(f"{where}: must be an object")
    requirements: list[Requirement] = []
    match_labels = selector.get("matchLabels") or {}
    if not isinstance(match_labels, dict):
        raise SelectorError(f"{where}.matchLabels: must be an object")
    for key, value in sorted(match_labels.items()):
        if not isinstance(value, str):
            raise SelectorError(f"{where}.matchLabels.{key}: must be a string")
        validate_label_key(key)
        validate_label_value(value)
        requirements.append(Requirement(key, "in", (value,)))
    expressions = selector.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise SelectorError(f"{where}.matchExpressions: must be a list")
    for n, expr in enumerate(expressions):
        path = f"{where}.matchExpressions[{n}]"
        if not isinstance(expr, dict):
            raise SelectorError(f"{path}: must be an object")
        key = expr.get("key")
        operator = expr.get("operator")
        values = expr.get("values") or []
        if not isinstance(key, str) or not key:
            raise SelectorError(f"{path}.key: Required value")
        validate_label_key(key)
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise SelectorError(f"{path}.values: must be a list of strings")
        if operator in ("In", "NotIn"):
            if not values:
                raise SelectorError(
                    f"{path}.values: Required value: must be specified when `operator` is "
                    "'In' or 'NotIn'"
                )
            op = "in" if operator == "In" else "notin"
            requirements.append(Requirement(key, op, tuple(sorted(set(values)))))
        elif operator in ("Exists", "DoesNotExist"):
            if values:
                raise SelectorError(
                    f"{path}.values: Forbidden: may not be specified when `operator` is "
                    "'Exists' or 'DoesNotExist'"
                )
            requirements.append(Requirement(key, "exists" if operator == "Exists" else "!"))
        else:
            raise SelectorError(
                f'{path}.operator: Unsupported value: "{operator}": supported values: '
                '"In", "NotIn", "Exists", "DoesNotExist"'
            )
    return LabelSelector(tuple(requirements))


# --- field selectors --------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    equal: bool
    value: str


@dataclass(frozen=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, value_of: Callable[[str], str]) -> bool:
        return all((value_of(r.field) == r.value) == r.equal for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


def parse_field_selector(text: str, *, supported: frozenset[str]) -> FieldSelector:
    """Parse ``metadata.name=x,status.phase!=Running`` (``\\`` escapes ``,``, ``=`` and ``\\``)."""
    requirements: list[FieldRequirement] = []
    for part in _split_unescaped(text, ","):
        if not part.strip():
            continue
        for op in ("!=", "==", "="):
            index = _find_unescaped(part, op)
            if index >= 0:
                field = part[:index].strip()
                value = _unescape(part[index + len(op) :].strip())
                if field not in supported:
                    raise SelectorError(f"field label not supported: {field}")
                requirements.append(FieldRequirement(field, op != "!=", value))
                break
        else:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
    return FieldSelector(tuple(requirements))


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    escaped = False
    for ch in text:
        if escaped:
            current.append("\\" + ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def _find_unescaped(text: str, needle: str) -> int:
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text.startswith(needle, i):
            return i
        i += 1
    return -1


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)
