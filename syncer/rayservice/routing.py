"""The HTTPRoute of an incremental upgrade: reading its weights, writing its backends (pure).

Only this RayService's backendRefs (`<svc>-<hash>-serve-svc`) are read and replaced; every
other rule and backend, and the fields of existing refs, are kept as they are.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from renderer import naming
from syncer.rayservice.observed import Route

Manifest = dict[str, Any]


def serve_service(generation: str) -> str:
    """`<gen>-serve-svc`: the per-generation serve Service (incremental upgrades)."""
    return naming.serve_service_name(generation)


def _backend_pattern(service: str) -> re.Pattern[str]:
    return re.compile(rf"^({re.escape(service)}-[0-9a-z]{{5}})-serve-svc$")


def is_own_backend(ref: Manifest, service: str) -> str | None:
    """The generation a backendRef points at, when it is one of this RayService's."""
    if ref.get("group") not in (None, "") or ref.get("kind") not in (None, "Service"):
        return None
    found = _backend_pattern(service).match(str(ref.get("name") or ""))
    return found.group(1) if found else None


def route_weights(route: Route, service: str) -> dict[str, int]:
    """Weights of this RayService's backends, by generation (the first rule that has them)."""
    for rule in route.rules:
        weights = {}
        for ref in rule.get("backendRefs") or []:
            generation = is_own_backend(ref, service)
            if generation is not None:
                weights[generation] = int(ref.get("weight", 1))
        if weights:
            return weights
    return {}


def build_rules(
    route: Route, service: str, namespace: str, backends: Sequence[tuple[str, int]], port: int
) -> tuple[Manifest, ...]:
    """The route's rules with this RayService's backends replaced by `backends`.

    Rules without such a backend, and the other backends of a rule, are kept as they are.
    Existing backendRefs keep their fields (port, namespace, filters); weights are always
    written out.
    """
    rules: list[Manifest] = []
    for rule in route.rules:
        refs = rule.get("backendRefs") or []
        own = {is_own_backend(ref, service): ref for ref in refs} if refs else {}
        if not any(generation is not None for generation in own):
            rules.append(rule)
            continue
        new_refs: list[Manifest] = []
        for generation, weight in backends:
            base = own.get(generation)
            ref: Manifest = (
                dict(base)
                if base is not None
                else {"name": serve_service(generation), "namespace": namespace, "port": port}
            )
            ref["weight"] = weight
            new_refs.append(ref)
        new_refs.extend(ref for ref in refs if is_own_backend(ref, service) is None)
        rules.append({**rule, "backendRefs": new_refs})
    return tuple(rules)


def own_refs(rules: Sequence[Manifest], service: str) -> list[list[tuple[str, Any, int]]]:
    """This RayService's backends per rule, as (name, port, weight): what a write changes."""
    return [
        [
            (str(ref.get("name")), ref.get("port"), int(ref.get("weight", 1)))
            for ref in rule.get("backendRefs") or []
            if is_own_backend(ref, service) is not None
        ]
        for rule in rules
    ]
