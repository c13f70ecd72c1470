"""YAML held inside a string field (`runtimeEnvYAML`, `serveConfigV2`), read as KubeRay reads it.

KubeRay decodes these with sigs.k8s.io/yaml over go-yaml v2: YAML 1.1 scalars (`yes` is
true, `0x10` is 16), the last of duplicate keys wins, and timestamps stay strings (go-yaml
v2 keeps timestamp-like scalars as strings when decoding into interface{}). PyYAML's safe
loader minus its timestamp resolver reads the same; this module is its only user. Pure.
"""

from __future__ import annotations

from typing import Any

import yaml

YAMLError = yaml.YAMLError


class _Loader(yaml.SafeLoader):
    """YAML 1.1 as go-yaml v2 reads it: safe types only, timestamps stay strings."""

    yaml_implicit_resolvers = {  # noqa: RUF012 - PyYAML reads the resolvers from the class
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }


def load(text: str) -> Any:
    """The value of one embedded YAML document; raises `YAMLError` when it is not YAML."""
    return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: no arbitrary objects


def reason(exc: YAMLError) -> str:
    """The one-line cause of a YAML error, without the parser's position banner."""
    problem = getattr(exc, "problem", None)
    return str(problem) if problem else str(exc).splitlines()[0]


def line(exc: YAMLError) -> int | None:
    """The 1-based line of a YAML error inside the string, when the parser knows it."""
    mark = getattr(exc, "problem_mark", None)
    return None if mark is None else int(mark.line) + 1
