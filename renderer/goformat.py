"""Go's text forms, wherever KubeRay's output or messages hold text that Go wrote.

`encoding/json` (KubeRay's `--resources` maps, `--runtime-env-json`, `--metadata-json`:
keys sorted, no spaces, HTML characters escaped, floats in Go's shortest form),
`strconv.Quote` / `%q`, `%v` of a string slice, `%f` of a float32 and `strings.TrimSpace`.
The only home of these forms; pure string functions.
"""

from __future__ import annotations

import math
import struct
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


def go_json_float_map(values: dict[str, float]) -> str:
    """Go's JSON for a map[string]float64: keys sorted byte-wise, no spaces.

    Raises:
        ValueError: when a value is infinite or NaN (json.Marshal fails in Go).
    """
    items = sorted(values.items(), key=lambda kv: kv[0].encode())
    inner = ",".join(f"{go_string(k)}:{go_float(v)}" for k, v in items)
    return "{" + inner + "}"


# strconv.Quote's short escapes.
_QUOTE_ESCAPES: Final = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    '"': '\\"',
    "\\": "\\\\",
}
# Go's unicode.IsSpace, what strings.TrimSpace removes.
GO_SPACE: Final = (
    "\t\n\v\f\r \x85\xa0\u1680"
    + "".join(chr(code) for code in range(0x2000, 0x200B))
    + "\u2028\u2029\u202f\u205f\u3000"
)


def go_quote(text: str) -> str:
    """Go's `strconv.Quote`, which is also what `%q` prints for a string."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in _QUOTE_ESCAPES:
            out.append(_QUOTE_ESCAPES[char])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif char.isprintable():
            out.append(char)
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def go_list(items: list[str]) -> str:
    """Go's `%v` of a `[]string`: `[a b]`."""
    return "[" + " ".join(items) + "]"


def go_trim_space(text: str) -> str:
    """Go's `strings.TrimSpace`."""
    return text.strip(GO_SPACE)


def _float32(value: float) -> float:
    rounded: float = struct.unpack("f", struct.pack("f", value))[0]
    return rounded


def go_float32(value: float) -> str:
    """Go's `fmt.Sprintf("%f", float32(value))`."""
    return f"{_float32(value):f}"


def is_positive_float32(value: Any) -> bool:
    """Whether `float32(value) > 0` in Go; an absent value is not."""
    return value is not None and _float32(float(value)) > 0
