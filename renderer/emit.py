"""Objects to YAML text: the single output format of the renderer.

A small block-style emitter written for speed and for one canonical form: keys in a
fixed order (well-known first, then sorted), 2-space indentation, sequences flush with
their key, no line folding, LF endings, `---` between documents. A string is left
plain only when every YAML 1.1 and 1.2 reader (PyYAML, go-yaml, ruamel) reads it back
as the same string; otherwise it is double-quoted (or a literal block when it has
several clean lines). Round-trip tests guard this.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any, Final

from renderer.manifest import Manifest

_KEY_RANK: Final = {"apiVersion": 0, "kind": 1, "metadata": 2, "spec": 3}
_NESTED_RANK: Final = {"name": 0, "namespace": 1}
# Plain scalars: conservative character set, no indicator at the start, no ": " or " #".
_PLAIN: Final = re.compile(r"^[A-Za-z_/$][A-Za-z0-9_./:=+@$%()\-\[\] ,]*$")
_RESERVED: Final = frozenset(
    {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~", "nan", "inf"}
)
_NUMBERISH: Final = re.compile(r"^[-+]?(\.?[0-9]|\.(inf|nan))", re.IGNORECASE)
_DIGIT_WORD: Final = re.compile(r"^[0-9][0-9A-Za-z.-]*$")
_SAFE_LETTER: Final = re.compile(r"[A-DF-NP-WYZa-df-np-wyz]")
# Characters YAML does not allow unescaped (beyond what JSON escapes already).
_UNPRINTABLE: Final = re.compile("[\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff\ud800-\udfff]")


def _ordered_keys(mapping: Manifest, top: bool) -> list[str]:
    ranks = _KEY_RANK if top else _NESTED_RANK
    return sorted(mapping, key=lambda k: (ranks.get(k, 99), k))


def _double_quoted(text: str) -> str:
    quoted = json.dumps(text, ensure_ascii=False)
    return _UNPRINTABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", quoted)


def _is_plain(text: str) -> bool:
    if not text or text != text.strip() or text.lower() in _RESERVED:
        return False
    if _NUMBERISH.match(text):
        # `5Gi`, `500m`: a letter no number form uses makes it safe (1e3, 0x1f, 0o7, 0b1 are not).
        if text[:2].lower() in ("0x", "0o", "0b"):
            return False
        return _DIGIT_WORD.match(text) is not None and _SAFE_LETTER.search(text) is not None
    if not _PLAIN.match(text):
        return False
    if ": " in text or " #" in text or text.endswith(":") or ", " in text:
        return False
    return "[" not in text and "]" not in text


def _literal_lines(text: str) -> list[str] | None:
    """The lines of a literal block (`|` or `|-`), or None when one cannot hold `text`."""
    if "\n" not in text or "\r" in text or _UNPRINTABLE.search(text):
        return None
    body = text[:-1] if text.endswith("\n") else text
    if body.endswith("\n") or not body:
        return None
    lines = body.split("\n")
    for line in lines:
        if line != line.rstrip(" \t") or (line and not line[0].isprintable()):
            return None
        if any(not ch.isprintable() and ch != "\t" for ch in line):
            return None
    if not lines[0] or lines[0][0] in " \t":
        return None
    return lines


def scalar(value: Any, indent: str) -> str:
    """One scalar in canonical form; `indent` is where a literal block's lines go."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float(value)
    text = str(value)
    if _is_plain(text):
        return text
    lines = _literal_lines(text)
    if lines is not None:
        chomp = "|" if text.endswith("\n") else "|-"
        return chomp + "".join(f"\n{indent}{line}" if line else "\n" for line in lines)
    return _double_quoted(text)


def _float(value: float) -> str:
    if value != value:
        return ".nan"
    if value in (float("inf"), float("-inf")):
        return ".inf" if value > 0 else "-.inf"
    text = repr(value)
    if "e" in text and "." not in text.split("e")[0]:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent}"
    return text


def _key(key: Any) -> str:
    text = scalar(key, "")
    return text if not text.startswith("|") else _double_quoted(str(key))


def _mapping(mapping: Manifest, indent: str, out: list[str], first: str, top: bool) -> None:
    prefix = first
    child = indent + "  "
    for key in _ordered_keys(mapping, top):
        value = mapping[key]
        if isinstance(value, dict) and value:
            out.append(f"{prefix}{_key(key)}:\n")
            _mapping(value, child, out, child, False)
        elif isinstance(value, list) and value:
            out.append(f"{prefix}{_key(key)}:\n")
            _sequence(value, indent, out)
        else:
            out.append(f"{prefix}{_key(key)}: {_inline(value, child)}\n")
        prefix = indent


def _sequence(items: list[Any], indent: str, out: list[str]) -> None:
    child = indent + "  "
    for item in items:
        if isinstance(item, dict) and item:
            _mapping(item, child, out, indent + "- ", False)
        elif isinstance(item, list) and item:
            out.append(f"{indent}-\n")
            _sequence(item, child, out)
        else:
            out.append(f"{indent}- {_inline(item, child)}\n")


def _inline(value: Any, indent: str) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return scalar(value, indent)


def dump(obj: Any) -> str:
    """One object as a YAML document (no `---`), ending with a newline."""
    out: list[str] = []
    if isinstance(obj, dict) and obj:
        _mapping(obj, "", out, "", True)
    elif isinstance(obj, list) and obj:
        _sequence(obj, "", out)
    else:
        out.append(_inline(obj, "  ") + "\n")
    return "".join(out)


def dump_all(objects: Iterable[Any]) -> str:
    """A YAML stream: documents separated by `---` lines."""
    return "---\n".join(dump(obj) for obj in objects)
