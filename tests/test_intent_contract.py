"""Every intent the renderer writes has exactly the shape `schemas.intent` declares."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints, is_typeddict

import pytest
import yaml

from schemas import intent as contract

ROOT = Path(__file__).resolve().parent.parent
SHAPES = {contract.RAYJOB: contract.RayJobIntent, contract.RAYSERVICE: contract.RayServiceIntent}


def _rendered_intents() -> list[tuple[str, dict[str, Any]]]:
    files = sorted((ROOT / "tests" / "golden").glob("*/expected.yaml"))
    files += sorted((ROOT / "examples" / "rendered").glob("*.yaml"))
    found = []
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            labels = ((doc or {}).get("metadata") or {}).get("labels") or {}
            if doc.get("kind") == "ConfigMap" and labels.get("kuberay.io/role") == "intent":
                found.append((f"{path.parent.name}/{path.name}", doc))
    return found


INTENTS = _rendered_intents()


def _check(value: Any, shape: Any, where: str) -> None:
    """Fail unless `value` has the declared type `shape` (TypedDicts: exactly their keys)."""
    if is_typeddict(shape):
        hints = get_type_hints(shape)
        assert isinstance(value, dict), where
        assert set(value) == set(hints), (where, set(value) ^ set(hints))
        for key, hint in hints.items():
            _check(value[key], hint, f"{where}.{key}")
        return
    origin = get_origin(shape)
    if origin is None:
        if shape is Any:
            return
        if shape is type(None):
            assert value is None, where
            return
        assert isinstance(value, shape) and not (shape is int and isinstance(value, bool)), (
            where,
            value,
        )
        return
    args = get_args(shape)
    if origin is list:
        assert isinstance(value, list), where
        for i, item in enumerate(value):
            _check(item, args[0], f"{where}[{i}]")
    elif origin is dict:
        assert isinstance(value, dict), where
        for key, item in value.items():
            _check(key, args[0], where)
            _check(item, args[1], f"{where}.{key}")
    elif str(origin) == "typing.Literal":
        assert value in args, (where, value)
    else:  # a union: one of its members fits
        errors = []
        for arg in args:
            try:
                _check(value, arg, where)
                return
            except AssertionError as exc:
                errors.append(exc)
        raise AssertionError(where, value, errors)


def test_renderer_writes_intents_of_both_kinds() -> None:
    kinds = {json.loads(doc["data"][contract.INTENT_KEY])["kind"] for _, doc in INTENTS}
    assert kinds == set(SHAPES)


@pytest.mark.parametrize(("where", "config_map"), INTENTS, ids=[w for w, _ in INTENTS])
def test_each_rendered_intent_matches_the_contract(where: str, config_map: dict[str, Any]) -> None:
    assert set(config_map["data"]) == {contract.INTENT_KEY}
    intent = json.loads(config_map["data"][contract.INTENT_KEY])
    assert intent["version"] == contract.INTENT_VERSION
    _check(intent, SHAPES[intent["kind"]], where)
