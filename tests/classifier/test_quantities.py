"""Tests for classifier.quantities: grammar, rounding, canonical form, arithmetic, resource lists.

Most tables are ported from Kubernetes' own tests in
``staging/src/k8s.io/apimachinery/pkg/api/resource/quantity_test.go``; each table names the Go
test it comes from. An independent oracle written with ``fractions.Fraction`` checks the parser
on generated inputs.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from classifier.quantities import (
    Quantity,
    QuantityError,
    QuantityFormat,
    add_lists,
    field_path,
    format_list,
    from_nanos,
    max_lists,
    parse_list,
    parse_quantity,
    sub_lists,
)

DSI = QuantityFormat.DECIMAL_SI
BSI = QuantityFormat.BINARY_SI
DEX = QuantityFormat.DECIMAL_EXPONENT
MAX_INT64 = 2**63 - 1


def dec(mantissa: int, exponent: int, fmt: QuantityFormat) -> Quantity:
    """Go's ``decQuantity(mantissa, exponent, format)``: mantissa * 10^exponent."""
    scale = exponent + 9
    if scale >= 0:
        return Quantity(mantissa * 10**scale, fmt)
    nanos, remainder = divmod(mantissa, 10**-scale)
    assert remainder == 0, "test value finer than 1n"
    return Quantity(nanos, fmt)


def q(text: str) -> Quantity:
    return Quantity.parse(text)


# quantity_test.go, TestQuantityParse: input -> (value, format).
PARSE_TABLE: list[tuple[str, Quantity]] = [
    ("0", dec(0, 0, DSI)),
    ("0n", dec(0, 0, DSI)),
    ("0u", dec(0, 0, DSI)),
    ("0m", dec(0, 0, DSI)),
    ("0Ki", dec(0, 0, BSI)),
    ("0k", dec(0, 0, DSI)),
    ("0Mi", dec(0, 0, BSI)),
    ("0M", dec(0, 0, DSI)),
    ("0Gi", dec(0, 0, BSI)),
    ("0G", dec(0, 0, DSI)),
    ("0Ti", dec(0, 0, BSI)),
    ("0T", dec(0, 0, DSI)),
    # Quantity less numbers are allowed
    ("1", dec(1, 0, DSI)),
    # Binary suffixes
    ("1Ki", dec(1024, 0, BSI)),
    ("8Ki", dec(8 * 1024, 0, BSI)),
    ("7Mi", dec(7 * 1024**2, 0, BSI)),
    ("6Gi", dec(6 * 1024**3, 0, BSI)),
    ("5Ti", dec(5 * 1024**4, 0, BSI)),
    ("4Pi", dec(4 * 1024**5, 0, BSI)),
    ("3Ei", dec(3 * 1024**6, 0, BSI)),
    ("10Ti", dec(10 * 1024**4, 0, BSI)),
    ("100Ti", dec(100 * 1024**4, 0, BSI)),
    # Decimal suffixes
    ("5n", dec(5, -9, DSI)),
    ("4u", dec(4, -6, DSI)),
    ("3m", dec(3, -3, DSI)),
    ("9", dec(9, 0, DSI)),
    ("8k", dec(8, 3, DSI)),
    ("50k", dec(5, 4, DSI)),
    ("7M", dec(7, 6, DSI)),
    ("6G", dec(6, 9, DSI)),
    ("5T", dec(5, 12, DSI)),
    ("40T", dec(4, 13, DSI)),
    ("300T", dec(3, 14, DSI)),
    ("2P", dec(2, 15, DSI)),
    ("1E", dec(1, 18, DSI)),
    # Decimal exponents
    ("1E-3", dec(1, -3, DEX)),
    ("1e3", dec(1, 3, DEX)),
    ("1E6", dec(1, 6, DEX)),
    ("1e9", dec(1, 9, DEX)),
    ("1E12", dec(1, 12, DEX)),
    ("1e15", dec(1, 15, DEX)),
    ("1E18", dec(1, 18, DEX)),
    # Nonstandard but still parsable
    ("1e14", dec(1, 14, DEX)),
    ("1e13", dec(1, 13, DEX)),
    ("100.035k", dec(100035, 0, DSI)),
    # Things that look like floating point
    ("0.001", dec(1, -3, DSI)),
    ("0.0005k", dec(5, -1, DSI)),
    ("0.005", dec(5, -3, DSI)),
    ("0.05", dec(5, -2, DSI)),
    ("0.5", dec(5, -1, DSI)),
    ("0.00050k", dec(5, -1, DSI)),
    ("0.00500", dec(5, -3, DSI)),
    ("0.05000", dec(5, -2, DSI)),
    ("0.50000", dec(5, -1, DSI)),
    ("0.5e0", dec(5, -1, DEX)),
    ("0.5e-1", dec(5, -2, DEX)),
    ("0.5e-2", dec(5, -3, DEX)),
    ("10.035M", dec(10035, 3, DSI)),
    ("1.2e3", dec(12, 2, DEX)),
    ("1.3E+6", dec(13, 5, DEX)),
    ("1.40e9", dec(14, 8, DEX)),
    ("1.53E12", dec(153, 10, DEX)),
    ("1.6e15", dec(16, 14, DEX)),
    ("1.7E18", dec(17, 17, DEX)),
    ("9.01", dec(901, -2, DSI)),
    ("8.1k", dec(81, 2, DSI)),
    ("7.123456M", dec(7123456, 0, DSI)),
    ("6.987654321G", dec(6987654321, 0, DSI)),
    ("5.444T", dec(5444, 9, DSI)),
    ("40.1T", dec(401, 11, DSI)),
    ("300.2T", dec(3002, 11, DSI)),
    ("2.5P", dec(25, 14, DSI)),
    ("1.01E", dec(101, 16, DSI)),
    # Things that saturate/round
    ("3.001n", dec(4, -9, DSI)),
    ("1.1E-9", dec(2, -9, DEX)),
    ("0.0000000001", dec(1, -9, DSI)),
    ("0.0000000005", dec(1, -9, DSI)),
    ("0.00000000050", dec(1, -9, DSI)),
    ("0.5e-9", dec(1, -9, DEX)),
    ("0.9n", dec(1, -9, DSI)),
    ("0.00000012345", dec(124, -9, DSI)),
    ("0.00000012354", dec(124, -9, DSI)),
    ("9Ei", dec(MAX_INT64, 0, BSI)),
    ("9223372036854775807Ki", dec(MAX_INT64, 0, BSI)),
    ("12E", dec(12, 18, DSI)),
    # We'll accept fractional binary stuff, too.
    ("100.035Ki", dec(10243584, -2, BSI)),
    ("0.5Mi", dec(524288, 0, BSI)),
    ("0.05Gi", dec(536870912, -1, BSI)),
    ("0.025Ti", dec(274877906944, -1, BSI)),
    # Things written by trolls
    ("0.000000000001Ki", dec(2, -9, DSI)),  # rounds up, changes format
    (".001", dec(1, -3, DSI)),
    (".0001k", dec(100, -3, DSI)),
    ("1.", dec(1, 0, DSI)),
    ("1.G", dec(1, 9, DSI)),
]


