"""Go's `encoding/json` text forms, where KubeRay's output embeds JSON that Go wrote.

KubeRay writes `--resources` maps and the submitter's `--runtime-env-json` and
`--metadata-json` with Go's encoder: keys sorted, no spaces, HTML characters escaped,
floats in Go's shortest form. Pure string functions.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any, Final

# encoding/json's escapes: the short ones (Go 1.22 added \b and \f; KubeRay v1.7 builds
# with Go 1.26), HTML-unsafe characters and the JavaScript line separators.
_ESCAPES: Final = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


class GoJsonError(ValueError):
    """A value Go's encoding/json refuses (NaN, an infinity, a YAML-only type)."""


def go_float(value: float) -> str:
    """A float64 as Go's encoding/json writes it: shortest digits, `e` outside [1e-6, 1e21).

    Raises:
        GoJsonError: for infinities and NaN, which Go's json.Marshal refuses too.
    """
    if math.isinf(value) or math.isnan(value):
        raise GoJsonError(f"json: unsupported value: {value}")
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    if 1e-6 <= abs(value) < 1e21:
        text = format(Decimal(repr(value)), "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    # Python's repr already has Go's shortest mantissa and a signed exponent ("1e-07",
    # "1e+21"); Go's encoder then drops one leading zero of a negative exponent.
    mantissa, _, exponent = repr(value).partition("e")
    return f"{mantissa}e{exponent[0]}{exponent[1:].lstrip('0')}"


def go_string(text: str) -> str:
    """A JSON string as Go writes it: HTML characters, controls and U+2028/9 escaped."""
    out = ['"']
    for char in text:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif ord(char) < 0x20:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _key(key: Any) -> str:
    # sigs.k8s.io/yaml turns non-string keys into strings before encoding.
    if key is None:
        return "null"
    if key is True:
        return "true"
    if key is False:
        return "false"
    if isinstance(key, float):
        return go_float(key)
    return str(key)


def go_json(value: Any) -> str:
    """Go's `encoding/json.Marshal` of decoded YAML: sorted keys, compact, HTML-escaped.

    Raises:
        GoJsonError: for NaN, infinities and YAML-only types (sets, binary), which Go refuses.
    """
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, str):
        return go_string(value)
    if isinstance(value, dict):
        items = sorted(((_key(k), v) for k, v in value.items()), key=lambda kv: kv[0].encode())
        return "{" + ",".join(f"{go_string(k)}:{go_json(v)}" for k, v in items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(go_json(v) for v in value) + "]"
    raise GoJsonError(f"json: unsupported type: {type(value).__name__}")
