"""Ray version strings as KubeRay reads them: Kubernetes "generic" versions.

KubeRay compares `spec.rayVersion` with `k8s.io/apimachinery/pkg/util/version.ParseGeneric`
(raycluster.md §2.8): optional surrounding whitespace, an optional leading `v`, two or more
dot-separated numeric fields (the first without leading zeros), then any text, which is ignored.
Pure functions; the rule modules decide what a version gates.
"""

from __future__ import annotations

import json
import re
from typing import Final

# Go's `\s` is ASCII-only; `.` does not match a newline in Go's RE2 nor in Python.
_GENERIC: Final = re.compile(r"[\t\n\f\r ]*v?([0-9]+(?:\.[0-9]+)*)(.*)")
_UINT_MAX: Final = 2**64 - 1

Version = tuple[int, int, int]


def _quote(text: str) -> str:
    """Approximate Go's `%q` for the strings found in version fields."""
    return json.dumps(text, ensure_ascii=False)


def _components(text: str) -> tuple[list[int] | None, str]:
    """Parse `text` into its numeric components, or return the Go error text."""
    match = _GENERIC.fullmatch(text)
    if match is None:
        return None, f"could not parse {_quote(text)} as version"
    fields = match.group(1).split(".")
    if len(fields) < 2:
        return None, f"illegal version string {_quote(text)}"
    if fields[0].startswith("0") and fields[0] != "0":
        return (
            None,
            f"illegal zero-prefixed version component {_quote(fields[0])} in {_quote(text)}",
        )
    numbers = [int(field) for field in fields]
    for field, number in zip(fields, numbers, strict=True):
        if number > _UINT_MAX:
            return None, (
                f"illegal non-numeric version component {_quote(field)} in {_quote(text)}: "
                f"strconv.ParseUint: parsing {_quote(field)}: value out of range"
            )
    return numbers, ""


def version_error(text: str) -> str | None:
    """Return KubeRay's parse error for `text`, or None when it is a valid generic version."""
    numbers, error = _components(text)
    return None if numbers is not None else error


def parse_ray_version(text: str) -> Version | None:
    """Parse a generic version into (major, minor, patch); None when KubeRay cannot parse it.

    A missing patch is 0 (`2.53` is 2.53.0); fields after the third are dropped, which never
    changes a comparison with a three-field minimum.
    """
    numbers, _ = _components(text)
    if numbers is None:
        return None
    major, minor, *rest = numbers
    return (major, minor, rest[0] if rest else 0)


def at_least(text: str, minimum: str) -> bool:
    """Whether `text` parses and is >= `minimum` (both generic versions).

    Raises:
        ValueError: when `minimum` itself is not a valid version (a programming error).
    """
    floor = parse_ray_version(minimum)
    if floor is None:
        raise ValueError(f"invalid minimum version {minimum!r}")
    version = parse_ray_version(text)
    return version is not None and version >= floor
