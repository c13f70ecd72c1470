"""Kubernetes quantities, parsed and rounded as KubeRay's ray start flags need them.

KubeRay writes CPU, memory and GPU flags as `Quantity.Value()` (the integer rounded away
from zero), and the `--resources` JSON from `Quantity.AsApproximateFloat64()` with Go's
`encoding/json` float form. Parsing follows apimachinery's `ParseQuantity` exactly,
because the float a quantity becomes depends on how Go stores it (`0.3` is 3 * 10**-1).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from fractions import Fraction
from typing import Final

from renderer.goformat import go_float

_DECIMAL_SUFFIX: Final = {
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
_BINARY_SUFFIX: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
# What parseQuantityString accepts after the number; `interpret` then narrows it down.
_SUFFIX_SHAPE: Final = re.compile(r"[eEinumkKMGTP]*[+-]?[0-9]*")
_EXPONENT: Final = re.compile(r"[eE]([+-]?[0-9]+)")
_DIGITS: Final = "0123456789"
_MAX_INT64: Final = 2**63 - 1
_NANO: Final = 9  # a quantity parsed the slow way keeps nine decimal places, rounded up
# Beyond this a quantity is neither an int64 nor a finite float64 in Go, only overflow
# artefacts; it is treated as unparseable (and never makes Python build a huge number).
_MAX_EXPONENT: Final = 1000
# math.Pow10's tables: Go multiplies or divides two of these, so neither Python's `10.0 ** n`
# nor a correctly rounded literal gives the same last bit for every n.
_POW10: Final = tuple(float(f"1e{i}") for i in range(32))
_POW10_POS32: Final = tuple(float(f"1e{32 * i}") for i in range(10))
_POW10_NEG32: Final = tuple(float(f"1e-{32 * i}") for i in range(11))


def _go_pow10(n: int) -> float:
    """Go's `math.Pow10(n)`, bit for bit."""
    if 0 <= n <= 308:
        return _POW10_POS32[n // 32] * _POW10[n % 32]
    if -323 <= n < 0:
        return _POW10_NEG32[-n // 32] / _POW10[-n % 32]
    return math.inf if n > 0 else 0.0


def _split(text: str) -> tuple[bool, str, str, str, str] | None:
    """parseQuantityString: sign, digits before and after the point, numeric text, suffix."""
    negative = text[0] == "-"
    pos = 1 if text[0] in "+-" else 0
    while pos < len(text) and text[pos] == "0":
        pos += 1
    if pos == len(text):
        return (negative, "0", "", "0", "")  # only zeros, or a bare sign: Go reads 0
    start = pos
    while pos < len(text) and text[pos] in _DIGITS:
        pos += 1
    num, denom = text[start:pos] or "0", ""  # Go: "if we stripped all numerator positions"
    if pos < len(text) and text[pos] == ".":
        pos += 1
        start = pos
        while pos < len(text) and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
    suffix = text[pos:]
    if _SUFFIX_SHAPE.fullmatch(suffix) is None:
        return None
    return (negative, num, denom, text[:pos], suffix)


def _interpret(suffix: str) -> tuple[int, int, bool] | None:
    """The suffixer: base, exponent and whether the format is binary (Ki, Mi, ...)."""
    if suffix in _DECIMAL_SUFFIX:
        return (10, _DECIMAL_SUFFIX[suffix], False)
    if suffix in _BINARY_SUFFIX:
        return (2, _BINARY_SUFFIX[suffix], True)
    match = _EXPONENT.fullmatch(suffix)
    if match is None:
        return None
    return (10, int(match.group(1)), False)


def _go_parse(text: str) -> tuple[int, int] | None:
    """Go's ParseQuantity (apimachinery): the value as Go stores it, `digits * 10**exponent`.

    Go keeps a quantity as an int64 with a decimal scale when it fits (the fast path),
    else as a big decimal rounded up to nine places and, for binary suffixes, capped
    at the largest int64. None when Go would refuse the string.
    """
    if not text:
        return None
    if text == "0":
        return (0, 0)
    parts = _split(text)
    if parts is None:
        return None
    negative, num, denom, number, suffix = parts
    interpreted = _interpret(suffix)
    if interpreted is None:
        return None
    base, exponent, binary = interpreted
    if abs(exponent) > _MAX_EXPONENT:
        return None
    mantissa, scale = 1, 0
    if not binary:
        scale = exponent
        precision = 18 - len(num) - len(denom)
    elif not denom:
        mantissa = 1 << exponent
        # int32(float32(exponent)*3/10) is exact for the binary exponents 10, 20, ... 60.
        precision = 15 - len(num) - exponent * 3 // 10 - 1
    else:
        precision = -1
    if precision >= 0 and scale - len(denom) >= -_NANO:
        # Go's overflow check cannot fail here: at most 18 digits, or a binary value the
        # precision test keeps below 2**47.
        value = int(num + denom) * mantissa
        return (-value if negative else value, scale - len(denom))
    # The slow path: inf.Dec.SetString, the suffix folded in, nano round-up, binary cap.
    try:
        sign, digits, dec_exponent = Decimal(number).as_tuple()
    except ArithmeticError:  # Decimal's InvalidOperation: like Dec.SetString, no digits (".")
        return None
    assert isinstance(dec_exponent, int)  # finite: _split passes only a sign, digits and "."
    unscaled = int("".join(map(str, digits)))
    dec_scale = -dec_exponent
    if base == 10:
        dec_scale -= exponent
    else:
        unscaled <<= exponent
    if unscaled != 0:
        if dec_scale > _NANO:
            quotient, remainder = divmod(unscaled, 10 ** (dec_scale - _NANO))
            unscaled = quotient + (1 if remainder else 0)
        else:
            unscaled *= 10 ** (_NANO - dec_scale)
        dec_scale = _NANO
    if binary and unscaled > _MAX_INT64 * 10**dec_scale:  # dec_scale >= 0 for binary suffixes
        unscaled, dec_scale = _MAX_INT64, 0
    return (-unscaled if sign else unscaled, -dec_scale)


def _text(value: object) -> str | None:
    """The string Go would parse: YAML numbers as JSON writes them, strings trimmed.

    `Quantity.UnmarshalJSON` trims spaces before parsing.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        return value.strip()
    return None


def parse_quantity(value: object) -> Fraction | None:
    """The exact value of a Kubernetes quantity (`500m`, `5Gi`, `1e3`, 2); None if Go refuses it."""
    text = _text(value)
    parsed = _go_parse(text) if text is not None else None
    if parsed is None:
        return None
    digits, exponent = parsed
    return Fraction(digits) * Fraction(10) ** exponent


def ceil_value(value: object) -> int | None:
    """`Quantity.Value()`: rounded up, away from zero (`500m` → 1, `-500m` → -1)."""
    parsed = parse_quantity(value)
    if parsed is None:
        return None
    return math.ceil(parsed) if parsed >= 0 else -math.ceil(-parsed)


def is_zero(value: object) -> bool:
    """Whether a quantity is absent, unparseable or zero."""
    parsed = parse_quantity(value)
    return parsed is None or parsed == 0


def approximate_float(value: object) -> float | None:
    """`Quantity.AsApproximateFloat64()`: `float(digits) * math.Pow10(exponent)` as Go does.

    So `0.3` (3 * 10**-1) gives 0.30000000000000004, while `300m` gives 0.3.
    """
    text = _text(value)
    parsed = _go_parse(text) if text is not None else None
    if parsed is None:
        return None
    digits, exponent = parsed
    try:
        base = float(digits)
    except OverflowError:  # big.Float.Float64 saturates to infinity
        base = math.inf if digits > 0 else -math.inf
    return base if exponent == 0 else base * _go_pow10(exponent)


# Go's Quantity formats, as `ParseQuantity` picks them from the suffix.
DECIMAL_SI: Final = "DecimalSI"
BINARY_SI: Final = "BinarySI"
DECIMAL_EXPONENT: Final = "DecimalExponent"
_DECIMAL_BY_EXPONENT: Final = {e: s for s, e in _DECIMAL_SUFFIX.items()}
_BINARY_BY_POWER: Final = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def quantity_format(value: object) -> str:
    """The Format Go's ParseQuantity gives `value`: from its suffix (`Mi` binary, `e3` exponent)."""
    text = _text(value) or ""
    parts = _split(text) if text else None
    suffix = parts[4] if parts else ""
    if suffix in _BINARY_SUFFIX:
        return BINARY_SI
    if suffix and suffix not in _DECIMAL_SUFFIX:
        return DECIMAL_EXPONENT
    return DECIMAL_SI


def format_quantity(value: Fraction, fmt: str) -> str:
    """`Quantity.String()` (CanonicalizeBytes): `1268m`, `968Mi`, `2k`, `1536Mi`, `1e3`.

    Binary values under 1024 or with a fraction fall back to DecimalSI, as in Go; decimal
    forms take the largest exponent (a multiple of 3, nano at least) that keeps the
    mantissa an integer. The value is rounded up to nano first, as Go stores it.
    """
    nanos = math.ceil(value * 10**_NANO)
    if nanos == 0:
        return "0"
    if fmt == BINARY_SI and abs(value) >= 1024 and value.denominator == 1:
        number, power = int(value), 0
        while power < len(_BINARY_BY_POWER) - 1 and number % 1024 == 0:
            number //= 1024
            power += 1
        return f"{number}{_BINARY_BY_POWER[power]}"
    exponent = -_NANO
    while nanos % 1000 == 0 and (fmt == DECIMAL_EXPONENT or exponent < 18):
        nanos //= 1000
        exponent += 3
    if fmt == DECIMAL_EXPONENT:
        return f"{nanos}e{exponent}" if exponent else str(nanos)
    return f"{nanos}{_DECIMAL_BY_EXPONENT[exponent]}"
