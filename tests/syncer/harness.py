"""Helpers for syncer tests: render manifests, apply them as a GitOps tool would, wait."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from click.testing import CliRunner

from renderer import compile as compiler
from renderer import sources
from renderer.cli import main
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


def self_heal(kube: Kube, objects: list[Manifest], namespace: str) -> list[str]:
    """The GitOps tool's self-heal: create every rendered Pod that is absent; their names."""
    made = []
    for obj in objects:
        name = str(obj["metadata"]["name"])
        if obj["kind"] == "Pod" and kube.get(PODS, namespace, name) is None:
            apply(kube, [obj], namespace)
            made.append(name)
    return made


def cluster_row(namespace: str, kubeconfig: str, cluster: str) -> list[str]:
    """`kuberay status -n <ns>`: the cluster table's row for `cluster`, split on spaces."""
    result = CliRunner().invoke(main, ["status", "-n", namespace, "--kubeconfig", kubeconfig])
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.stdout.splitlines()]
    found = [r for r in rows if len(r) > 1 and r[1] == cluster]
    assert len(found) == 1, result.stdout
    return found[0]
