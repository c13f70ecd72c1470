"""The shape of Kubernetes objects inside the renderer: plain YAML data, and its copy.

`Manifest` is the one alias for a decoded object (`dict[str, Any]`, the only place `Any`
enters past the YAML/JSON boundary); `clone` deep-copies such data. No other logic here.
"""

from __future__ import annotations

from typing import Any

Manifest = dict[str, Any]


def clone(value: Any) -> Any:
    """Deep-copy plain YAML data (dicts, lists, scalars) much faster than copy.deepcopy."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) for v in value]
    return value