@pytest.mark.parametrize(("text", "expected"), PARSE_TABLE, ids=[t for t, _ in PARSE_TABLE])
def test_parse_table(text: str, expected: Quantity) -> None:
    got = q(text)
    assert got == expected
    assert got.format == expected.format


@pytest.mark.parametrize(("text", "expected"), PARSE_TABLE, ids=[t for t, _ in PARSE_TABLE])
def test_parse_table_signed(text: str, expected: Quantity) -> None:
    # TestQuantityParse also parses "-" + input and "+" + input.
    negative = q("-" + text)
    assert negative.nanos == -expected.nanos
    assert negative.format == expected.format
    positive = q("+" + text)
    assert positive == expected
    assert positive.format == expected.format


@pytest.mark.parametrize(
    "text",
    [
        # quantity_test.go, TestQuantityParse: invalid.
        "1.1.M",
        "1+1.0M",
        "0.1mi",
        "0.1am",
        "aoeu",
        ".5i",
        "1i",
        "-3.01i",
        "-3.01e-",
        "1e4294967297",
        " 1",
        "1 ",
        "",
        # quantity_test.go, TestQuantityParseNonNumericPanic.
        "Non-Numeric",
        # TestInterpretExponentInt32Bounds: exponents beyond int32 are rejected.
        "1E2147483648",
        "1E-2147483648",
        "1E4294967297",
        "1E8589934592",
        "1E9223372036854775807",
        "1E9223372036854775808",
        "1E6024865272343",
        # Not Kubernetes suffixes.
        "1K",
        "1ki",
        "1KiB",
        "1e",
        "1e+",
        "12XY",
        "1.5 Gi",
        "٣",  # a non-ASCII digit
        "1_000",
    ],
)
def test_invalid(text: str) -> None:
    with pytest.raises(QuantityError, match=r"^invalid quantity "):
        q(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("12XY", 'invalid quantity "12XY": unknown suffix "XY"'),
        ("0.1mi", 'invalid quantity "0.1mi": unknown suffix "mi"'),
        ("1KiB", 'invalid quantity "1KiB": unknown suffix "KiB"'),
        ("", 'invalid quantity "": empty'),
        (" 1", 'invalid quantity " 1": surrounding whitespace'),
        ("aoeu", 'invalid quantity "aoeu": not a number'),
        ("1.1.M", 'invalid quantity "1.1.M": more than one decimal point'),
        ("1e4294967297", 'invalid quantity "1e4294967297": exponent out of range'),
        ("1e100", 'invalid quantity "1e100": out of range (must be below 1e100)'),
        ('2"', 'invalid quantity "2\\"": unknown suffix "\\""'),
    ],
)
def test_error_messages(text: str, message: str) -> None:
    with pytest.raises(QuantityError) as info:
        q(text)
    assert str(info.value) == message


