"""Kubernetes quantities and Go's number formatting, as KubeRay's ray start flags need them.

KubeRay writes CPU, memory and GPU flags as the integer ceiling of a quantity
(`Quantity.Value()`), and the `--resources` JSON with Go's `encoding/json` float form.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from fractions import Fraction
from typing import Final

_SUFFIX: Final = {
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY: Final = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)|[eE]([+-]?\d+))?$"
)


def parse_quantity(value: object) -> Fraction | None:
    """Parse a Kubernetes quantity (`500m`, `5Gi`, `1e3`, 2) exactly; None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(Decimal(repr(value)))
    if not isinstance(value, str):
        return None
    match = _QUANTITY.match(value.strip())
    if match is None:
        return None
    number = Fraction(Decimal(match.group(1)))
    if match.group(3) is not None:
        return number * Fraction(10) ** int(match.group(3))
    return number * _SUFFIX[match.group(2) or ""]


def ceil_value(value: object) -> int | None:
    """`Quantity.Value()`: the quantity rounded up to an integer; None when unparseable."""
    parsed = parse_quantity(value)
    if parsed is None:
        return None
    return math.ceil(parsed)


def is_zero(value: object) -> bool:
    """Whether a quantity is absent, unparseable or zero."""
    parsed = parse_quantity(value)
    return parsed is None or parsed == 0


def go_float(value: float) -> str:
    """Format a float64 the way Go's encoding/json does (shortest form, `1e-7`, `1e+21`)."""
    if value == 0:
        return "0"
    if math.isinf(value) or math.isnan(value):
        raise ValueError(f"{value} has no JSON form")
    magnitude = abs(value)
    if 1e-6 <= magnitude < 1e21:
        text = format(Decimal(repr(value)), "f")
        if "." in text:
            text = text.rstrip("0").rstrip(".")
        return text
    text = repr(value)
    mantissa, _, exponent = text.partition("e")
    sign = exponent[0] if exponent[0] in "+-" else "+"
    digits = exponent.lstrip("+-").lstrip("0") or "0"
    if mantissa.endswith(".0"):
        mantissa = mantissa[:-2]
    return f"{mantissa}e{sign}{digits}"


def go_json_float_map(values: dict[str, float]) -> str:
    """Go's JSON for a map[string]float64: keys sorted byte-wise, no spaces."""
    items = sorted(values.items(), key=lambda kv: kv[0].encode())
    inner = ",".join(f"{_go_string(k)}:{go_float(v)}" for k, v in items)
    return "{" + inner + "}"


def _go_string(text: str) -> str:
    out = ['"']
    for ch in text:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch in "<>&" or ord(ch) < 0x20 or ch in "\u2028\u2029":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)
