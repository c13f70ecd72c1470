"""Every RBAC verb `kuberay syncer-manifests` grants is one the daemon's code sends, and back.

Security review L2: unused verbs widen what a stolen syncer token can do. The calls are
found in the source of `syncer/` (the daemon; `statuscmd` runs with the user's credentials,
and the generic client, informer and cache modules take the resource as a parameter): a
`kube.<method>(RESOURCE, ...)` call, a `Cache.watching(kube, RESOURCE, ...)` (list and
watch), a `status.annotate(..., RESOURCE, ...)` (patch), and a call on a loop variable over
a tuple of resources. A name this scan cannot resolve fails the test, so a new call shape
is noticed rather than skipped. tests/realapi/test_syncer_real.py runs the daemon under the
rendered Role against a real API server, where a missing verb is a 403.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import syncer
from syncer import install as build
from syncer.kube.client import Resource
from tests.paths import REPO

SYNCER = REPO / "syncer"
# Run with other credentials, or generic over the resource (their callers are scanned).
SKIPPED = {"statuscmd.py", "install.py", "kube/client.py", "kube/forwarding.py"}
SKIPPED |= {"kube/informer.py", "kube/cache.py"}
# Calls on a parameter of a generic helper, whose callers are scanned instead.
GENERIC = {("status.py", "resource")}  # status.annotate(kube, cache, resource, ...)
GENERIC |= {("rayjob/actions.py", "resource")}  # _delete(kube, resource, obj), callers below
VERBS = {
    "get": ("get",),
    "create": ("create",),
    "replace": ("update",),
    "patch": ("patch",),
    "delete": ("delete",),
    "list": ("list",),
    "list_pages": ("list",),
    "watch": ("watch",),
}
_CALL = re.compile(r"\b_?kube\.(\w+)\(\s*([\w.]+)")
_WATCHING = re.compile(r"Cache\.watching\(\s*[\w.]+,\s*([\w.]+)")
_ANNOTATE = re.compile(r"status\.annotate\(\s*[^,]+,\s*[^,]+,\s*([^,]+),")
# rayjob/actions.py's _delete(kube, RESOURCE, obj) helper
_DELETE = re.compile(r"(?<![\w.])(?<!def )_delete\(\s*[\w.]+,\s*([\w.]+)")
_LOOP = re.compile(r"for (\w+) in ([\w.]+):")
Grant = tuple[str, str, str]  # (group, resource, verb)


def _resources() -> tuple[dict[str, Resource], dict[str, tuple[Resource, ...]]]:
    """Module-level Resource constants of syncer/, and tuples of them, by name."""
    single: dict[str, Resource] = {}
    tuples: dict[str, tuple[Resource, ...]] = {}
    for info in pkgutil.walk_packages(syncer.__path__, "syncer."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if isinstance(value, Resource):
                assert single.setdefault(name, value) == value, f"{name} means two resources"
            elif isinstance(value, tuple) and value and all(isinstance(v, Resource) for v in value):
                tuples[name] = value
    return single, tuples


def _resolve(name: str, text: str, path: str) -> tuple[Resource, ...]:
    single, tuples = _resources()
    name = name.rpartition(".")[2]
    if name in single:
        return (single[name],)
    loops = [m.group(2).rpartition(".")[2] for m in _LOOP.finditer(text) if m.group(1) == name]
    if loops and all(loop in tuples for loop in loops):
        return tuple(r for loop in loops for r in tuples[loop])
    raise AssertionError(f"{path}: cannot tell which resource {name!r} is")


def used_grants() -> set[Grant]:
    """(group, resource, verb) of every request the daemon's code sends."""
    used: set[Grant] = set()
    for path in sorted(SYNCER.rglob("*.py")):
        relative = path.relative_to(SYNCER).as_posix()
        if relative in SKIPPED:
            continue
        text = path.read_text(encoding="utf-8")
        found: list[tuple[str, tuple[str, ...]]] = []
        for match in _CALL.finditer(text):
            method, name = match.groups()
            if method not in VERBS:
                continue
            found.append((name, VERBS[method]))
        found += [(m.group(1), ("list", "watch")) for m in _WATCHING.finditer(text)]
        found += [(m.group(1), ("delete",)) for m in _DELETE.finditer(text)]
        for match in _ANNOTATE.finditer(text):
            found += [(n, ("patch",)) for n in re.findall(r"\b[A-Z][A-Z_]+\b", match.group(1))]
        for name, verbs in found:
            if (relative, name) in GENERIC:
                continue
            for resource in _resolve(name, text, relative):
                used |= {(resource.group, resource.plural, verb) for verb in verbs}
    return used


def granted(objects: list[dict[str, object]]) -> set[Grant]:
    rules = [
        rule
        for obj in objects
        if obj["kind"] in ("Role", "ClusterRole")
        for rule in obj["rules"]  # type: ignore[attr-defined]
    ]
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_scan_finds_the_calls_it_is_meant_to() -> None:
    used = used_grants()
    # One of each call shape, so a scan that finds nothing cannot pass.
    assert ("", "events", "create") in used  # kube.create(EVENTS, ...)
    assert ("batch", "jobs", "watch") in used  # Cache.watching(engine.kube, JOBS, ...)
    assert ("batch", "jobs", "patch") in used  # status.annotate(..., JOBS if ... else PODS, ...)
    assert ("", "persistentvolumeclaims", "delete") in used  # for resource in RETIRED_RESOURCES
    assert ("coordination.k8s.io", "leases", "update") in used  # self._kube.replace(LEASES, ...)


def test_every_granted_verb_is_used_and_every_used_verb_granted() -> None:
    objects = build.build_syncer_manifests(
        namespace="kuberay-system",
        image="i",
        watch_namespaces=["ml"],
        config={"dashboard_auth_secret": "ray-token"},
    )
    grants = granted(objects)
    used = used_grants()
    assert sorted(grants - used) == [], "granted but never sent"
    assert sorted(used - grants) == [], "sent but not granted"


def test_no_module_escapes_the_scan() -> None:
    # A file that talks to the API server through the generic modules only: skipped ones exist.
    for relative in SKIPPED | {path for path, _ in GENERIC}:
        assert (SYNCER / relative).is_file(), relative
    assert Path(build.__file__).parent == SYNCER
