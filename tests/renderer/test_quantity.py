"""Kubernetes quantities and Go number forms, as KubeRay's ray start flags use them.

Facts from raycluster.md §2.4.2-§2.4.3 and §9 item 4 ("CPU/memory/GPU flags are integer
ceilings of Kubernetes quantities; the `--resources` JSON uses Go's shortest float form
with sorted keys and no spaces"), and from the Go code those sections name:
apimachinery's ParseQuantity / Value / AsApproximateFloat64 and encoding/json.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from renderer import quantity
from renderer.goformat import go_float, go_json_float_map
from renderer.quantity import (
    approximate_float,
    ceil_value,
    is_zero,
    parse_quantity,
)

# --- parsing: what Go's ParseQuantity accepts, and the exact value ---------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Fraction(1, 2)),
        ("5Gi", 5 * 2**30),
        ("500M", 500_000_000),
        ("1k", 1000),
        ("1.5", Fraction(3, 2)),
        (".5", Fraction(1, 2)),  # no digits before the point
        ("5.", 5),  # none after it ("we currently allow 1.G")
        ("1e3", 1000),  # decimal exponent
        ("1E3", 1000),
        ("1e+3", 1000),
        ("25e-1", Fraction(5, 2)),
        ("1E", 10**18),  # a bare E is the exa suffix, not an exponent
        ("-500m", Fraction(-1, 2)),
        ("+2", 2),
        ("0", 0),
        ("000", 0),
        ("-", 0),  # Go reads a bare sign as zero
        ("0Mi", 0),
        (" 2 ", 2),  # Quantity.UnmarshalJSON trims spaces
    ],
)
def test_go_parse_quantity_accepts_and_values(text: str, value: Fraction | int) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text",
    [
        "",
        "abc",
        "1e",  # an exponent needs digits
        "1K",  # upper-case K is not a suffix (Ki or k are)
        "1ki",
        "1m3",  # a suffix followed by digits that are not an exponent
        "1Gi5",
        "1.5.5",
        ".e-10",  # the slow path: no digit at all (Go's Dec.SetString fails too)
        "1e5000",  # beyond int64 and float64: only overflow artefacts in Go
    ],
)
def test_strings_go_refuses_are_not_quantities(text: str) -> None:
    assert parse_quantity(text) is None
    assert ceil_value(text) is None
    assert approximate_float(text) is None
    assert is_zero(text)


@pytest.mark.parametrize("value", [True, False, None, [1], {"a": 1}, math.inf, math.nan])
def test_only_numbers_and_strings_are_quantities(value: object) -> None:
    # A YAML boolean is not a quantity (it would not decode into resource.Quantity).
    assert parse_quantity(value) is None


def test_yaml_numbers_parse_as_the_json_kubectl_sends() -> None:
    assert parse_quantity(2) == 2
    assert parse_quantity(0.5) == Fraction(1, 2)
    assert parse_quantity(1e21) == 10**21  # sent as "1e+21"


def test_slow_path_rounds_up_to_nano_and_caps_binary_at_int64() -> None:
    # More than 18 digits, or finer than a nano, takes Go's big-decimal path, which rounds
    # non-zero values up to 1n and caps binary-suffixed values at the largest int64.
    assert parse_quantity("1e-10") == Fraction(1, 10**9)
    assert parse_quantity("-1e-10") == Fraction(-1, 10**9)
    assert parse_quantity("1.5n") == Fraction(2, 10**9)
    assert parse_quantity("123456789012345678901") == 123456789012345678901
    assert parse_quantity("100Ei") == 2**63 - 1
    assert parse_quantity("1.5Gi") == 3 * 2**29  # a binary suffix with a fraction
    assert parse_quantity("0.0Ki") == 0


# --- Value(): the integer ray start flags use --------------------------------------------------


@pytest.mark.parametrize(
    ("text", "flag"),
    [
        # raycluster.md §2.4.2: `500m`→`1`, `1500m`→`2`, `2`→`2`; `1Gi`→`1073741824`.
        ("500m", 1),
        ("1500m", 2),
        ("2", 2),
        ("1Gi", 1073741824),
        ("5Gi", 5368709120),
        ("500M", 500000000),
        # Value() rounds away from zero, so a negative fraction goes down.
        ("-500m", -1),
        ("-1500m", -2),
        ("1e-10", 1),
    ],
)
def test_value_is_the_integer_rounded_away_from_zero(text: str, flag: int) -> None:
    assert ceil_value(text) == flag


@pytest.mark.parametrize(
    ("text", "zero"), [("0", True), ("0.0", True), ("0m", True), ("1m", False)]
)
def test_is_zero(text: str, zero: bool) -> None:
    assert is_zero(text) is zero


# --- AsApproximateFloat64: the number in --resources JSON ------------------------------------


@pytest.mark.parametrize(
    ("text", "number"),
    [
        # Go keeps `0.3` as 3 * 10^-1 and multiplies by math.Pow10(-1) = 0.1 in float64.
        ("0.3", 0.30000000000000004),
        ("0.7", 0.7000000000000001),
        ("300m", 0.3),  # 300 * 0.001 rounds back to 0.3
        ("0.5", 0.5),
        ("4", 4.0),
        ("1.5Gi", 1610612736.0),
        ("1e-10", 1e-9),  # rounded up to a nano first
        ("123456789012345678901", 1.2345678901234568e20),
        ("100Ei", float(2**63 - 1)),
    ],
)
def test_approximate_float_follows_go_float_arithmetic(text: str, number: float) -> None:
    assert approximate_float(text) == number


def test_approximate_float_of_a_huge_value_is_infinite_like_go() -> None:
    # big.Float.Float64 saturates; Go's json.Marshal then refuses the map.
    assert approximate_float("1" * 20 + "e300") == math.inf
    assert approximate_float("-" + "1" * 20 + "e300") == -math.inf


def test_go_pow10_uses_go_tables() -> None:
    assert quantity._go_pow10(0) == 1.0
    assert quantity._go_pow10(-1) == 0.1
    assert quantity._go_pow10(23) == 1e23
    assert quantity._go_pow10(309) == math.inf
    assert quantity._go_pow10(-324) == 0.0


# --- Go's JSON floats and maps -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("number", "text"),
    [
        # §2.4.2: "numbers in shortest form with no trailing .0 (4, 0.5, 2.5), exponent form
        # only below 1e-6 or from 1e21 (1e-7, 1e+21)".
        (4.0, "4"),
        (0.5, "0.5"),
        (2.5, "2.5"),
        (1e-7, "1e-7"),
        (1e21, "1e+21"),
        (1.5e-7, "1.5e-7"),
        (1e-100, "1e-100"),
        (-2.5e300, "-2.5e+300"),
        (1e20, "100000000000000000000"),
        (1e-6, "0.000001"),
        (0.30000000000000004, "0.30000000000000004"),
        (0.0, "0"),
        (-0.0, "-0"),  # strconv.AppendFloat keeps the sign of zero
    ],
)
def test_go_float_matches_encoding_json(number: float, text: str) -> None:
    assert go_float(number) == text


@pytest.mark.parametrize("number", [math.inf, -math.inf, math.nan])
def test_go_float_refuses_what_json_marshal_refuses(number: float) -> None:
    with pytest.raises(ValueError, match="unsupported value"):
        go_float(number)


def test_json_map_sorts_keys_bytewise_upper_case_first() -> None:
    # §2.4.2: "keys sorted byte-wise (upper case before lower case), no whitespace".
    assert go_json_float_map({"neuron_cores": 4.0, "TPU": 8.0, "a": 0.5}) == (
        '{"TPU":8,"a":0.5,"neuron_cores":4}'
    )


def test_json_map_escapes_keys_like_go() -> None:
    # encoding/json escapes HTML characters, uses \n-style escapes for the common controls
    # and \u00XX for the others, and escapes U+2028/U+2029.
    keys = {'q"': 1.0, "b\\": 1.0, "<&>": 1.0, "n\n\t\r\b\f": 1.0, "\x01": 1.0, "\u2028": 1.0}
    assert go_json_float_map(keys) == (
        '{"\\u0001":1,"\\u003c\\u0026\\u003e":1,"b\\\\":1,"n\\n\\t\\r\\b\\f":1,'
        '"q\\"":1,"\\u2028":1}'
    )