def test_error_message_truncates_huge_input() -> None:
    with pytest.raises(QuantityError) as info:
        q("1" + "x" * 10_000)
    assert len(str(info.value)) < 200


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # quantity_test.go, TestParseQuantityString: a lone "." or "-." is zero.
        (".", Quantity(0)),
        ("-.", Quantity(0)),
        # The scanner strips leading zeros and accepts a bare suffix or sign as zero.
        ("-", Quantity(0)),
        ("Ki", Quantity(0, BSI)),
        ("m", Quantity(0)),
        ("e3", Quantity(0, DEX)),
        ("007", Quantity.from_int(7)),
        ("-0.0", Quantity(0)),
    ],
)
def test_degenerate_inputs_kubernetes_accepts(text: str, expected: Quantity) -> None:
    got = q(text)
    assert got == expected
    assert got.format == expected.format


@pytest.mark.parametrize(
    ("text", "nanos"),
    [
        # TestInterpretExponentInt32Bounds: +-MaxInt32 is accepted by the suffix layer.
        ("1E-2147483647", 1),
        ("1e-2147483647", 1),
        ("1e99", 10**108),
        ("9.999e99", 9999 * 10**105),
        # Long inputs stay exact: only the digits that reach 1n matter, the rest round up.
        ("0." + "0" * 5000 + "1", 1),
        ("1." + "0" * 500 + "1", 10**9 + 1),
        ("1." + "0" * 500 + "1Ki", 1024 * 10**9 + 1),
        ("0" * 5000 + "1", 10**9),
        # Any BinarySI value above 2^63-1 is capped, however long.
        ("1" + "0" * 5000 + "Ki", MAX_INT64 * 10**9),
        ("8Ei", MAX_INT64 * 10**9),  # 2^63
        ("-9Ei", -MAX_INT64 * 10**9),
    ],
)
def test_extreme_but_valid(text: str, nanos: int) -> None:
    assert q(text).nanos == nanos


def test_significant_digit_limit() -> None:
    q("1." + "1" * 998)
    with pytest.raises(QuantityError, match="more than 1000 significant digits"):
        q("1." + "1" * 1000)


