"""What a GitOps tool does with the renderer's output, against a real API server.

`render` and `syncer_manifests` run the `kuberay` CLI (its stable surface) and parse the
YAML stream it prints. `apply_all` server-side applies objects in dependency order as one
field manager (Argo CD and Flux both use server-side apply), optionally as a dry run, with
`fieldValidation=Strict`, and returns every rejection instead of stopping at the first.
`Applier` is an automated sync with pruning: what left git is deleted, unless it carries
the renderer's prune protection (an old RayService generation, a retained claim).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from renderer.naming import PRUNE_PROTECTION
from tests.realapi.rest import Manifest, Rest, RestError

KUBERAY: Final = Path(sys.executable).parent / "kuberay"
GITOPS_MANAGER: Final = "argocd-controller"
RENDERED_LABEL: Final = ("app.kubernetes.io/managed-by", "kuberay-render")
# Objects others refer to go first: a Pod's ServiceAccount must exist even for a dry run.
_ORDER: Final = {
    "CustomResourceDefinition": 0,
    "Namespace": 1,
    "ServiceAccount": 2,
    "Secret": 3,
    "ConfigMap": 3,
    "Role": 4,
    "ClusterRole": 4,
    "RoleBinding": 5,
    "ClusterRoleBinding": 5,
    "PersistentVolumeClaim": 6,
    "Service": 7,
    "Pod": 9,
    "Job": 10,
}


def _cli(args: list[str], stdin: str | None = None) -> list[Manifest]:
    done = subprocess.run(
        [str(KUBERAY), *args], input=stdin, capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        raise AssertionError(f"kuberay {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def render(source: str | Path, namespace: str, *extra: str) -> list[Manifest]:
    """`kuberay render` of a file/directory (Path) or manifest text (str, through stdin)."""
    if isinstance(source, Path):
        return _cli(["render", str(source), "-n", namespace, *extra])
    return _cli(["render", "-", "-n", namespace, *extra], stdin=source)


def syncer_manifests(namespace: str, watch: str, *extra: str) -> list[Manifest]:
    """`kuberay syncer-manifests` for a syncer in `namespace` watching `watch`."""
    return _cli(["syncer-manifests", "-n", namespace, "--watch-namespace", watch, *extra])


def is_rendered(obj: Manifest) -> bool:
    """Whether the renderer made this object (not a pass-through document)."""
    key, value = RENDERED_LABEL
    return (obj["metadata"].get("labels") or {}).get(key) == value


def ordered(objects: Iterable[Manifest]) -> list[Manifest]:
    """Objects in the order a GitOps tool's sync waves would apply them."""
    return sorted(objects, key=lambda o: _ORDER.get(str(o["kind"]), 8))


def name_of(obj: Manifest) -> str:
    """`Kind namespace/name` for messages."""
    meta = obj["metadata"]
    return f"{obj['kind']} {meta.get('namespace', '')}/{meta['name']}"


def apply_all(
    rest: Rest,
    objects: Iterable[Manifest],
    *,
    namespace: str,
    manager: str = GITOPS_MANAGER,
    dry_run: bool = False,
    force: bool = False,
) -> dict[str, str]:
    """Server-side apply every object; returns `{object: rejection}` (empty: all accepted)."""
    failures: dict[str, str] = {}
    for obj in ordered(objects):
        try:
            rest.apply(obj, manager=manager, namespace=namespace, dry_run=dry_run, force=force)
        except RestError as exc:
            failures[name_of(obj)] = f"{exc.status} {exc.reason}: {_message(exc.body)}"
        except KeyError as exc:  # the kind is not served by this server at all
            failures[name_of(obj)] = f"not served: {exc}"
    return failures


def _message(body: Any) -> str:
    return str(body.get("message", body)) if isinstance(body, dict) else str(body)


def referenced_service_accounts(objects: Iterable[Manifest]) -> set[tuple[str, str]]:
    """(namespace, name) of every ServiceAccount a rendered Pod or Job template names."""
    found = set()
    for obj in objects:
        spec = obj.get("spec") or {}
        if obj["kind"] == "Job":
            spec = (spec.get("template") or {}).get("spec") or {}
        elif obj["kind"] != "Pod":
            continue
        name = spec.get("serviceAccountName")
        if name:
            found.add((str(obj["metadata"].get("namespace", "")), str(name)))
    return found


def prune_protected(obj: Manifest) -> bool:
    """Whether the GitOps tool keeps `obj` when it leaves git (Argo CD's `Prune=false`)."""
    annotations = obj["metadata"].get("annotations") or {}
    key = "argocd.argoproj.io/sync-options"
    return PRUNE_PROTECTION[key] in str(annotations.get(key, "")).split(",")


@dataclass
class Applier:
    """A GitOps tool's automated sync with pruning, as field manager `manager`.

    `sync` applies every object of the current render and deletes the objects of earlier
    renders that left git, except prune-protected ones: those are `kept` (and stay tracked,
    as Argo CD keeps listing them as extraneous); what it deleted is in `pruned`.
    """

    rest: Rest
    namespace: str
    manager: str = GITOPS_MANAGER
    tracked: dict[str, Manifest] = field(default_factory=dict)
    pruned: list[str] = field(default_factory=list)
    kept: set[str] = field(default_factory=set)

    def sync(self, objects: list[Manifest]) -> None:
        """Apply `objects` (every rejection fails the test), then prune what left git."""
        failures = apply_all(self.rest, objects, namespace=self.namespace, manager=self.manager)
        assert not failures, failures
        wanted = {name_of(o): o for o in objects}
        for name, obj in self.tracked.items():
            if name in wanted:
                continue
            if prune_protected(obj):
                self.kept.add(name)
                continue
            self.rest.delete(self.rest.path_of(obj, self.namespace))
            self.pruned.append(name)
        kept = {name: self.tracked[name] for name in self.kept if name not in wanted}
        self.tracked = {**kept, **wanted}
