"""Helpers for syncer tests: render manifests, apply them as a GitOps tool would, wait."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from renderer import compile as compiler
from renderer import sources
from renderer.options import RenderOptions
from syncer.kube.client import (
    CONFIGMAPS,
    JOBS,
    PODS,
    SERVICES,
    Kube,
    Resource,
)

Manifest = dict[str, Any]
KINDS: dict[str, Resource] = {r.kind: r for r in (CONFIGMAPS, JOBS, PODS, SERVICES)}


def render(text: str, namespace: str, options: RenderOptions | None = None) -> list[Manifest]:
    """Render manifest text into objects for `namespace`."""
    options = options or RenderOptions(namespace=namespace)
    documents, problems = sources.parse_text(text, "test.yaml")
    assert not problems, problems
    return list(compiler.render(documents, options).objects)


def apply(kube: Kube, objects: list[Manifest], namespace: str) -> list[Manifest]:
    """Create every object (the GitOps tool's first sync); kinds without a REST mapping here
    (NetworkPolicy, Ingress, ...) are skipped. Returns what was created."""
    created = []
    for obj in objects:
        resource = KINDS.get(str(obj["kind"]))
        if resource is None:
            continue
        body = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
        created.append(kube.create(resource, namespace, body))
    return created


def wait_until(
    predicate: Callable[[], Any], *, timeout: float = 20.0, interval: float = 0.05, what: str = ""
) -> Any:
    """Poll `predicate` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)