# quantity_test.go, TestQuantityString: value -> canonical string, plus an alternate spelling
# that parses to the same canonical string.
STRING_TABLE: list[tuple[Quantity, str, str]] = [
    (dec(1024**3, 0, BSI), "1Gi", "1024Mi"),
    (dec(300 * 1024**2, 0, BSI), "300Mi", "307200Ki"),
    (dec(6 * 1024, 0, BSI), "6Ki", ""),
    (dec(1001 * 1024**3, 0, BSI), "1001Gi", "1025024Mi"),
    (dec(1024**4, 0, BSI), "1Ti", "1024Gi"),
    (dec(5, 0, BSI), "5", "5000m"),
    (dec(500, -3, BSI), "500m", "0.5"),
    (dec(1, 9, DSI), "1G", "1000M"),
    (dec(1000, 6, DSI), "1G", "0.001T"),
    (dec(1000000, 3, DSI), "1G", ""),
    (dec(1000000000, 0, DSI), "1G", ""),
    (dec(1, -3, DSI), "1m", "1000u"),
    (dec(80, -3, DSI), "80m", ""),
    (dec(1080, -3, DSI), "1080m", "1.08"),
    (dec(108, -2, DSI), "1080m", "1080000000n"),
    (dec(10800, -4, DSI), "1080m", ""),
    (dec(300, 6, DSI), "300M", ""),
    (dec(1, 12, DSI), "1T", ""),
    # DecimalSI has no suffix beyond "E": exponent notation keeps the magnitude.
    (dec(1, 18, DSI), "1E", ""),
    (dec(1, 21, DSI), "1e21", "1000E"),
    (dec(5, 21, DSI), "5e21", "5000E"),
    (dec(1, 24, DSI), "1e24", "1000000E"),
    # BinarySI has no suffix beyond "Ei": an exact decimal form instead.
    (dec(1, 70, BSI), "10e69", ""),
    (dec(2, 70, BSI), "20e69", ""),
    (dec(1, 72, BSI), "1e72", ""),
    (dec(1234567, 6, DSI), "1234567M", ""),
    (dec(1234567, -3, BSI), "1234567m", ""),
    (dec(3, 3, DSI), "3k", ""),
    (dec(1025, 0, BSI), "1025", ""),
    (dec(0, 0, DSI), "0", ""),
    (dec(0, 0, BSI), "0", ""),
    (dec(1, 9, DEX), "1e9", ".001e12"),
    (dec(1, -3, DEX), "1e-3", "0.001e0"),
    (dec(1, -9, DEX), "1e-9", "1000e-12"),
    (dec(80, -3, DEX), "80e-3", ""),
    (dec(300, 6, DEX), "300e6", ""),
    (dec(1, 12, DEX), "1e12", ""),
    (dec(1, 3, DEX), "1e3", ""),
    (dec(3, 3, DEX), "3e3", ""),
    (dec(3, 3, DSI), "3k", ""),
    (dec(0, 0, DEX), "0", "00"),
    (dec(1, -9, DSI), "1n", ""),
    (dec(80, -9, DSI), "80n", ""),
    (dec(1080, -9, DSI), "1080n", ""),
    (dec(108, -8, DSI), "1080n", ""),
    (dec(10800, -10, DSI), "1080n", ""),
    (dec(1, -6, DSI), "1u", ""),
    (dec(80, -6, DSI), "80u", ""),
    (dec(1080, -6, DSI), "1080u", ""),
]


@pytest.mark.parametrize(
    ("quantity", "expected", "alternate"), STRING_TABLE, ids=[e for _, e, _ in STRING_TABLE]
)
def test_canonical_string(quantity: Quantity, expected: str, alternate: str) -> None:
    assert str(quantity) == expected
    assert q(expected) == quantity
    assert str(q(expected)) == expected
    if alternate:
        assert str(q(alternate)) == expected
    if not quantity.is_zero():
        # "Don't expect it to print -0 ever"; otherwise the negation prints with a sign.
        assert str(-quantity) == "-" + expected


def test_binary_past_ei_round_trips() -> None:
    # quantity_test.go, TestBinarySIPastEiArithmeticRoundTrip: 2^70 grown by arithmetic.
    one_ei = q("1Ei")
    total = one_ei
    for _ in range(1023):
        total = total + one_ei
    assert total.format is BSI
    assert str(total) == "1180591620717411303424"
    assert q(str(total)) == total


@pytest.mark.parametrize(
    ("quantity", "expected"),
    [
        # quantity_test.go, TestBinarySIZeroExponentString.
        (dec(2000, 0, BSI), "2000"),
        (dec(-2000, 0, BSI), "-2000"),
    ],
)
def test_binary_zero_exponent_string(quantity: Quantity, expected: str) -> None:
    assert str(quantity) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # quantity_test.go, TestQuantityParseEmit.
        ("1Ki", "1Ki"),
        ("1Mi", "1Mi"),
        ("1Gi", "1Gi"),
        ("1024Mi", "1Gi"),
        ("1000M", "1G"),
        (".001Ki", "1024m"),
        (".000001Ki", "1024u"),
        (".000000001Ki", "1024n"),
        (".000000000001Ki", "2n"),
        # The examples of the brief and of quantity.go's doc comment.
        ("1.5Gi", "1536Mi"),
        ("1.5", "1500m"),
        ("1000m", "1"),
        ("0.1", "100m"),
        ("1e3", "1e3"),
        ("1200k", "1200k"),
        ("1.2M", "1200k"),
        ("1.5e3", "1500"),
        ("100m", "100m"),
        ("2048Ki", "2Mi"),
        ("0.5Ki", "512"),
        ("1.1Ki", "1126400m"),
    ],
)
def test_parse_emit(text: str, expected: str) -> None:
    assert str(q(text)) == expected
    assert str(q("-" + text)) == "-" + expected


