"""rayStartParams defaults and the `ray start` command string (raycluster.md §2.4).

Mirrors KubeRay's `setMissingRayStartParams`, `generateRayStartCommand` and
`convertParamMap`: flag order, double spacing, boolean handling and Go number forms.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Mapping
from typing import Final

from renderer.goformat import go_json_float_map
from renderer.manifest import Manifest
from renderer.quantity import approximate_float, ceil_value, is_zero

# Flags whose true/false values are written out instead of becoming bare switches.
_VALUED_BOOLEAN_FLAGS: Final = frozenset({"log-color", "include-dashboard", "include-log-monitor"})
_MIG: Final = re.compile(r"nvidia\.com/mig-\d+g\.\d+gb$")
_ACCELERATORS: Final = {"google.com/tpu": "TPU", "aws.amazon.com/neuroncore": "neuron_cores"}
_RESOURCE_QUOTES: Final = "'\"` "
# Go's strconv.ParseInt(s, 10, 32): an optional sign and ASCII digits, nothing else.
_GO_INT: Final = re.compile(r"[+-]?[0-9]+")
_INT32: Final = range(-(2**31), 2**31)


def is_gpu_like(key: str) -> bool:
    """KubeRay's GPU test: the name ends with `gpu`, or is a MIG profile."""
    return key.endswith("gpu") or bool(_MIG.search(key))


def port_param(params: Mapping[str, str], key: str, default: int) -> int:
    """A port from rayStartParams the way KubeRay reads one: int32 or the default.

    KubeRay parses with Go's `strconv.ParseInt(value, 10, 32)` and falls back to the
    default on any error, so spaces, `_` separators and non-ASCII digits, which
    Python's `int()` would accept, give the default here too.
    """
    value = params.get(key)
    if value is None or _GO_INT.fullmatch(value) is None:
        return default
    number = int(value)
    return number if number in _INT32 else default


def apply_group_resources(params: dict[str, str], resources: Manifest | None) -> None:
    """Group-level `resources` → num-cpus / memory / num-gpus / resources (§2.4.3)."""
    if not resources:
        return
    custom: dict[str, float] = {}
    for key, raw in resources.items():
        # KubeRay calls ParseQuantity on the string as it is: unlike the JSON decoding of
        # a container's resources, nothing trims spaces, so " 1" is skipped too.
        amount = approximate_float(raw) if str(raw) == str(raw).strip() else None
        if amount is None:
            continue
        lower = key.lower()
        if lower == "cpu":
            params["num-cpus"] = str(ceil_value(raw))
        elif lower == "memory":
            params["memory"] = str(ceil_value(raw))
        elif is_gpu_like(lower):
            params["num-gpus"] = str(ceil_value(raw))
        else:
            custom[key] = amount
    if custom:
        # json.Marshal refuses an infinite value; KubeRay logs it and sets no `resources`.
        with contextlib.suppress(ValueError):
            params["resources"] = "'" + go_json_float_map(custom) + "'"


def apply_group_labels(params: dict[str, str], labels: Manifest | None) -> None:
    """Group-level `labels` → `labels=k1=v1,k2=v2` (keys sorted, §2.4.4)."""
    if labels:
        params["labels"] = ",".join(f"{k}={labels[k]}" for k in sorted(labels))


def _decode_resources(text: str | None) -> dict[str, float] | None:
    if text is None:
        return {}
    try:
        decoded = json.loads(text.strip(_RESOURCE_QUOTES))
    except ValueError:
        return None
    if not isinstance(decoded, dict):
        return None
    result: dict[str, float] = {}
    for key, value in decoded.items():
        # Go decodes into map[string]float64: only finite numbers (Python also reads NaN,
        # Infinity and out-of-range numbers as floats).
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        if not math.isfinite(value):
            return None
        result[str(key)] = float(value)
    return result


def apply_container_resources(params: dict[str, str], container: Manifest) -> None:
    """Fill num-cpus, memory, num-gpus and accelerator resources from the container (§2.4.2)."""
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    if "num-cpus" not in params:
        if "cpu" in limits and not is_zero(limits["cpu"]):
            params["num-cpus"] = str(ceil_value(limits["cpu"]))
        elif "cpu" in requests and not is_zero(requests["cpu"]):
            params["num-cpus"] = str(ceil_value(requests["cpu"]))
    if "memory" not in params and "memory" in limits and not is_zero(limits["memory"]):
        params["memory"] = str(ceil_value(limits["memory"]))
    if not limits:
        return
    decoded = _decode_resources(params.get("resources"))
    if decoded is None:
        # KubeRay logs the decode error and infers neither GPUs nor accelerators.
        return
    accelerator_added = "TPU" in decoded or "neuron_cores" in decoded
    for key in sorted(limits, key=str.encode):
        value = limits[key]
        if "num-gpus" not in params and is_gpu_like(key) and not is_zero(value):
            params["num-gpus"] = str(ceil_value(value))
        if not accelerator_added and key in _ACCELERATORS and not is_zero(value):
            amount = approximate_float(value)
            assert amount is not None  # is_zero said it parses
            decoded[_ACCELERATORS[key]] = amount
            try:
                params["resources"] = "'" + go_json_float_map(decoded) + "'"
            except ValueError:
                return  # KubeRay returns json.Marshal's error: no later key is looked at
            accelerator_added = True


def start_command(params: dict[str, str], *, head: bool) -> str:
    """Serialize rayStartParams into KubeRay's exact `ray start` string (§2.4.5)."""
    parts = ["ray start --head " if head else "ray start "]
    for key in sorted(params, key=str.encode):
        value = str(params[key])
        lowered = value.lower()
        if lowered in ("true", "false") and key not in _VALUED_BOOLEAN_FLAGS:
            if lowered == "true":
                parts.append(f" --{key} ")
            continue
        parts.append(f" --{key}={value} ")
    return "".join(parts)
