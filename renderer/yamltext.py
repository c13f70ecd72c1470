"""YAML held inside a string field (`runtimeEnvYAML`, `serveConfigV2`), read as KubeRay reads it.

KubeRay decodes these with sigs.k8s.io/yaml over go-yaml v2: YAML 1.1 scalars (`yes` is
true, `0x10` is 16), the last of duplicate keys wins, and timestamps stay strings (go-yaml
v2 keeps timestamp-like scalars as strings when decoding into interface{}). PyYAML's safe
loader minus its timestamp resolver reads the same; this module is its only user. Also the
one bound on alias expansion (`expanded_size`), which `sources` applies to files. Pure.
"""

from __future__ import annotations

from typing import Any, Final

import yaml

YAMLError = yaml.YAMLError
# Aliases let a short text stand for a huge value (an alias bomb: nine levels of ten
# aliases are 10**9 values); every reader of YAML here refuses more than this.
MAX_EXPANDED_VALUES: Final = 1_000_000


class AliasBombError(yaml.YAMLError):
    """YAML whose aliases expand it beyond MAX_EXPANDED_VALUES values."""


class _Loader(yaml.SafeLoader):
    """YAML 1.1 as go-yaml v2 reads it: safe types only, timestamps stay strings."""

    yaml_implicit_resolvers = {  # noqa: RUF012 - PyYAML reads the resolvers from the class
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }


def expanded_size(value: Any, limit: int) -> int:
    """How many values `value` holds once its aliases are written out, capped at `limit` + 1.

    Shared (aliased) containers are sized once; a container that holds itself counts as
    over the limit.
    """
    sizes: dict[int, int] = {}

    def size(node: Any) -> int:
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            return 1
        key = id(node)
        if key in sizes:
            return sizes[key]
        sizes[key] = limit + 1  # while being sized: a cycle is over the limit
        total = 1
        for child in children:
            total += size(child)
            if total > limit:
                break
        sizes[key] = min(total, limit + 1)
        return sizes[key]

    return size(value)


def load(text: str) -> Any:
    """The value of one embedded YAML document; raises `YAMLError` when it is not YAML."""
    value = yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: no arbitrary objects
    if "&" in text and expanded_size(value, MAX_EXPANDED_VALUES) > MAX_EXPANDED_VALUES:
        raise AliasBombError(
            f"its aliases expand it to more than {MAX_EXPANDED_VALUES} values (an alias bomb, "
            "or an alias inside its own anchor)"
        )
    return value


def reason(exc: YAMLError) -> str:
    """The one-line cause of a YAML error, without the parser's position banner."""
    problem = getattr(exc, "problem", None)
    return str(problem) if problem else str(exc).splitlines()[0]


def line(exc: YAMLError) -> int | None:
    """The 1-based line of a YAML error inside the string, when the parser knows it."""
    mark = getattr(exc, "problem_mark", None)
    return None if mark is None else int(mark.line) + 1