@pytest.mark.parametrize(
    ("x", "y", "expect"),
    [
        # quantity_test.go, TestQuantityCmp.
        ("0", "0", 0),
        ("100m", "50m", 1),
        ("50m", "100m", -1),
        ("10000T", "100Gi", 1),
        # Across formats.
        ("1Ki", "1024", 0),
        ("1k", "1Ki", -1),
        ("1e3", "1k", 0),
    ],
)
def test_compare(x: str, y: str, expect: int) -> None:
    a, b = q(x), q(y)
    assert (a > b) - (a < b) == expect
    assert (a == b) == (expect == 0)
    assert (a <= b) == (expect <= 0)
    assert (a >= b) == (expect >= 0)
    if expect == 0:
        assert hash(a) == hash(b)


def test_negation() -> None:
    # quantity_test.go, TestQuantityNeg.
    original = dec(901, -2, DSI)
    negated = -original
    assert str(negated) == "-9010m"
    assert original == dec(901, -2, DSI)
    assert abs(negated) == original


@pytest.mark.parametrize("text", ["100m", "1Gi"])
def test_add_and_sub_zero_preserve_suffix(text: str) -> None:
    # quantity_test.go, TestQuantityAddZeroPreservesSuffix / TestQuantitySubZeroPreservesSuffix.
    value, zero = q(text), q("0")
    assert str(value + zero) == text
    assert str(zero + value) == text
    assert str(value - zero) == text
    assert str(zero - value) == str(-value) == "-" + text


def test_arithmetic_keeps_the_left_format() -> None:
    assert str(q("1Gi") + q("512Mi")) == "1536Mi"
    assert str(q("1G") + q("1Gi")) == "2073741824"
    assert (q("1Gi") + q("1G")).format is BSI  # printed in decimal: not a multiple of 1024
    assert str(q("1M") + q("1Mi")) == "2048576"
    assert str(q("1Mi") + q("1M")) == "2048576"
    assert str(q("1Mi") + q("1Mi")) == "2Mi"
    assert (q("1Gi") - q("1Gi")).format is BSI


def test_arithmetic_never_mutates() -> None:
    a, b = q("1"), q("2")
    total = a + b
    assert (a, b, total) == (q("1"), q("2"), q("3"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.nanos = 5  # type: ignore[misc]


def test_operators_reject_other_types() -> None:
    with pytest.raises(TypeError):
        _ = q("1") + 1  # type: ignore[operator]
    with pytest.raises(TypeError):
        _ = q("1") < 1  # type: ignore[operator]
    assert q("1") != 1


@pytest.mark.parametrize(
    ("text", "value", "milli"),
    [
        ("1", 1, 1000),
        ("100m", 1, 100),
        ("1.5", 2, 1500),
        ("1n", 1, 1),
        ("999999n", 1, 1),
        ("1000001n", 1, 2),
        ("-1.5", -2, -1500),  # away from zero, like int64Amount.AsScaledInt64
        ("-1n", -1, -1),
        ("1Gi", 1073741824, 1073741824000),
        ("0", 0, 0),
    ],
)
def test_value_and_milli_value_round_up(text: str, value: int, milli: int) -> None:
    assert q(text).value() == value
    assert q(text).milli_value() == milli


def test_constructors_and_predicates() -> None:
    assert Quantity.from_int(3) == q("3")
    assert Quantity.from_milli(250) == q("250m")
    assert str(Quantity.from_int(2048, format=BSI)) == "2Ki"
    assert Quantity.zero().is_zero()
    assert not q("1n").is_zero()
    assert (q("-1").sign(), q("0").sign(), q("5m").sign()) == (-1, 0, 1)
    assert parse_quantity("2Gi") == q("2Gi")
    assert Quantity.parse(12) == q("12")
    assert Quantity.parse(-3) == q("-3")
    assert repr(q("1.5Gi")) == "Quantity.parse('1536Mi')"
    with pytest.raises(TypeError):
        Quantity(1.5)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [True, None, 1.5, [], {}])
def test_parse_rejects_non_text(value: object) -> None:
    with pytest.raises(QuantityError, match="expected a string or an integer"):
        Quantity.parse(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # UnmarshalJSON trims whitespace and accepts JSON numbers.
        (" 2Gi\n", q("2Gi")),
        (2, q("2")),
        (0.5, q("500m")),
        (0.1, q("100m")),
        (1e16, q("1e16")),
        (1.5e-05, q("15u")),
        (-0.25, q("-250m")),
    ],
)
def test_from_json(value: object, expected: Quantity) -> None:
    assert Quantity.from_json(value) == expected


@pytest.mark.parametrize("value", [True, None, [], {}, math.inf, math.nan, " "])
def test_from_json_rejects(value: object) -> None:
    with pytest.raises(QuantityError, match=r"^invalid quantity "):
        Quantity.from_json(value)


# -- resource lists ---------------------------------------------------------------------------


def rl(**values: str) -> dict[str, Quantity]:
    return {name.replace("_", "-"): q(text) for name, text in values.items()}


def test_add_lists_is_a_union() -> None:
    a = rl(cpu="1", memory="1Gi")
    b = rl(cpu="500m", ephemeral_storage="1G")
    assert add_lists(a, b) == rl(cpu="1500m", memory="1Gi", ephemeral_storage="1G")
    assert a == rl(cpu="1", memory="1Gi")  # inputs untouched


def test_sub_lists_negates_names_only_on_the_right() -> None:
    # Like quota.Subtract in k8s.io/apiserver/pkg/quota/v1.
    assert sub_lists(rl(cpu="2", memory="1Gi"), rl(cpu="500m", pods="1")) == {
        "cpu": q("1500m"),
        "memory": q("1Gi"),
        "pods": q("-1"),
    }


def test_max_lists() -> None:
    assert max_lists(rl(cpu="2", memory="1Gi"), rl(cpu="3", pods="1")) == rl(
        cpu="3", memory="1Gi", pods="1"
    )
    # On a tie the right-hand value (and so its format) is kept, like quota.Max.
    tie = max_lists({"memory": q("1024")}, {"memory": q("1Ki")})
    assert str(tie["memory"]) == "1Ki"


def test_format_list_sorts_names_and_prints_canonically() -> None:
    resources = {"memory": q("1.5Gi"), "cpu": q("2000m"), "nvidia.com/gpu": q("1")}
    assert format_list(resources) == "cpu=2,memory=1536Mi,nvidia.com/gpu=1"
    assert format_list({}) == ""


def test_parse_list() -> None:
    parsed = parse_list({"cpu": "250m", "memory": 1073741824, "nvidia.com/gpu": "1"}, where="x")
    assert parsed == {"cpu": q("250m"), "memory": q("1Gi"), "nvidia.com/gpu": q("1")}


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        (
            {"cpu": "1", "memory": "12XY"},
            'spec.overhead.memory: invalid quantity "12XY": unknown suffix "XY"',
        ),
        (
            {"nvidia.com/gpu": "one"},
            'spec.overhead[nvidia.com/gpu]: invalid quantity "one": not a number',
        ),
        (
            {"hugepages-2Mi": True},
            "spec.overhead.hugepages-2Mi: invalid quantity True: "
            "expected a string or a number, not bool",
        ),
    ],
)
def test_parse_list_names_the_field(mapping: dict[str, object], message: str) -> None:
    with pytest.raises(QuantityError) as info:
        parse_list(mapping, where="spec.overhead")
    assert str(info.value) == message


def test_field_path() -> None:
    assert field_path("requests", "cpu") == "requests.cpu"
    assert field_path("requests", "example.com/dongle") == "requests[example.com/dongle]"
    assert field_path("", "cpu") == "cpu"


# -- properties -------------------------------------------------------------------------------

formats = st.sampled_from(list(QuantityFormat))
# Values people write (multiples of powers of ten and of 1024) plus arbitrary nanos.
nanos_values = st.one_of(
    st.integers(min_value=-(10**40), max_value=10**40),
    st.builds(
        lambda m, e: m * 10**e,
        st.integers(min_value=-(10**6), max_value=10**6),
        st.integers(min_value=0, max_value=60),
    ),
    st.builds(
        lambda m, e: m * 10**9 * 1024**e,
        st.integers(min_value=-4096, max_value=4096),
        st.integers(min_value=0, max_value=8),
    ),
)
quantities = st.builds(Quantity, nanos_values, formats)


@given(quantities)
def test_canonical_string_round_trips(quantity: Quantity) -> None:
    text = str(quantity)
    reparsed = q(text)
    assert " " not in text
    assert "." not in text
    if text.endswith("i") and abs(quantity.nanos) > MAX_INT64 * 10**9:
        # Kubernetes writes such a value with a binary suffix ("8Ei") but caps it when it
        # parses one back: only values within int64 round-trip.
        assert abs(reparsed.nanos) == MAX_INT64 * 10**9
        return
    assert reparsed == quantity
    if quantity.format is not BSI:
        # A BinarySI integer that is not a multiple of 1024 is written bare ("1025") and
        # comes back as DecimalSI; every other canonical string is a fixed point.
        assert str(reparsed) == text


@given(quantities, quantities)
def test_add_then_sub_is_identity(a: Quantity, b: Quantity) -> None:
    assert a + b - b == a
    assert a + b == b + a
    assert (a - b) == -(b - a)
    assert (a - a).is_zero()


@given(quantities, quantities, quantities)
def test_ordering_is_consistent(a: Quantity, b: Quantity, c: Quantity) -> None:
    assert (a < b) == (a.nanos < b.nanos)
    if a == b:
        assert hash(a) == hash(b)
    if a <= b and b <= c:
        assert a <= c
    assert (a < b) == (a + c < b + c)
    assert sorted([a, b, c]) == sorted([a, b, c], key=lambda x: x.nanos)


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


@st.composite
def quantity_texts(draw: st.DrawFn) -> tuple[str, Fraction, str]:
    """A string of the grammar, its exact value, and its suffix kind."""
    sign = draw(st.sampled_from(["", "+", "-"]))
    integer = draw(st.text("0123456789", max_size=12))
    fraction = draw(st.text("0123456789", max_size=12))
    dot = draw(st.booleans()) or not integer
    if not dot:
        fraction = ""
    if not integer and not fraction:
        integer = "0"
    if draw(st.booleans()):
        exponent = draw(st.integers(min_value=-30, max_value=30))
        marker = draw(st.sampled_from(["e", "E"]))
        suffix = f"{marker}{exponent:+d}" if draw(st.booleans()) else f"{marker}{exponent}"
        scale = Fraction(10) ** exponent
    else:
        suffix = draw(st.sampled_from(sorted(_SUFFIXES)))
        scale = _SUFFIXES[suffix]
    number = integer + ("." + fraction if dot else "")
    magnitude = Fraction(int(integer or "0")) + (
        Fraction(int(fraction), 10 ** len(fraction)) if fraction else 0
    )
    value = magnitude * scale
    kind = "binary" if suffix.endswith("i") else "decimal"
    return sign + number + suffix, -value if sign == "-" else value, kind


@given(quantity_texts())
def test_parse_matches_an_exact_oracle(case: tuple[str, Fraction, str]) -> None:
    text, value, kind = case
    magnitude = abs(value) * 10**9
    nanos = math.ceil(magnitude)  # Kubernetes rounds up (away from zero) to 1n
    if kind == "binary":
        nanos = min(nanos, MAX_INT64 * 10**9)
    expected = -nanos if value < 0 else nanos
    assert q(text).nanos == expected


@pytest.mark.parametrize(
    ("nanos", "fmt"),
    [
        (1_500_000_000, QuantityFormat.DECIMAL_SI),
        (2**30 * 10**9, QuantityFormat.BINARY_SI),
        (-250_000_000, QuantityFormat.DECIMAL_EXPONENT),
        (0, QuantityFormat.BINARY_SI),
    ],
)
def test_a_quantity_built_from_nanos_is_the_one_the_constructor_builds(
    nanos: int, fmt: QuantityFormat
) -> None:
    built, constructed = from_nanos(nanos, fmt), Quantity(nanos, fmt)
    assert built == constructed
    assert (built.nanos, built.format, str(built)) == (nanos, fmt, str(constructed))
    assert hash(built) == hash(constructed)
